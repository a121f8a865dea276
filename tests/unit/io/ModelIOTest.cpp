//===- ModelIOTest.cpp - Loading and saving models in every format --------===//
//
// Format detection, the errors for paths that are not models, and round
// trips: a built model with a blob constant and the committed coremltools
// fixtures go through .mlpackage and .mil and come back with the same ops,
// types and weight bytes. Saving never touches the input.
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"

#include "TestSupport.h"
#include "io/Package.h"
#include "io/WeightFile.h"
#include "support/Error.h"
#include "support/TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

using namespace anefit;
using anefit::test::errorOf;
using anefit::test::ScratchDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(ANEFIT_TEST_DATA_DIR) / "fixtures";

ConstantRef ref(Constant c) { return std::make_shared<const Constant>(std::move(c)); }

FeatureDescription arrayFeature(std::string name, std::vector<int64_t> shape) {
  FeatureDescription f;
  f.name = std::move(name);
  f.type.shape = std::move(shape);
  f.type.dataType = ArrayDataType::Float32;
  return f;
}

/// y = x + w, with w a [1, 3] fp32 blob at offset 64 of `store`, and a
/// uint4 blob that is only kept (sub-byte packing must survive).
std::unique_ptr<Model> buildModel(std::shared_ptr<const BlobStore> store) {
  auto model = std::make_unique<Model>();
  model->specificationVersion = 9;
  model->description.inputs.push_back(arrayFeature("x", {1, 3}));
  model->description.outputs.push_back(arrayFeature("y", {1, 3}));
  model->description.metadata.userDefined["source"] = "unit test";
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Type t = Type::tensor(DType::F32, std::vector<int64_t>{1, 3});
  Value *x = f->addInput("x", t);
  Block &b = *f->body;

  auto w = std::make_unique<Operation>("const", "w");
  w->attributes["val"] =
      ref(Constant::fromBlob(t, BlobRef{"@model_path/weights/weight.bin", 64, store}));
  Value *wv = w->addOutput("w", t);
  b.append(std::move(w));

  Type u4 = Type::tensor(DType::U4, std::vector<int64_t>{5});
  auto q = std::make_unique<Operation>("const", "q");
  q->attributes["val"] =
      ref(Constant::fromBlob(u4, BlobRef{"@model_path/weights/weight.bin", 320, store}));
  q->addOutput("q", u4);
  b.append(std::move(q));

  auto add = std::make_unique<Operation>("add", "y");
  add->setInput("x", Binding::of(x));
  add->setInput("y", Binding::of(wv));
  Value *y = add->addOutput("y", t);
  b.append(std::move(add));
  b.outputs = {y};
  return model;
}

/// Writes the weight file of formats.md §4 (fp32 at 64, fp16 at 192, uint4 at 320).
std::shared_ptr<WeightFile> writeWeights(const std::string &path) {
  WeightWriter w(path);
  float f32[] = {1.0f, 2.0f, 3.0f};
  uint16_t f16[5] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500};
  const uint8_t u4[] = {0x21, 0x43, 0x05};
  w.append(DType::F32, {reinterpret_cast<const uint8_t *>(f32), sizeof f32});
  w.append(DType::F16, {reinterpret_cast<const uint8_t *>(f16), sizeof f16});
  w.append(DType::U4, u4, 4);
  w.finish();
  return WeightFile::open(path);
}

/// Every op in program order with its type and output types.
std::vector<std::string> opSignature(const Model &m) {
  std::vector<std::string> out;
  for (const auto &f : m.program->functions) {
    out.push_back("func " + f->name + " " + f->opset);
    walk(*f->body, [&](const Operation &op) {
      std::string s = op.type + " " + op.name;
      for (const auto &v : op.outputs)
        s += " " + v->name + ":" + v->type.str();
      out.push_back(s);
    });
  }
  return out;
}

/// Bytes of every const op, blob or immediate, keyed by op name.
std::map<std::string, std::vector<uint8_t>> constBytes(const Model &m) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto &f : m.program->functions)
    walk(*f->body, [&](const Operation &op) {
      if (op.type != "const")
        return;
      if (const Constant *c = op.attribute("val"); c && c->isTensorLike()) {
        std::span<const uint8_t> d = c->data();
        out[f->name + "/" + op.name].assign(d.begin(), d.end());
      }
    });
  return out;
}

