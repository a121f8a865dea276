//===- ModelProtoFuzzer.cpp - Fuzz the Model protobuf reader --------------===//
//
// parseModelProto on arbitrary bytes, without weight files (as `check` reads
// models): it must return a model or throw InputError, and must not allocate
// in proportion to sizes claimed by the input.
//
//===----------------------------------------------------------------------===//
#include "io/MilProto.h"

#include "support/Error.h"

#include <google/protobuf/stubs/logging.h>

#include <span>

using namespace anefit;

/// libprotobuf logs every invalid UTF-8 string it meets; at thousands of
/// inputs a second that noise costs more than the parsing.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char *, int, const std::string &) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  WeightOpener noWeights = [](const std::string &) { return nullptr; };
  try {
    std::unique_ptr<Model> model =
        parseModelProto(std::span<const uint8_t>(data, size), "fuzz.mlmodel", noWeights);
    // Writing back what was read must work too (no weights: blob constants
    // make the serializer throw InputError, which is fine).
    if (model)
      (void)serializeModelProto(*model, nullptr);
  } catch (const InputError &) {
  }
  return 0;
}
