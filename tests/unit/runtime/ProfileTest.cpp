//===- ProfileTest.cpp - Time per op type recorded by the interpreter -----===//
#include "RuntimeTestUtil.h"

#include "runtime/Profile.h"

#include <nlohmann/json.hpp>

#include <map>

namespace anefit::test {
namespace {

using runtime::OpProfile;

/// x -> linear(x, W fp16 32x64, a weight) -> mul(., 2) -> mul(., .) -> relu.
struct LinearProgram {
  ProgramBuilder b;
  uint64_t weightBytes = 32 * 64 * 2;
  LinearProgram() {
    Value *x = b.input("x", DType::F32, {1, 64});
    std::vector<float> w(32 * 64);
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = float(i % 7) - 3.0f;
    Value *weight = b.op("const", {}, DType::F16, {32, 64});
    weight->definingOp->attributes["val"] = constF16(w, {32, 64});
    Value *y = b.op("linear", {{"x", x}, {"weight", weight}}, DType::F32, {1, 32});
    Value *z = b.op("mul", {{"x", y}, {"y", scalarF32(2.0f)}}, DType::F32, {1, 32});
    Value *zz = b.op("mul", {{"x", z}, {"y", z}}, DType::F32, {1, 32});
    b.output(b.op("relu", {{"x", zz}}, DType::F32, {1, 32}));
  }
};

std::map<std::string, OpProfile::Row> rowsByType(const OpProfile &p) {
  std::map<std::string, OpProfile::Row> out;
  for (const OpProfile::Row &r : p.rows())
    out[r.opType] = r;
  return out;
}

TEST(ProfileTest, OffByDefault) { EXPECT_EQ(runtime::RunOptions().profile, nullptr); }

TEST(ProfileTest, RecordsEveryOpOfEveryRunByType) {
  LinearProgram prog;
  OpProfile profile;
  runtime::RunOptions opts;
  opts.profile = &profile;
  runtime::Interpreter interp(*prog.b.fn, opts);
  runtime::TensorMap in{{"x", Tensor::zeros(DType::F32, {1, 64})}};
  interp.run(in);
  interp.run(in);
  interp.run(in);
  EXPECT_EQ(profile.runs(), 3u);
  auto rows = rowsByType(profile);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows["const"].count, 3u);
  EXPECT_EQ(rows["linear"].count, 3u);
  EXPECT_EQ(rows["mul"].count, 6u);
  EXPECT_EQ(rows["relu"].count, 3u);
  // The linear reads its fp16 weight at every run; a scalar is no weight,
  // and the const op itself reads nothing (its reader does).
  EXPECT_EQ(rows["linear"].weightBytes, 3 * prog.weightBytes);
  EXPECT_EQ(rows["mul"].weightBytes, 0u);
  EXPECT_EQ(rows["const"].weightBytes, 0u);
  double ops = 0;
  for (const OpProfile::Row &r : profile.rows()) {
    EXPECT_GE(r.seconds, 0.0) << r.opType;
    ops += r.seconds;
  }
  EXPECT_GT(profile.runSeconds(), 0.0);
  EXPECT_GE(profile.runSeconds(), ops);
  EXPECT_NEAR(profile.outsideOpsSeconds(), profile.runSeconds() - ops, 1e-12);
  EXPECT_GE(profile.setupSeconds(), 0.0);
  EXPECT_GE(profile.outputSeconds(), 0.0);
  EXPECT_LE(profile.setupSeconds() + profile.outputSeconds(), profile.outsideOpsSeconds() + 1e-12);
}

TEST(ProfileTest, TheFirstRunCanBeKeptApart) {
  // A decode loop's first step reads the weights in: with the first run
  // kept apart, the table holds the later runs and only the first's time.
  LinearProgram prog;
  OpProfile profile;
  profile.keepFirstRunApart();
  runtime::RunOptions opts;
  opts.profile = &profile;
  runtime::Interpreter interp(*prog.b.fn, opts);
  runtime::TensorMap in{{"x", Tensor::zeros(DType::F32, {1, 64})}};
  interp.run(in);
  EXPECT_TRUE(profile.firstRunApart());
  EXPECT_GT(profile.firstRunSeconds(), 0.0);
  EXPECT_EQ(profile.runs(), 0u);
  EXPECT_EQ(rowsByType(profile)["linear"].count, 0u);
  interp.run(in);
  interp.run(in);
  EXPECT_EQ(profile.runs(), 2u);
  auto rows = rowsByType(profile);
  EXPECT_EQ(rows["linear"].count, 2u);
  EXPECT_EQ(rows["mul"].count, 4u);
  EXPECT_EQ(rows["linear"].weightBytes, 2 * prog.weightBytes);
  EXPECT_NE(profile.formatText("step").find("2 steps after the first"), std::string::npos)
      << profile.formatText("step");
  EXPECT_NE(profile.formatJson().find("\"first_run_ms\""), std::string::npos);
  // Not asked: the first run is in the table like any other.
  OpProfile all;
  opts.profile = &all;
  runtime::Interpreter again(*prog.b.fn, opts);
  again.run(in);
  EXPECT_FALSE(all.firstRunApart());
  EXPECT_EQ(all.runs(), 1u);
  EXPECT_EQ(all.formatJson().find("first_run_ms"), std::string::npos);
}

TEST(ProfileTest, OneProfileSumsSeveralInterpreters) {
  LinearProgram prog;
  OpProfile profile;
  runtime::RunOptions opts;
  opts.profile = &profile;
  runtime::TensorMap in{{"x", Tensor::zeros(DType::F32, {1, 64})}};
  runtime::Interpreter(*prog.b.fn, opts).run(in);
  runtime::Interpreter(*prog.b.fn, opts).run(in);
  EXPECT_EQ(profile.runs(), 2u);
  EXPECT_EQ(profile.rows().size(), 4u);
  EXPECT_EQ(rowsByType(profile)["mul"].count, 4u);
}

TEST(ProfileTest, TextAndJsonFromRecordedTimes) {
  OpProfile p;
  size_t lin = p.rowOf("linear"), mul = p.rowOf("mul");
  EXPECT_EQ(p.rowOf("linear"), lin);
  p.record(lin, 0.006, 30'000'000);
  p.record(lin, 0.004, 30'000'000);
  p.record(mul, 0.002, 0);
  p.recordRun(0.010, 0.001, 0.002);
  p.recordRun(0.010, 0.001, 0.001);
  std::string text = p.formatText("step");
  EXPECT_NE(text.find("profile: 2 steps, times summed over the steps\n"), std::string::npos)
      << text;
  // 60 MB in 10 ms: 6 GB/s, half of the 20 ms of the two runs.
  EXPECT_NE(
      text.find(
          "  linear                              2      10.000   50.0%      60.000     6.0\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("  mul                                 1       2.000   10.0%\n"),
            std::string::npos)
      << text;
  // 8 ms outside ops: 2 binding inputs, 3 returning outputs, 3 between ops.
  EXPECT_NE(text.find("  (setup, inputs)                             2.000   10.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  (returning outputs)                         3.000   15.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  (between ops)                               3.000   15.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  total                               3      20.000  100.0%\n"),
            std::string::npos)
      << text;
  EXPECT_LT(text.find("linear"), text.find("mul")) << "rows by decreasing time";

  auto j = nlohmann::json::parse(p.formatJson());
  EXPECT_EQ(j["runs"], 2);
  EXPECT_DOUBLE_EQ(j["total_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["outside_ops_ms"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(j["setup_inputs_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["returning_outputs_ms"].get<double>(), 3.0);
  EXPECT_NEAR(j["between_ops_ms"].get<double>(), 3.0, 1e-9);
  ASSERT_EQ(j["ops"].size(), 2u);
  EXPECT_EQ(j["ops"][0]["op_type"], "linear");
  EXPECT_EQ(j["ops"][0]["count"], 2);
  EXPECT_EQ(j["ops"][0]["weight_bytes"], 60'000'000);
  EXPECT_NEAR(j["ops"][0]["gb_per_s"].get<double>(), 6.0, 1e-9);
  EXPECT_NEAR(j["ops"][0]["percent"].get<double>(), 50.0, 1e-9);
  EXPECT_EQ(j["ops"][1]["op_type"], "mul");
  EXPECT_FALSE(j["ops"][1].contains("weight_bytes"));
}

TEST(ProfileTest, OneSingularRunSaysSo) {
  OpProfile p;
  p.recordRun(0.001);
  std::string text = p.formatText();
  EXPECT_EQ(text.rfind("profile: 1 run\n", 0), 0u) << text;
}

TEST(ProfileTest, GroupsAddTheSameOpsUpByKey) {
  LinearProgram prog;
  OpProfile profile;
  // Two groups: the ops reading a weight (one linear) and the rest.
  profile.groupBy("reads", [](const Operation &op) {
    return op.type == "linear" ? std::string("weights") : std::string("other");
  });
  profile.keepFirstRunApart();
  runtime::RunOptions opts;
  opts.profile = &profile;
  runtime::Interpreter interp(*prog.b.fn, opts);
  runtime::TensorMap in{{"x", Tensor::zeros(DType::F32, {1, 64})}};
  for (int i = 0; i < 3; ++i)
    interp.run(in);
  ASSERT_EQ(profile.groups().size(), 2u);
  std::map<std::string, OpProfile::Row> groups;
  for (const OpProfile::Row &r : profile.groups())
    groups[r.opType] = r;
  // The first run is kept out of both tables alike.
  EXPECT_EQ(groups["weights"].count, 2u);
  EXPECT_EQ(groups["weights"].weightBytes, 2 * prog.weightBytes);
  EXPECT_EQ(groups["other"].count, 2u * 4); // const, two muls, relu
  EXPECT_EQ(groups["other"].weightBytes, 0u);
  uint64_t ops = 0;
  double grouped = 0, typed = 0;
  for (const OpProfile::Row &r : profile.rows()) {
    ops += r.count;
    typed += r.seconds;
  }
  for (const OpProfile::Row &r : profile.groups())
    grouped += r.seconds;
  EXPECT_EQ(ops, groups["weights"].count + groups["other"].count);
  EXPECT_DOUBLE_EQ(grouped, typed);

  std::string text = profile.formatText("step");
  EXPECT_NE(text.find("by reads:\n"), std::string::npos) << text;
  auto j = nlohmann::json::parse(profile.formatJson());
  EXPECT_EQ(j["groups"]["by"], "reads");
  ASSERT_EQ(j["groups"]["rows"].size(), 2u);
  for (const auto &row : j["groups"]["rows"])
    EXPECT_EQ(row.contains("weight_bytes"), row["key"] == "weights");
}

TEST(ProfileTest, NoGroupTableWithoutGroupBy) {
  LinearProgram prog;
  OpProfile profile;
  runtime::RunOptions opts;
  opts.profile = &profile;
  runtime::Interpreter interp(*prog.b.fn, opts);
  interp.run(runtime::TensorMap{{"x", Tensor::zeros(DType::F32, {1, 64})}});
  EXPECT_TRUE(profile.groups().empty());
  EXPECT_EQ(profile.formatText().find("by "), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(profile.formatJson()).contains("groups"));
}

} // namespace
} // namespace anefit::test