void expectSameModel(const Model &a, const Model &b) {
  EXPECT_EQ(a.specificationVersion, b.specificationVersion);
  EXPECT_EQ(opSignature(a), opSignature(b));
  EXPECT_EQ(constBytes(a), constBytes(b));
  EXPECT_EQ(a.description.metadata.userDefined, b.description.metadata.userDefined);
  ASSERT_EQ(a.description.inputs.size(), b.description.inputs.size());
  for (size_t i = 0; i < a.description.inputs.size(); ++i)
    EXPECT_EQ(a.description.inputs[i].name, b.description.inputs[i].name);
}

TEST(DetectFormatTest, ByExtensionAndContents) {
  ScratchDir dir;
  EXPECT_EQ(detectFormat("a/b.mlpackage"), ModelFormat::MLPackage);
  EXPECT_EQ(detectFormat("a/b.MLPACKAGE/"), ModelFormat::MLPackage);
  EXPECT_EQ(detectFormat("m.mlmodel"), ModelFormat::MLModel);
  EXPECT_EQ(detectFormat("m.mil"), ModelFormat::MilText);
  EXPECT_EQ(detectFormat("m.pte"), ModelFormat::Pte);
  EXPECT_EQ(detectFormat("m.onnx"), ModelFormat::Unknown);
  EXPECT_EQ(detectFormat(dir.path().string()), ModelFormat::Unknown);
  test::writeText(dir.file("Manifest.json"), "{}");
  EXPECT_EQ(detectFormat(dir.path().string()), ModelFormat::MLPackage);
}

TEST(DetectFormatTest, PteSelectorsAreClaimed) {
  EXPECT_EQ(detectFormat("m.pte#1"), ModelFormat::Pte);
  EXPECT_EQ(detectFormat("m.PTE#12"), ModelFormat::Pte);
  EXPECT_EQ(detectFormat("m.mil#1"), ModelFormat::Unknown);
  EXPECT_EQ(splitPteSelector("a/m.pte#3"),
            std::make_pair(std::string("a/m.pte"), std::optional<size_t>(3)));
  EXPECT_FALSE(splitPteSelector("a/m.pte#x").second);
  EXPECT_FALSE(splitPteSelector("a/m.pte#").second);
  EXPECT_FALSE(splitPteSelector("a/m.pte").second);
}

TEST(ModelFormatTable, DrivesHelpAndErrors) {
  std::vector<std::string> names;
  for (const ModelFormatInfo &f : modelFormats()) {
    names.emplace_back(f.name);
    EXPECT_EQ(&formatInfo(f.format), &f);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"mlpackage", "mlmodel", "mil", "pte"}));
  EXPECT_EQ(formatInfo(ModelFormat::Unknown).name, "unknown");
  EXPECT_TRUE(formatInfo(ModelFormat::MLPackage).directory);
  EXPECT_FALSE(formatInfo(ModelFormat::Pte).writable);
  EXPECT_EQ(formatExtensionsText(), ".mlpackage, .mlmodel, .mil or .pte");
  EXPECT_EQ(formatExtensionsText(true), ".mlpackage, .mlmodel or .mil");
  EXPECT_EQ(formatExtensionsText(FormatSet::Writable, "and"), ".mlpackage, .mlmodel and .mil");
  EXPECT_EQ(formatExtensionsText(FormatSet::ReadOnly, "and"), ".pte");
  EXPECT_THAT(modelArgumentHelp(), HasSubstr(".pte (MODEL.pte#N: one Core ML delegate)"));
}

