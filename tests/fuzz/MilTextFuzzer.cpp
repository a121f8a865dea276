//===- MilTextFuzzer.cpp - Fuzz the MIL text parser and its round trips ---===//
//
// Arbitrary text through parseModelText: it must give a model or throw
// InputError. A model that parses must survive what anefit does with text:
// printed (as `anefit dump` prints it), the text must parse again and print
// the same; a model the writers accept (unwritableReason empty) must
// serialize to a protobuf that parses again. Any other outcome traps.
//
//===----------------------------------------------------------------------===//
#include "io/MilProto.h"
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "ir/Verifier.h"
#include "support/Error.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <sstream>
#include <string_view>

using namespace anefit;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char *, int, const std::string &) {});
  return 0;
}

namespace {

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "%s: %s\n", what, detail.c_str());
  __builtin_trap();
}

std::string print(const Model &m) {
  std::ostringstream os;
  printModel(m, os);
  return os.str();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  // The first byte picks the reading mode (coremltools' print form or not).
  ParseOptions options;
  options.allowUndefinedValues = data[0] & 1;
  std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);
  WeightOpener noWeights = [](const std::string &) { return nullptr; };
  std::unique_ptr<Model> model;
  try {
    model = parseModelText(text, "fuzz.mil", noWeights, options);
  } catch (const InputError &) {
    return 0;
  }
  // What every reader of files refuses (io::loadModel) goes no further.
  if (model->program && hasErrors(verifyValueScopes(*model->program)))
    return 0;

  std::string once = print(*model);
  std::unique_ptr<Model> again;
  try {
    again = parseModelText(once, "printed.mil", noWeights, options);
  } catch (const InputError &e) {
    fail("printed text does not parse back", std::string(e.what()) + "\n" + once);
  }
  std::string twice = print(*again);
  if (twice != once)
    fail("printing is not stable", once + "\n----\n" + twice);

  if (unwritableReason(*model).empty()) {
    std::string bytes;
    try {
      bytes = serializeModelProto(*model, nullptr);
    } catch (const InputError &) {
      return 0; // blob constants need a package: refused, fine
    }
    try {
      parseModelProto({reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()},
                      "written.mlmodel", noWeights);
    } catch (const InputError &e) {
      fail("a model the writer accepted does not read back", e.what());
    }
  }
  return 0;
}
