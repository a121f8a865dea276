//===- WritableTest.cpp - Writers refuse what the readers cannot read -----===//
//
// Models built through the API (as passes build them) that no reader would
// accept: saveModel refuses each with the reason, in every format, and
// writes nothing. And the .mil writer's promise under interrupts: the text
// on disk always names weights that are there.
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"

#include "TestSupport.h"
#include "io/WeightFile.h"
#include "ir/Verifier.h"
#include "support/Error.h"
#include "support/TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <random>

#include <sys/wait.h>
#include <unistd.h>

using namespace anefit;
using anefit::test::errorOf;
using anefit::test::ScratchDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

/// main(x) -> relu(x), with the names given.
std::unique_ptr<Model> reluModel(const std::string &opName = "y",
                                 std::vector<int64_t> shape = {1, 4}) {
  auto model = std::make_unique<Model>();
  model->specificationVersion = 9;
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Type t = Type::tensor(DType::F32, shape);
  Value *x = f->addInput("x", t);
  auto op = std::make_unique<Operation>("relu", opName);
  op->setInput("x", Binding::of(x));
  Value *y = op->addOutput("y", t);
  f->body->append(std::move(op));
  f->body->outputs = {y};
  synthesizeDescription(*model);
  return model;
}

/// Wraps the body of main in `depth` nested cond blocks.
std::unique_ptr<Model> nestedModel(int depth) {
  auto model = reluModel();
  Function &f = *model->program->functions[0];
  Block *block = f.body.get();
  for (int i = 0; i < depth; ++i) {
    auto op = std::make_unique<Operation>("cond", "c" + std::to_string(i));
    op->setInput("pred", Binding::of(f.inputs[0].get()));
    Operation *placed = block->append(std::move(op));
    block = placed->addBlock();
  }
  return model;
}

TEST(Writable, BlocksNestedPastTheReadersLimit) {
  EXPECT_EQ(unwritableReason(*nestedModel(kMaxBlockNesting)), "");
  EXPECT_THAT(unwritableReason(*nestedModel(kMaxBlockNesting + 1)),
              HasSubstr("blocks nested deeper than 32 levels"));
  ScratchDir dir;
  for (const char *name : {"deep.mlpackage", "deep.mil"})
    EXPECT_THAT(errorOf([&] { saveModel(*nestedModel(47), dir.file(name)); }),
                HasSubstr("cannot write this model: function 'main'"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Writable, NamesThatAreNotUtf8) {
  EXPECT_EQ(unwritableReason(*reluModel("caf\xc3\xa9")), "");
  EXPECT_THAT(unwritableReason(*reluModel("caf\xe9")), HasSubstr("an op name is not UTF-8"));
  auto model = reluModel();
  model->description.metadata.userDefined["k"] = std::string("\xff\xfe");
  EXPECT_THAT(unwritableReason(*model), HasSubstr("a user-defined metadata value is not UTF-8"));
  ScratchDir dir;
  EXPECT_THAT(errorOf([&] { saveModel(*reluModel("caf\xe9"), dir.file("m.mlpackage")); }),
              HasSubstr("m.mlpackage: cannot write this model"));
}

TEST(Writable, ShapesWhoseCountOverflows) {
  auto model = reluModel("y", {int64_t(1) << 32, int64_t(1) << 32, 2});
  EXPECT_THAT(unwritableReason(*model), HasSubstr("has more elements than fit in int64"));
}

TEST(Writable, ConstantsShorterThanTheirType) {
  auto model = reluModel();
  Block &b = *model->program->functions[0]->body;
  auto c = std::make_unique<Operation>("const", "c");
  Constant value = Constant::fromF32({1, 2, 3, 4}, {4});
  value.bytes.resize(8); // as a damaged reader or a buggy pass might leave it
  c->attributes["val"] = std::make_shared<const Constant>(value);
  c->addOutput("c", value.type);
  b.ops.insert(b.ops.begin(), std::move(c));
  b.ops.front()->parent = &b;
  EXPECT_THAT(unwritableReason(*model), HasSubstr("holds 8 bytes, fewer than its type needs"));
}

TEST(Writable, DuplicateResultsAreNotWritten) {
  auto model = reluModel();
  Operation &op = *model->program->functions[0]->body->ops[0];
  op.addOutput("y", op.outputs[0]->type);
  EXPECT_THAT(unwritableReason(*model),
              HasSubstr("value '%y' (op result) is defined more than once"));
}

/// A .mil with its weights, replaced again and again while being killed at
/// random moments: after every kill the text on disk loads, its weights are
/// there and whole, and no temporary is left (7 in 60 interrupts used to
/// pair old text with new weights, 22 in 60 to leave temporaries).
TEST(Writable, InterruptedMilTextAlwaysMatchesItsWeights) {
  ScratchDir dir;
  std::string src = dir.file("src.bin");
  {
    WeightWriter w(src);
    std::vector<float> values(1 << 16, 1.5f);
    w.append(DType::F32, {reinterpret_cast<const uint8_t *>(values.data()), values.size() * 4});
    w.finish();
  }
  auto store = WeightFile::open(src);
  auto model = reluModel();
  Function &f = *model->program->functions[0];
  auto c = std::make_unique<Operation>("const", "w");
  Type wt = Type::tensor(DType::F32, std::vector<int64_t>{1 << 16});
  c->attributes["val"] = std::make_shared<const Constant>(
      Constant::fromBlob(wt, BlobRef{"@model_path/weights/weight.bin", 64, store}));
  c->addOutput("w", wt);
  f.body->ops.insert(f.body->ops.begin(), std::move(c));
  f.body->ops.front()->parent = f.body.get();
  fs::create_directories(dir.path() / "out");
  std::string mil = dir.file("out/m.mil");
  SaveOptions force;
  force.force = true;
  saveModel(*model, mil, force);

  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::signal(SIGINT, SIG_DFL);
      for (;;)
        saveModel(*model, mil, force);
    }
    ::usleep(1000 + rng() % 20000);
    ::kill(child, SIGINT);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    auto loaded = loadModel(mil);
    const Constant *w = loaded->program->functions[0]->body->ops[0]->attribute("val");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->data().size(), size_t(4) << 16) << "round " << round;
    for (const auto &e : fs::recursive_directory_iterator(dir.path() / "out"))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos)
          << e.path() << " left after round " << round;
  }
}

} // namespace