TEST(LoadModelTest, ForcedTextFormatAndMissingWeights) {
  ScratchDir dir;
  // A .txt read as MIL text, its weight file absent: the blob stays unresolved.
  test::writeText(dir.file("p.txt"),
                  "main[CoreML8](%x: (2, fp16)(Tensor)) {\n  block0() {\n"
                  "    %w: (2, fp16)(Tensor) = const(val=BLOBFILE(path=\"@model_path/"
                  "weights/weight.bin\", offset=64), name=\"w\")\n"
                  "    %y: (2, fp16)(Tensor) = add(x=%x, y=%w, name=\"y\")\n  } -> (%y)\n}\n");
  LoadOptions text;
  text.format = ModelFormat::MilText;
  EXPECT_THAT(errorOf([&] { loadModel(dir.file("p.txt"), text); }),
              HasSubstr("weight.bin: no such file or directory"));
  text.allowMissingWeights = true;
  auto model = loadModel(dir.file("p.txt"), text);
  EXPECT_EQ(model->sourcePath, dir.file("p.txt"));
  ASSERT_EQ(model->weightFiles.size(), 1u);
  EXPECT_EQ(model->weightFiles.begin()->second, nullptr);
}

TEST(LoadModelTest, Errors) {
  ScratchDir dir;
  EXPECT_EQ(errorOf([&] { loadModel(dir.file("none.mlpackage")); }),
            dir.file("none.mlpackage") + ": no such file or directory");
  EXPECT_THAT(errorOf([&] { loadModel(dir.path().string()); }),
              HasSubstr("expected a model (a .mlpackage directory with a Manifest.json), found a "
                        "directory without a Manifest.json"));
  test::writeText(dir.file("m.pte"), "x");
  // Not an ExecuTorch program (and until .pte reading lands, not supported).
  std::string pte = errorOf([&] { loadModel(dir.file("m.pte")); });
  EXPECT_THAT(pte, HasSubstr(dir.file("m.pte") + ": "));
  EXPECT_EQ(pte.find('\n'), std::string::npos);
  test::writeText(dir.file("m.onnx"), "x");
  EXPECT_THAT(errorOf([&] { loadModel(dir.file("m.onnx")); }),
              HasSubstr("expected a model file ending in .mlpackage, .mlmodel, .mil or .pte"));
  test::writeText(dir.file("bad.mlmodel"), "\xff\xff\xff");
  std::string truncated = errorOf([&] { loadModel(dir.file("bad.mlmodel")); });
  EXPECT_THAT(truncated, HasSubstr("bad.mlmodel"));
  EXPECT_EQ(truncated.find('\n'), std::string::npos);
}

TEST(ModelIOTest, PackageRoundTripWithBlobs) {
  ScratchDir dir;
  auto store = writeWeights(dir.file("src.bin"));
  auto model = buildModel(store);
  std::string out = dir.file("Out.mlpackage");
  saveModel(*model, out);
  auto loaded = loadModel(out);
  expectSameModel(*model, *loaded);
  EXPECT_EQ(loaded->sourcePath, out);
  ASSERT_EQ(loaded->weightFiles.count("@model_path/weights/weight.bin"), 1u);
  EXPECT_TRUE(loaded->weightFiles.at("@model_path/weights/weight.bin"));

  // Not opening weights: same program, no store, and data() says why.
  LoadOptions noWeights;
  noWeights.openWeights = false;
  auto light = loadModel(out, noWeights);
  EXPECT_EQ(opSignature(*light), opSignature(*model));
  EXPECT_FALSE(light->weightFiles.at("@model_path/weights/weight.bin"));
  const Operation *w = light->program->functions[0]->body->ops[0].get();
  EXPECT_THAT(errorOf([&] { w->attribute("val")->data(); }), HasSubstr("not available"));
}

TEST(ModelIOTest, MilTextRoundTripCopiesWeightsBeside) {
  ScratchDir dir;
  auto model = buildModel(writeWeights(dir.file("src.bin")));
  fs::create_directories(dir.path() / "text");
  std::string mil = (dir.path() / "text/model.mil").string();
  saveModel(*model, mil);
  EXPECT_TRUE(fs::exists(dir.path() / "text/weights/model.bin"));
  // The caller's model still points at its own weight file.
  const Operation *w = model->program->functions[0]->body->ops[0].get();
  EXPECT_EQ(w->attribute("val")->blob.store->path(), dir.file("src.bin"));
  auto loaded = loadModel(mil);
  expectSameModel(*model, *loaded);

  // Text written next to the weights it uses refers to them in place.
  std::string again = (dir.path() / "text/again.mil").string();
  saveModel(*loaded, again);
  EXPECT_FALSE(fs::exists(dir.path() / "text/weights/again.bin"));
  expectSameModel(*model, *loadModel(again));

  // And back into a package.
  std::string pkg = dir.file("FromText.mlpackage");
  saveModel(*loadModel(again), pkg);
  expectSameModel(*model, *loadModel(pkg));
}

