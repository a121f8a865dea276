//===- PackageTest.cpp - .mlpackage manifest, layout and atomic writes ----===//
//
// Manifest validation (versions, missing keys, paths escaping the package),
// weight-file name resolution, and the package writer's promises: the result
// appears only when complete, no temporary directory is left behind, and an
// existing package is replaced whole.
//
//===----------------------------------------------------------------------===//
#include "io/Package.h"

#include "support/Error.h"
#include "support/TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

using namespace anefit;
using anefit::test::listDir;
using anefit::test::ScratchDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

const char *kGoodManifest = R"({
    "fileFormatVersion": "1.0.0",
    "itemInfoEntries": {
        "A": {
            "author": "com.apple.CoreML",
            "description": "CoreML Model Weights",
            "name": "weights",
            "path": "com.apple.CoreML/weights"
        },
        "B": {
            "author": "com.apple.CoreML",
            "description": "CoreML Model Specification",
            "name": "model.mlmodel",
            "path": "com.apple.CoreML/model.mlmodel"
        }
    },
    "rootModelIdentifier": "B"
})";

/// Expects parseManifest(text) to fail with a one-line message holding `needle`.
void expectBadManifest(const std::string &text, const std::string &needle) {
  try {
    parseManifest(text, "pkg/Manifest.json");
    FAIL() << "accepted: " << text;
  } catch (const InputError &e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_THAT(what, HasSubstr("pkg/Manifest.json: "));
    EXPECT_THAT(what, HasSubstr(needle));
  }
}

std::string withRootPath(const std::string &path) {
  std::string text = kGoodManifest;
  std::string from = "\"com.apple.CoreML/model.mlmodel\"";
  text.replace(text.find(from), from.size(), "\"" + path + "\"");
  return text;
}

/// Lays out a minimal package by hand.
void makePackage(const fs::path &root, const std::string &manifest) {
  fs::create_directories(root / "Data/com.apple.CoreML/weights");
  test::writeText((root / "Manifest.json").string(), manifest);
  test::writeText((root / "Data/com.apple.CoreML/model.mlmodel").string(), "model");
}

TEST(ManifestTest, ParsesCoreMLToolsLayout) {
  Manifest m = parseManifest(kGoodManifest, "Manifest.json");
  EXPECT_EQ(m.fileFormatVersion, "1.0.0");
  ASSERT_EQ(m.items.size(), 2u);
  EXPECT_EQ(m.rootItem().path, "com.apple.CoreML/model.mlmodel");
  EXPECT_EQ(m.rootItem().name, "model.mlmodel");
}

TEST(ManifestTest, NormalisesHarmlessPaths) {
  Manifest m = parseManifest(withRootPath("com.apple.CoreML/./model.mlmodel"), "M");
  EXPECT_EQ(m.rootItem().path, "com.apple.CoreML/model.mlmodel");
}

TEST(ManifestTest, RejectsInvalidJson) { expectBadManifest("{ \"a\": ", "invalid JSON"); }

TEST(ManifestTest, RejectsNonObject) {
  expectBadManifest("[1]", "expected a JSON object, found array");
}

TEST(ManifestTest, RejectsMissingVersion) {
  expectBadManifest(R"({"itemInfoEntries": {}, "rootModelIdentifier": "B"})",
                    "expected key 'fileFormatVersion'");
}

TEST(ManifestTest, RejectsBadVersions) {
  std::string text = kGoodManifest;
  auto with = [&](const std::string &v) {
    std::string t = text;
    t.replace(t.find("1.0.0"), 5, v);
    return t;
  };
  expectBadManifest(with("2.0.0"), "no newer than 1.0.0, found '2.0.0'");
  expectBadManifest(with("1.0.1"), "no newer than 1.0.0");
  expectBadManifest(with("1.0"), "expected a version 'major.minor.patch', found '1.0'");
  expectBadManifest(with("-1.0.0"), "major.minor.patch");
  expectBadManifest(with("1.0.0x"), "major.minor.patch");
}

TEST(ManifestTest, RejectsMissingRootModelIdentifier) {
  std::string text = kGoodManifest;
  text.replace(text.find("\"rootModelIdentifier\": \"B\""), 26, "\"other\": 1");
  expectBadManifest(text, "expected key 'rootModelIdentifier'");
}

TEST(ManifestTest, RejectsRootIdentifierWithoutEntry) {
  std::string text = kGoodManifest;
  text.replace(text.find("\"rootModelIdentifier\": \"B\""), 26, "\"rootModelIdentifier\": \"C\"");
  expectBadManifest(text, "rootModelIdentifier: expected the identifier of an itemInfoEntries "
                          "entry, found 'C'");
}

TEST(ManifestTest, RejectsEntryWithoutPath) {
  std::string text = kGoodManifest;
  text.replace(text.find("\"path\": \"com.apple.CoreML/weights\""), 34, "\"x\": \"y\"");
  expectBadManifest(text, "itemInfoEntries.A: expected key 'path'");
}

