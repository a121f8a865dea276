//===- FixFileTest.cpp - fix from a file to a file, .pte included ---------===//
//
// fixFile is `anefit fix IN -o OUT` without the printing: the committed
// export_llm program is fixed into a new .pte whose payload reads back with
// the same interface and write-back, checks clean and steps like the
// original; the refusals (an interface change, a .pte from a package, a
// selector out of range, an existing output) write nothing.
//
//===----------------------------------------------------------------------===//
#include "fix/FixFile.h"

#include "TestSupport.h"
#include "ane/AneRules.h"
#include "io/ModelIO.h"
#include "support/Error.h"
#include "support/TestUtil.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace anefit;
using anefit::test::errorOf;
using anefit::test::ScratchDir;

namespace {

std::string fixture(const std::string &rel) {
  return std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/" + rel;
}

/// Findings that predict a compile or runtime failure.
size_t blockingFindings(const ane::CheckReport &report) {
  size_t n = 0;
  for (const ane::Finding &f : report.findings)
    n += f.effect == ane::Effect::CompileFail || f.effect == ane::Effect::RuntimeFail;
  return n;
}

} // namespace

TEST(FixFile, RewritesTheCoreMLPayloadOfAnExportLlmProgram) {
  ScratchDir dir;
  std::string in = fixture("pte/lfm2_export_llm_fp16.pte");
  std::string out = dir.file("y.pte");
  std::vector<std::string> seen;
  FixFileOptions file;
  file.onFixed = [&](const FixedModel &m) { seen.push_back(m.where + " " + m.label); };
  FixFileResult r = fixFile(in, out, FixOptions{}, file);

  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.program);
  EXPECT_EQ(r.output, out);
  EXPECT_EQ(r.stateMapPath, "");
  EXPECT_EQ(seen, (std::vector<std::string>{in + "#0 forward/delegate 0 (CoreMLBackend)"}));
  ASSERT_EQ(r.models.size(), 1u);
  const FixResult &fix = r.models[0].result;
  // Picked for the blocking (at-risk) ANE-STATE-006 of the plain-input caches,
  // and for the RMSNorms that square x in fp16 (ANE-DTYPE-005).
  EXPECT_EQ(fix.pickedFor, (std::vector<std::string>{"ANE-STATE-006", "ANE-DTYPE-005"}));
  EXPECT_EQ(fix.pipeline.rfind("kv-write-static", 0), 0u) << fix.pipeline;
  EXPECT_GT(blockingFindings(fix.before), 0u);
  EXPECT_EQ(blockingFindings(fix.after), 0u);
  // Proven with ExecuTorch's write-back carried: 8 steps, the logits and the
  // 22 written-back buffers compared at each.
  EXPECT_EQ(fix.verification.status, FixVerification::Status::Same);
  EXPECT_EQ(fix.verification.steps, 8);
  EXPECT_EQ(fix.verification.comparison.compared(), 110592u);
  EXPECT_EQ(r.models[0].original->hostWriteBacks.size(), 22u);

  // The written program: one delegate, the rewrite inside, the interface and
  // the write-back of the original; it checks clean and steps alike.
  std::vector<EmbeddedModel> written = loadPteModels(out);
  ASSERT_EQ(written.size(), 1u);
  const Model &y = *written[0].model;
  EXPECT_EQ(interfaceDifference(*r.models[0].original, y), "");
  EXPECT_EQ(y.hostWriteBacks.size(), 22u);
  EXPECT_EQ(blockingFindings(ane::checkModel(y)), 0u);
  EXPECT_NE(ane::checkModel(y).functions.at(0).aneOps,
            ane::checkModel(*r.models[0].original).functions.at(0).aneOps);
  runtime::Comparison same = compareRewrite(*r.models[0].original, y, StateMap{}, 4, /*seed=*/3,
                                            runtime::Tolerance{1e-4, 1e-3});
  EXPECT_TRUE(same.ok()) << same.firstMismatch();
  EXPECT_GT(same.compared(), 0u);
}

TEST(FixFile, RefusesARewriteThatChangesTheDelegateInterface) {
  ScratchDir dir;
  std::string out = dir.file("s.pte");
  FixOptions options;
  options.passes = "state-to-io";
  options.verify = FixVerify::Never;
  size_t fixed = 0;
  FixFileOptions file;
  file.onFixed = [&](const FixedModel &) { ++fixed; };
  std::string in = fixture("pte/lfm2_export_llm_states.pte");
  std::string error = errorOf([&] { fixFile(in, out, options, file); });
  EXPECT_EQ(fixed, 1u);
  EXPECT_NE(error.find(in + "#0: the rewrite (state-to-io) changes the Core ML delegate's "
                            "interface (input 'layers_0_conv_conv_state' (1, 64, 2, fp16) was "
                            "added)"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("take_over_mutable_buffer=False"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(FixFile, RefusesWhatFixCannotWrite) {
  ScratchDir dir;
  std::string pte = fixture("pte/lfm2_export_llm_4w.pte");
  FixOptions quick;
  quick.passes = "dce";
  quick.verify = FixVerify::Never;
  // A .pte is written from a .pte only.
  std::string package = fixture("lfm2_shortconv/model.mlpackage");
  EXPECT_NE(errorOf([&] {
              fixFile(package, dir.file("x.pte"), quick);
            }).find("a .pte output is written from a .pte input; found '" + package + "'"),
            std::string::npos);
  // A selector past the delegates.
  EXPECT_NE(errorOf([&] {
              fixFile(pte + "#3", dir.file("y.pte"), quick);
            }).find("delegate selector '#3'"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("y.pte")));
  // Never over the input, nor inside it.
  EXPECT_NE(errorOf([&] { fixFile(pte, pte, quick); }), "");
  EXPECT_NE(errorOf([&] { fixFile(package, package + "/inner.mlpackage", quick); }), "");
  // An existing output only with force.
  FixFileResult first = fixFile(pte + "#0", dir.file("z.pte"), quick);
  ASSERT_TRUE(first.ok());
  EXPECT_NE(errorOf([&] { fixFile(pte, dir.file("z.pte"), quick); }), "");
  FixFileOptions force;
  force.force = true;
  EXPECT_TRUE(fixFile(pte, dir.file("z.pte"), quick, force).ok());
}

TEST(FixFile, WritesAModelAndItsStateMap) {
  ScratchDir dir;
  std::string out = dir.file("sub/fixed.mil");
  FixFileResult r =
      fixFile(std::string(ANEFIT_TEST_DATA_DIR) + "/lit/transforms/Inputs/two-states.mil", out,
              FixOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.program);
  ASSERT_EQ(r.models.size(), 1u);
  EXPECT_EQ(r.models[0].label, "");
  EXPECT_EQ(r.models[0].result.verification.status, FixVerification::Status::Same);
  EXPECT_EQ(r.stateMapPath, dir.file("sub/fixed.statemap.json"));
  EXPECT_TRUE(std::filesystem::exists(out));
  EXPECT_EQ(anefit::test::readText(r.stateMapPath), r.models[0].result.stateMap.toJson() + "\n");
  EXPECT_EQ(loadModel(out)->program->functions.at(0)->name, "main");
}