TEST(ModelIOTest, MlmodelRefusesBlobWeights) {
  ScratchDir dir;
  auto model = buildModel(writeWeights(dir.file("src.bin")));
  EXPECT_THAT(errorOf([&] { saveModel(*model, dir.file("m.mlmodel")); }), HasSubstr(".mlpackage"));
  EXPECT_FALSE(fs::exists(dir.file("m.mlmodel")));
}

TEST(ModelIOTest, RefusesToWriteOverInput) {
  ScratchDir dir;
  auto model = buildModel(writeWeights(dir.file("src.bin")));
  std::string pkg = dir.file("M.mlpackage");
  saveModel(*model, pkg);
  auto loaded = loadModel(pkg);
  std::string manifest = test::readText(pkg + "/Manifest.json");
  EXPECT_THAT(errorOf([&] { saveModel(*loaded, pkg); }),
              HasSubstr("refusing to write over the input"));
  EXPECT_THAT(errorOf([&] { saveModel(*loaded, pkg + "/Data/x.mil"); }),
              HasSubstr("refusing to write inside the input"));
  EXPECT_EQ(test::readText(pkg + "/Manifest.json"), manifest);
  expectSameModel(*model, *loadModel(pkg));
}

TEST(ModelIOTest, OverwriteOnlyWhenAllowed) {
  ScratchDir dir;
  auto model = buildModel(writeWeights(dir.file("src.bin")));
  std::string pkg = dir.file("M.mlpackage");
  saveModel(*model, pkg);
  EXPECT_THAT(errorOf([&] { saveModel(*model, pkg); }), HasSubstr("already exists"));
  SaveOptions replace;
  replace.force = true;
  saveModel(*model, pkg, replace);
  EXPECT_THAT(errorOf([&] { saveModel(*model, dir.file("m.onnx")); }),
              HasSubstr("expected an output path ending in .mlpackage, .mlmodel or .mil"));
}

TEST(ModelIOTest, MissingWeightFileIsAnError) {
  ScratchDir dir;
  auto model = buildModel(writeWeights(dir.file("src.bin")));
  std::string pkg = dir.file("M.mlpackage");
  saveModel(*model, pkg);
  fs::remove(pkg + "/Data/com.apple.CoreML/weights/weight.bin");
  EXPECT_THAT(errorOf([&] { loadModel(pkg); }),
              HasSubstr("weights/weight.bin: no such file or directory"));
  LoadOptions noWeights;
  noWeights.openWeights = false;
  EXPECT_NO_THROW(loadModel(pkg, noWeights));
}

/// Every committed coremltools package survives package -> package and
/// package -> text -> package with identical ops, types and weight bytes,
/// and reading it changes nothing on disk.
TEST(ModelIOTest, FixturesRoundTrip) {
  int seen = 0;
  for (const auto &entry : fs::directory_iterator(kFixtures)) {
    fs::path pkg = entry.path() / "model.mlpackage";
    if (!fs::is_directory(pkg))
      continue;
    SCOPED_TRACE(pkg.string());
    ++seen;
    std::string before = test::readText((pkg / "Manifest.json").string());
    auto original = loadModel(pkg.string());
    ScratchDir dir;
    std::string out = dir.file("Copy.mlpackage");
    saveModel(*original, out);
    auto copy = loadModel(out);
    expectSameModel(*original, *copy);
    std::string mil = dir.file("copy.mil");
    saveModel(*copy, mil);
    std::string back = dir.file("Back.mlpackage");
    saveModel(*loadModel(mil), back);
    expectSameModel(*original, *loadModel(back));
    EXPECT_EQ(test::readText((pkg / "Manifest.json").string()), before);
  }
  EXPECT_GT(seen, 3);
}

} // namespace
