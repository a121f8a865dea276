//===- SplitTest.cpp - The split driver: plan, regions, proof -------------===//
#include "partition/Split.h"
#include "ir/AsmParser.h"
#include "partition/PlanJson.h"
#include "support/Error.h"

#include <gtest/gtest.h>

using namespace anefit;
using namespace anefit::partition;

namespace {

/// A reduce_prod (CPU) between matmuls, small enough that fp16 stays finite
/// (a product of 64 random values would not, and NaN equals NaN).
std::unique_ptr<Model> splitExample() {
  return parseModelText(R"(
main[CoreML8](%x: (1, 4, 4, fp16)(Tensor), %w: (1, 4, 4, fp16)(Tensor)) {
  block0() {
    %a: (1, 4, 4, fp16)(Tensor) = matmul(x=%x, y=%w, name="aten_matmul_default")
    %r: (1, 1, 4, fp16)(Tensor) = reduce_prod(x=%a, axes=[1], keep_dims=True, name="aten_prod_dim_int_0")
    %b: (1, 4, 4, fp16)(Tensor) = mul(x=%a, y=%r, name="aten_mul_tensor_1")
    %c: (1, 4, 4, fp16)(Tensor) = matmul(x=%b, y=%w, name="aten_matmul_default_1")
  } -> (%c)
}
)",
                        "split.mil", nullptr);
}

SplitOptions keepEveryAneOp() {
  SplitOptions o;
  o.partition.absorbSmallRegions = false;
  return o;
}

} // namespace

TEST(Split, ProvesTheChainInMemory) {
  auto model = splitExample();
  SplitOptions o = keepEveryAneOp();
  o.verify = true;
  o.steps = 2;
  SplitResult r = splitModel(*model, o);
  ASSERT_EQ(r.plan.functions.size(), 1u);
  EXPECT_EQ(r.plan.functions[0].regions.size(), 3u);
  // CPU (matmul, reduce_prod), ANE (mul), CPU (matmul): none absorbed.
  EXPECT_EQ(r.plan.functions[0].aneRegions(), 1u);
  for (const Region &region : r.plan.functions[0].regions)
    EXPECT_EQ(region.absorbedOps(), 0u);
  EXPECT_TRUE(r.writtenModels.empty());
  ASSERT_EQ(r.verifications.size(), 1u);
  const SplitVerification &v = r.verifications[0];
  EXPECT_EQ(v.function, "main");
  EXPECT_EQ(v.regions, 3u);
  EXPECT_TRUE(v.comparison.ok()) << v.comparison.firstMismatch();
  EXPECT_EQ(v.comparison.compared(), 2u * 4 * 4);
  EXPECT_EQ(v.comparison.maxAbsDiff(), 0.0);
  EXPECT_TRUE(r.ok());
}

TEST(Split, CountsAneRegionsAndAbsorbedOps) {
  auto model = splitExample();
  SplitResult r = splitModel(*model, SplitOptions{});
  const FunctionPlan &fp = r.plan.functions[0];
  size_t absorbed = 0;
  for (const Region &region : fp.regions)
    absorbed += region.absorbedOps();
  // Absorbing the one-op ANE run (mul) leaves one CPU region of four ops.
  EXPECT_EQ(fp.regions.size(), 1u);
  EXPECT_EQ(fp.aneRegions(), 0u);
  EXPECT_EQ(fp.regions[0].ops.size(), 4u);
  EXPECT_EQ(absorbed, 1u);
}

TEST(Split, FindsARegionThatComputesSomethingElse) {
  auto model = splitExample();
  SplitResult r = splitModel(*model, keepEveryAneOp());
  const FunctionPlan &fp = r.plan.functions[0];
  std::vector<std::unique_ptr<Model>> regions;
  for (size_t i = 0; i < fp.regions.size(); ++i)
    regions.push_back(extractRegion(*model, fp, i));
  for (auto &op : regions[1]->program->functions.front()->body->ops)
    if (op->type == "mul")
      op->type = "add";
  runtime::Comparison cmp = compareRegionChain(*model, fp, regions, 1, 0);
  EXPECT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.firstMismatch().rfind("main: step 0: output 'c': element ", 0), 0u)
      << cmp.firstMismatch();
}

TEST(Split, PlanJsonAndSkipList) {
  auto model = splitExample();
  SplitResult r = splitModel(*model, keepEveryAneOp());
  std::string json = renderPlanJson(r.plan, CostModel(), true);
  EXPECT_NE(json.find("\"schema\": \"anefit.split/1\""), std::string::npos);
  EXPECT_NE(json.find("\"model\": \"main_region0_cpu.mlpackage\""), std::string::npos);
  std::string skip = skipListSnippet(r.plan);
  EXPECT_NE(skip.find("\"aten.prod.dim_int\",  # ANE-OP-003"), std::string::npos);
  SplitOptions bad;
  bad.steps = 0;
  EXPECT_THROW(splitModel(*model, bad), InputError);
}

TEST(ExportAdvice, MergesTheDelegatesOfOneProgram) {
  Plan a, b;
  a.skipOps.push_back({"aten.index.tensor", {"gather_0"}, {"ANE-OP-007"}});
  a.skipOps.push_back({"aten.embedding.default", {"gather_1"}, {"ANE-OP-007"}});
  a.partitionerArguments.push_back(
      {"take_over_mutable_buffer", "False", "states as inputs", {"ANE-STATE-001"}});
  b.skipOps.push_back({"aten.index.tensor", {"gather_0"}, {"ANE-OP-007", "ANE-DTYPE-002"}});
  b.partitionerArguments.push_back(
      {"take_over_mutable_buffer", "False", "states as inputs", {"ANE-STATE-002"}});
  b.unmappedCpuOps.push_back("main/cast_3");
  Plan m = mergeExportAdvice({a, b});
  EXPECT_TRUE(m.functions.empty());
  ASSERT_EQ(m.skipOps.size(), 2u);
  EXPECT_EQ(m.skipOps[0].atenOp, "aten.embedding.default");
  EXPECT_EQ(m.skipOps[1].atenOp, "aten.index.tensor");
  EXPECT_EQ(m.skipOps[1].milOps.size(), 2u); // one per delegate
  EXPECT_EQ(m.skipOps[1].rules, (std::vector<std::string>{"ANE-OP-007", "ANE-DTYPE-002"}));
  ASSERT_EQ(m.partitionerArguments.size(), 1u);
  EXPECT_EQ(m.partitionerArguments[0].rules,
            (std::vector<std::string>{"ANE-STATE-001", "ANE-STATE-002"}));
  EXPECT_EQ(m.unmappedCpuOps, (std::vector<std::string>{"main/cast_3"}));
  std::string snippet = skipListSnippet(m);
  EXPECT_NE(snippet.find("\"aten.index.tensor\",  # ANE-OP-007, ANE-DTYPE-002"), std::string::npos)
      << snippet;
  EXPECT_EQ(snippet.find("take_over_mutable_buffer=False"),
            snippet.rfind("take_over_mutable_buffer=False"))
      << snippet;
}
