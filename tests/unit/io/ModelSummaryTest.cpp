//===- ModelSummaryTest.cpp - What `show` says a model is made of ---------===//
#include "io/ModelSummary.h"

#include "support/TestUtil.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace anefit;

namespace {

std::string fixture(const std::string &rel) {
  return std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/" + rel;
}

std::unique_ptr<Model> loadWithoutWeights(const std::string &path) {
  LoadOptions load;
  load.openWeights = false;
  return loadModel(path, load);
}

std::string shapeOf(const FeatureSummary &f) {
  std::string s;
  for (const Dim &d : f.shape)
    s += (s.empty() ? "" : "x") + d.str();
  return s;
}

} // namespace

TEST(ModelSummary, SpecificationVersionsNameTheOSTheyNeed) {
  EXPECT_EQ(minimumOSText(9), "iOS 18, macOS 15");
  EXPECT_EQ(minimumOSText(4), "iOS 13, macOS 10.15");
  EXPECT_EQ(minimumOSText(10), "iOS 26, macOS 26");
  EXPECT_EQ(minimumOSText(0), "unknown OS");
  EXPECT_EQ(minimumOSText(99), "unknown OS");
  ASSERT_NE(specVersionInfo(2), nullptr);
  EXPECT_STREQ(specVersionInfo(2)->macOS, "10.13.2");
  // An opset's specification version has a row: CoreML5..CoreML9.
  for (int opset = 5; opset <= 9; ++opset)
    EXPECT_NE(specVersionInfo(specVersionForOpset(opset)), nullptr) << opset;
}

TEST(ModelSummary, SummarizesAPackageWithoutReadingWeights) {
  std::string path = fixture("lfm2_shortconv/model.mlpackage");
  std::unique_ptr<Model> model = loadWithoutWeights(path);
  ModelSummary s = summarizeModel(*model, path);
  EXPECT_EQ(s.format, ModelFormat::MLPackage);
  EXPECT_EQ(s.specVersion, 9);
  EXPECT_EQ(s.defaultFunction, "main");
  ASSERT_EQ(s.functions.size(), 1u);
  const FunctionSummary &f = s.functions[0];
  EXPECT_EQ(f.opset, "CoreML8");
  EXPECT_TRUE(f.isDefault);
  EXPECT_EQ(f.opCount, 34u);
  ASSERT_EQ(f.inputs.size(), 1u);
  EXPECT_EQ(f.inputs[0].name, "x");
  EXPECT_EQ(f.inputs[0].kind, "tensor");
  EXPECT_EQ(f.inputs[0].dtype, "fp32");
  EXPECT_EQ(shapeOf(f.inputs[0]), "1x1x64");
  ASSERT_EQ(f.states.size(), 1u);
  EXPECT_EQ(f.states[0].kind, "state");
  EXPECT_EQ(f.states[0].dtype, "fp16");
  EXPECT_EQ(shapeOf(f.states[0]), "1x64x2");
  ASSERT_EQ(f.outputs.size(), 1u);
  EXPECT_EQ(f.outputs[0].name, "out");

  // The histogram: by count, then by name; it adds up to the ops.
  ASSERT_EQ(s.ops.size(), 11u);
  EXPECT_EQ(s.ops[0], (std::pair<std::string, uint64_t>{"const", 20}));
  EXPECT_EQ(s.ops[1], (std::pair<std::string, uint64_t>{"cast", 2}));
  EXPECT_EQ(s.ops.back(), (std::pair<std::string, uint64_t>{"write_state", 1}));
  uint64_t total = 0;
  for (const auto &[type, count] : s.ops)
    total += count;
  EXPECT_EQ(total, f.opCount);

  // The one weight counter, from types only.
  EXPECT_EQ(s.weights.storedElements, 16853u);
  EXPECT_EQ(s.weights.storedBytes, countWeights(*model->program).storedBytes);
  EXPECT_EQ(s.weights.byDType.at("fp16").elements, 16832u);
  ASSERT_EQ(s.weightFiles.size(), 1u);
  EXPECT_EQ(s.weightFiles[0].name, "@model_path/weights/weight.bin");
  EXPECT_EQ(s.weightFiles[0].path, path + "/Data/com.apple.CoreML/weights/weight.bin");
  ASSERT_TRUE(s.weightFiles[0].bytes.has_value());
  EXPECT_EQ(*s.weightFiles[0].bytes, std::filesystem::file_size(s.weightFiles[0].path));
  EXPECT_EQ(s.metadata.userDefined.at("com.github.apple.coremltools.version"), "9.0");
}

TEST(ModelSummary, AMissingWeightFileHasNoSize) {
  anefit::test::ScratchDir dir;
  std::filesystem::copy(fixture("lfm2_shortconv/model.mlpackage"), dir.file("m.mlpackage"),
                        std::filesystem::copy_options::recursive);
  std::filesystem::remove(dir.file("m.mlpackage/Data/com.apple.CoreML/weights/weight.bin"));
  std::unique_ptr<Model> model = loadWithoutWeights(dir.file("m.mlpackage"));
  ModelSummary s = summarizeModel(*model, dir.file("m.mlpackage"));
  ASSERT_EQ(s.weightFiles.size(), 1u);
  EXPECT_FALSE(s.weightFiles[0].bytes.has_value());
  EXPECT_EQ(s.weights.storedElements, 16853u) << "counted from types, not from the file";
}

TEST(ModelSummary, FeaturesAsTheDescriptionDeclaresThem) {
  FeatureDescription array{"x", "", {}};
  array.type.shape = {1, 3};
  array.type.dataType = ArrayDataType::Float16;
  array.type.shapeRange = {{1, 1}, {1, -1}};
  array.type.hasShapeRange = true;
  FeatureSummary a = summarizeFeature(array);
  EXPECT_EQ(a.kind, "tensor");
  EXPECT_EQ(a.dtype, "fp16");
  EXPECT_EQ(shapeOf(a), "1x3");
  EXPECT_EQ(a.shapeRange.size(), 2u);

  FeatureDescription state = array;
  state.type.kind = FeatureType::Kind::State;
  state.type.dataType = ArrayDataType::Invalid;
  FeatureSummary s = summarizeFeature(state);
  EXPECT_EQ(s.kind, "state");
  EXPECT_EQ(s.dtype, "unknown");

  FeatureDescription scalar{"n", "", {}};
  scalar.type.kind = FeatureType::Kind::Int64;
  scalar.type.isOptional = true;
  FeatureSummary n = summarizeFeature(scalar);
  EXPECT_EQ(n.kind, "int64");
  EXPECT_EQ(n.dtype, "");
  EXPECT_TRUE(n.shape.empty());
  EXPECT_TRUE(n.optional);
}
