//===- MutationTest.cpp - Damaged model protobufs never crash -------------===//
//
// Deterministic mutations of real coremltools models (every byte changed in
// turn, every truncation): reading must either succeed or throw InputError,
// and whatever was read must write back or throw InputError. Anything else -
// a crash, an assert, another exception type - fails the test. A fuzzer
// explores further; this keeps the basic guarantee in every test run.
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

struct Outcome {
  int parsed = 0;
  int refused = 0;
};

/// Parses `bytes` and, if that works, writes the model back. Only InputError
/// may come out.
void tryOne(const std::string &bytes, const WeightOpener &opener, const std::string &weightsPath,
            Outcome &outcome) {
  try {
    auto model = parseModelProto({reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()},
                                 "model.mlmodel", opener);
    ++outcome.parsed;
    WeightWriter writer(weightsPath);
    serializeModelProto(*model, &writer);
  } catch (const InputError &e) {
    ++outcome.refused;
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message is one line";
  }
}

TEST(MilProtoMutation, DamagedModelsOnlyRaiseInputErrors) {
  fs::path modelDir = fs::path(ANEFIT_TEST_DATA_DIR) /
                      "fixtures/lfm2_shortconv/model.mlpackage/Data/com.apple.CoreML";
  ASSERT_TRUE(fs::is_regular_file(modelDir / "model.mlmodel"))
      << "fixture lfm2_shortconv is not present";
  std::ifstream in(modelDir / "model.mlmodel", std::ios::binary);
  const std::string original((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  ASSERT_FALSE(original.empty());

  auto weights = WeightFile::open((modelDir / "weights/weight.bin").string());
  WeightOpener opener = [&](const std::string &) { return weights; };
  std::string out =
      (fs::temp_directory_path() / ("anefit-proto-mutation-" + std::to_string(::getpid()) + ".bin"))
          .string();

  Outcome outcome;
  for (size_t i = 0; i < original.size(); ++i) {
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      std::string bytes = original;
      bytes[i] = static_cast<char>(bytes[i] ^ flip);
      tryOne(bytes, opener, out, outcome);
    }
  }
  for (size_t len = 0; len < original.size(); len += 3)
    tryOne(original.substr(0, len), opener, out, outcome);
  fs::remove(out);

  // Both paths are exercised: many mutations hit names or values and still
  // parse, many break the structure.
  EXPECT_GT(outcome.parsed, 100);
  EXPECT_GT(outcome.refused, 100);
}

} // namespace
