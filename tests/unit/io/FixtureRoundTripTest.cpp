//===- FixtureRoundTripTest.cpp - coremltools models through MilProto -----===//
//
// Every committed fixture package (written by coremltools) is read, written
// with a new weight file, and read again: the two IRs must agree op by op,
// including the weight bytes, and a second write must give the same bytes.
//
//===----------------------------------------------------------------------===//
#include "io/MilProto.h"
#include "io/WeightFile.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

using namespace anefit;
namespace fs = std::filesystem;

namespace {

std::string readFile(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::span<const uint8_t> asBytes(const std::string &s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

/// Packages under tests/fixtures/*/model.mlpackage.
std::vector<fs::path> fixturePackages() {
  std::vector<fs::path> out;
  fs::path root = fs::path(ANEFIT_TEST_DATA_DIR) / "fixtures";
  if (!fs::is_directory(root))
    return out;
  for (const auto &entry : fs::directory_iterator(root)) {
    fs::path pkg = entry.path() / "model.mlpackage";
    if (fs::is_regular_file(pkg / "Data" / "com.apple.CoreML" / "model.mlmodel"))
      out.push_back(pkg);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Opens "@model_path/weights/<file>" under the package's model directory.
WeightOpener openerFor(const fs::path &modelDir) {
  return [modelDir](const std::string &name) -> std::shared_ptr<const BlobStore> {
    const std::string prefix = "@model_path/";
    EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
    return WeightFile::open((modelDir / name.substr(prefix.size())).string());
  };
}

/// Size and hash of constant bytes: enough to tell two weight payloads apart.
std::string digest(std::span<const uint8_t> d) {
  std::string_view view(reinterpret_cast<const char *>(d.data()), d.size());
  return std::to_string(d.size()) + ":" + std::to_string(std::hash<std::string_view>()(view));
}

/// Op type, name, input names and binding kinds, output names/types and every
/// constant's bytes, in program order, as one comparable string per op.
void summarize(const Block &block, std::vector<std::string> &out) {
  for (const auto &op : block.ops) {
    std::string s = op->type + " " + op->name + " (";
    for (const OpInput &in : op->inputs) {
      s += in.name + ":";
      for (const Binding &b : in.bindings)
        s += b.isValue() ? b.value->name + "," : "<" + b.constant->type.str() + ">,";
      s += " ";
    }
    s += ") ->";
    for (const auto &v : op->outputs)
      s += " " + v->name + v->type.str();
    for (const auto &[key, c] : op->attributes) {
      s += " @" + key + c->type.str();
      if (c->isTensorLike() && c->type.dtype() != DType::String)
        s += "#" + digest(c->data());
    }
    out.push_back(s);
    for (const auto &nested : op->blocks)
      summarize(*nested, out);
  }
  std::string outs = "return";
  for (const Value *v : block.outputs)
    outs += " " + v->name;
  out.push_back(outs);
}

std::vector<std::string> summarize(const Model &m) {
  std::vector<std::string> out;
  out.push_back("spec " + std::to_string(m.specificationVersion));
  for (const auto &f : m.program->functions) {
    std::string sig = "func " + f->name + " " + f->opset;
    for (const auto &in : f->inputs)
      sig += " " + in->name + in->type.str();
    out.push_back(sig);
    summarize(*f->body, out);
  }
  for (const FeatureDescription &d : m.description.inputs)
    out.push_back("input " + d.name + " " + std::to_string(static_cast<int>(d.type.kind)));
  for (const FeatureDescription &d : m.description.states)
    out.push_back("state " + d.name + " " + std::to_string(static_cast<int>(d.type.kind)));
  for (const FeatureDescription &d : m.description.outputs)
    out.push_back("output " + d.name + " " + std::to_string(static_cast<int>(d.type.kind)));
  for (const auto &[k, v] : m.description.metadata.userDefined)
    out.push_back("meta " + k + "=" + v);
  return out;
}

TEST(MilProtoFixtures, CoremltoolsPackagesRoundTrip) {
  std::vector<fs::path> packages = fixturePackages();
  ASSERT_FALSE(packages.empty()) << "no fixture packages under tests/fixtures";
  for (const fs::path &pkg : packages) {
    SCOPED_TRACE(pkg.parent_path().filename().string());
    fs::path modelDir = pkg / "Data" / "com.apple.CoreML";
    std::string bytes = readFile(modelDir / "model.mlmodel");
    auto first = parseModelProto(asBytes(bytes), "model.mlmodel", openerFor(modelDir));
    ASSERT_TRUE(first->program);
    EXPECT_GE(first->specificationVersion, 6);

    fs::path tmp =
        fs::temp_directory_path() / ("anefit-proto-fixture-" + std::to_string(::getpid()) + "-" +
                                     pkg.parent_path().filename().string());
    fs::create_directories(tmp / "weights");
    WeightWriter writer((tmp / "weights" / "weight.bin").string());
    std::string written = serializeModelProto(*first, &writer);
    writer.finish();

    auto second = parseModelProto(asBytes(written), "written.mlmodel", openerFor(tmp));
    EXPECT_EQ(summarize(*first), summarize(*second));

    WeightWriter again((tmp / "weights" / "again.bin").string());
    EXPECT_EQ(serializeModelProto(*second, &again), written);
    again.finish();
    fs::remove_all(tmp);
  }
}

} // namespace