TEST(ManifestTest, RejectsNonStringField) {
  std::string text = kGoodManifest;
  text.replace(text.find("\"name\": \"weights\""), 17, "\"name\": 3");
  expectBadManifest(text, "itemInfoEntries.A.name: expected a string, found number");
}

TEST(ManifestTest, RejectsEscapingPaths) {
  for (const char *p :
       {"../outside.mlmodel", "com.apple.CoreML/../../x", "/etc/passwd", "", ".", "a\\\\..\\\\b"})
    expectBadManifest(withRootPath(p), "a Manifest path that escapes the package");
}

TEST(PackageTest, OpensValidPackage) {
  ScratchDir dir;
  fs::path root = dir.path() / "M.mlpackage";
  makePackage(root, kGoodManifest);
  EXPECT_TRUE(isPackageDirectory(root.string()));
  PackageLayout layout = openPackage(root.string());
  EXPECT_EQ(fs::path(layout.modelFile), root / "Data/com.apple.CoreML/model.mlmodel");
  EXPECT_EQ(fs::path(layout.weightsDir), root / "Data/com.apple.CoreML/weights");
}

TEST(PackageTest, MissingPackage) {
  ScratchDir dir;
  try {
    openPackage(dir.file("none.mlpackage"));
    FAIL();
  } catch (const InputError &e) {
    EXPECT_THAT(e.what(), HasSubstr("none.mlpackage: no such file or directory"));
  }
}

TEST(PackageTest, DirectoryWithoutManifest) {
  ScratchDir dir;
  EXPECT_FALSE(isPackageDirectory(dir.path().string()));
  try {
    openPackage(dir.path().string());
    FAIL();
  } catch (const InputError &e) {
    EXPECT_THAT(e.what(), HasSubstr("expected a package directory with a Manifest.json"));
  }
}

TEST(PackageTest, MissingModelFile) {
  ScratchDir dir;
  fs::path root = dir.path() / "M.mlpackage";
  makePackage(root, kGoodManifest);
  fs::remove(root / "Data/com.apple.CoreML/model.mlmodel");
  try {
    openPackage(root.string());
    FAIL();
  } catch (const InputError &e) {
    EXPECT_THAT(e.what(), HasSubstr("model.mlmodel: no such file or directory"));
  }
}

TEST(PackageTest, SymlinkEscapingPackage) {
  ScratchDir dir;
  fs::path root = dir.path() / "M.mlpackage";
  makePackage(root, kGoodManifest);
  test::writeText(dir.file("secret.mlmodel"), "x");
  fs::remove(root / "Data/com.apple.CoreML/model.mlmodel");
  fs::create_symlink(dir.path() / "secret.mlmodel", root / "Data/com.apple.CoreML/model.mlmodel");
  try {
    openPackage(root.string());
    FAIL();
  } catch (const InputError &e) {
    EXPECT_THAT(e.what(), HasSubstr("a Manifest path that escapes the package"));
  }
}

TEST(PackageTest, HugeManifestIsNotRead) {
  ScratchDir dir;
  fs::path root = dir.path() / "M.mlpackage";
  makePackage(root, std::string(2 << 20, ' '));
  try {
    openPackage(root.string());
    FAIL();
  } catch (const InputError &e) {
    EXPECT_THAT(e.what(), HasSubstr("Manifest.json: expected at most 1048576 bytes"));
  }
}

TEST(WeightPathTest, ResolvesUnderWeights) {
  EXPECT_EQ(fs::path(resolveWeightPath("/m", "@model_path/weights/weight.bin", "r")),
            fs::path("/m/weights/weight.bin"));
  EXPECT_EQ(fs::path(resolveWeightPath("/m", "@model_path/weights/./w2.bin", "r")),
            fs::path("/m/weights/w2.bin"));
}

TEST(WeightPathTest, RejectsEscapingNames) {
  for (const char *name :
       {"@model_path/weights/../../etc/passwd", "@model_path/../x.bin", "@model_path//etc/x",
        "@model_path/other/x.bin", "@model_path/weights"}) {
    try {
      resolveWeightPath("/m", name, "model.mlmodel");
      FAIL() << name;
    } catch (const InputError &e) {
      EXPECT_THAT(e.what(), HasSubstr("model.mlmodel: weight file"));
      EXPECT_THAT(e.what(), HasSubstr("escapes the weights directory"));
    }
  }
  EXPECT_THROW(resolveWeightPath("/m", "/abs/weight.bin", "r"), InputError);
}

TEST(UuidTest, UpperCaseVersion4) {
  std::string u = makeUuid();
  ASSERT_EQ(u.size(), 36u);
  EXPECT_EQ(u[8], '-');
  EXPECT_EQ(u[14], '4');
  for (char c : u)
    EXPECT_TRUE(c == '-' || std::isdigit(static_cast<unsigned char>(c)) || (c >= 'A' && c <= 'F'));
  EXPECT_NE(makeUuid(), u);
}

