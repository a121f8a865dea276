//===- CloneTest.cpp - Deep copies of models ------------------------------===//
#include "ir/Clone.h"
#include "io/ModelIO.h"
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "ir/Verifier.h"

#include <gtest/gtest.h>

using namespace anefit;

namespace {

constexpr const char *kTwoFunctions =
    R"(main[CoreML8](%x: (1, 4, fp16)(Tensor), %s: (1, 4, fp16)(State)) {
  block0() {
    %r: (1, 4, fp16)(Tensor) = read_state(input=%s, name="r")
    %y: (1, 4, fp16)(Tensor) = add(x=%x, y=%r, name="y")
    coreml_update_state(state=%s, value=%y, name="w")
  } -> (%y)
}
other[CoreML8](%x: (1, 4, fp16)(Tensor)) {
  block0() {
    %z: (1, 4, fp16)(Tensor) = relu(x=%x, name="z")
  } -> (%z)
}
)";

} // namespace

TEST(CloneModel, CopiesEverythingAndPrintsTheSame) {
  auto model = parseModelText(kTwoFunctions, "two.mil", nullptr);
  model->description.metadata.userDefined["k"] = "v";
  model->debugHandles["y"] = {3, 4};
  model->origin = "method forward, delegate 0 (CoreMLBackend)";
  auto copy = cloneModel(*model);
  EXPECT_EQ(modelToString(*copy), modelToString(*model));
  EXPECT_EQ(copy->specificationVersion, model->specificationVersion);
  EXPECT_EQ(copy->description.metadata.userDefined.at("k"), "v");
  EXPECT_EQ(copy->debugHandles.at("y"), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(copy->origin, model->origin);
  EXPECT_EQ(copy->sourcePath, model->sourcePath);
  EXPECT_FALSE(hasErrors(verifyModel(*copy)));
}

TEST(CloneModel, CopyIsIndependentOfTheOriginal) {
  auto model = parseModelText(kTwoFunctions, "two.mil", nullptr);
  std::string before = modelToString(*model);
  auto copy = cloneModel(*model);
  Function *main = copy->program->findFunction("main");
  ASSERT_NE(main, nullptr);
  // Every operand of the copy points into the copy.
  for (const auto &op : main->body->ops)
    for (Value *v : op->operandValues()) {
      bool inCopy = false;
      for (const auto &in : main->inputs)
        inCopy |= in.get() == v;
      for (const auto &other : main->body->ops)
        for (const auto &out : other->outputs)
          inCopy |= out.get() == v;
      EXPECT_TRUE(inCopy) << op->name << " reads a value outside the copy";
    }
  for (Value *v : main->body->outputs)
    EXPECT_EQ(v->definingOp->parentFunction(), main);
  // Rewriting the copy leaves the original as it was.
  main->body->erase(main->body->ops.back().get());
  main->inputs.front()->name = "renamed";
  copy->description.metadata.userDefined["k"] = "changed";
  EXPECT_EQ(modelToString(*model), before);
  EXPECT_NE(modelToString(*copy), before);
}

TEST(CloneModel, SharesWeightStores) {
  auto model =
      loadModel(std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/lfm2_shortconv/model.mlpackage");
  ASSERT_FALSE(model->weightFiles.empty());
  auto copy = cloneModel(*model);
  for (const auto &[name, store] : model->weightFiles)
    EXPECT_EQ(copy->weightFiles.at(name).get(), store.get());
  EXPECT_EQ(modelToString(*copy), modelToString(*model));
}