TEST(WritePackageTest, WritesLayoutAndManifest) {
  ScratchDir dir;
  fs::path out = dir.path() / "Out.mlpackage";
  writePackage(out.string(), [](WeightWriter &w) {
    const uint8_t data[4] = {1, 2, 3, 4};
    EXPECT_EQ(w.append(DType::U8, data), 64u);
    return std::string("proto-bytes");
  });
  EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{"Out.mlpackage"});
  EXPECT_EQ(test::readText((out / "Data/com.apple.CoreML/model.mlmodel").string()), "proto-bytes");
  auto weights = WeightFile::open((out / "Data/com.apple.CoreML/weights/weight.bin").string());
  EXPECT_EQ(weights->blobCount(), 1u);

  std::string manifest = test::readText((out / "Manifest.json").string());
  EXPECT_EQ(manifest.back(), '\n');
  EXPECT_THAT(manifest, HasSubstr("\n    \"fileFormatVersion\": \"1.0.0\",\n"));
  Manifest m = parseManifest(manifest, "Manifest.json");
  EXPECT_EQ(m.rootItem().path, "com.apple.CoreML/model.mlmodel");
  EXPECT_EQ(m.rootItem().description, "CoreML Model Specification");
  EXPECT_EQ(m.rootModelIdentifier.size(), 36u);
  ASSERT_EQ(m.items.size(), 2u);
  PackageLayout layout = openPackage(out.string());
  EXPECT_EQ(fs::path(layout.modelFile), out / "Data/com.apple.CoreML/model.mlmodel");
}

TEST(WritePackageTest, NoBlobsKeepsEmptyWeightsDir) {
  ScratchDir dir;
  fs::path out = dir.path() / "Out.mlpackage";
  writePackage(out.string(), [](WeightWriter &) { return std::string("p"); });
  EXPECT_TRUE(fs::is_directory(out / "Data/com.apple.CoreML/weights"));
  EXPECT_FALSE(fs::exists(out / "Data/com.apple.CoreML/weights/weight.bin"));
}

TEST(WritePackageTest, FailureLeavesNoTempDirAndKeepsOld) {
  ScratchDir dir;
  fs::path out = dir.path() / "Out.mlpackage";
  writePackage(out.string(), [](WeightWriter &) { return std::string("old"); });
  EXPECT_THROW(
      writePackage(
          out.string(),
          [](WeightWriter &) -> std::string { throw InputError("model.mil: op 'x': broken"); },
          OutputOptions::replacing()),
      InputError);
  EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{"Out.mlpackage"});
  EXPECT_EQ(test::readText((out / "Data/com.apple.CoreML/model.mlmodel").string()), "old");
}

TEST(WritePackageTest, ReplacesExistingPackageWhole) {
  ScratchDir dir;
  fs::path out = dir.path() / "Out.mlpackage";
  writePackage(out.string(), [](WeightWriter &) { return std::string("old"); });
  test::writeText((out / "stale.txt").string(), "stale");
  EXPECT_THROW(writePackage(out.string(), [](WeightWriter &) { return std::string("new"); }),
               InputError);
  writePackage(
      out.string(), [](WeightWriter &) { return std::string("new"); }, OutputOptions::replacing());
  EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{"Out.mlpackage"});
  EXPECT_FALSE(fs::exists(out / "stale.txt"));
  EXPECT_EQ(test::readText((out / "Data/com.apple.CoreML/model.mlmodel").string()), "new");
}

TEST(WritePackageTest, MissingParentDirectory) {
  ScratchDir dir;
  try {
    writePackage(dir.file("no/Out.mlpackage"), [](WeightWriter &) { return std::string(); });
    FAIL();
  } catch (const InputError &e) {
    EXPECT_THAT(e.what(), HasSubstr("does not exist"));
  }
}

TEST(PathContainsTest, SameAndInside) {
  ScratchDir dir;
  fs::path root = dir.path() / "M.mlpackage";
  makePackage(root, kGoodManifest);
  EXPECT_TRUE(pathContains(root.string(), root.string()));
  EXPECT_TRUE(pathContains(root.string(), (dir.path() / "M.mlpackage/").string()));
  EXPECT_TRUE(pathContains(root.string(), (root / "Data").string()));
  EXPECT_FALSE(pathContains(root.string(), dir.path().string()));
  EXPECT_FALSE(pathContains(root.string(), dir.file("other")));
  // Outputs that do not exist yet.
  EXPECT_TRUE(pathContains(root.string(), (root / "Data/new.mil").string()));
  EXPECT_FALSE(pathContains(dir.file("nothing"), root.string()));
}

} // namespace
