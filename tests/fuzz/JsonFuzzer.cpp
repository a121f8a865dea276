//===- JsonFuzzer.cpp - Fuzz the JSON reader policy and writer ------------===//
//
// Any text through parseJson (support/Json.h): it must give a value, a
// discarded value or an InputError for nesting past kMaxJsonDepth, never a
// crash (nlohmann-json's parser, copy and destructor recurse). An accepted
// document is copied into an ordered_json and back, as the writers do;
// written with dumpJson it must hold no DEL or C1 control and parse back to
// the same value. Deep and wide documents seed the corpus (corpus/json).
//
//===----------------------------------------------------------------------===//
#include "support/Error.h"
#include "support/Json.h"

#include <cstdio>
#include <string_view>

using namespace anefit;

namespace {

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "%s: %s\n", what, detail.substr(0, 2000).c_str());
  __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  nlohmann::json j;
  try {
    j = parseJson(text, "fuzz.json");
  } catch (const InputError &) {
    return 0;
  }
  if (j.is_discarded())
    return 0;
  // A copy into the ordered form, as the writers hold values: it recurses
  // over the value. (Not by parsing the text again: ordered_json looks keys
  // up one by one, quadratic in an object's size, which made a wide seed
  // take most of a second.)
  nlohmann::ordered_json ordered(j);
  std::string written = dumpJson(j, 1);
  for (size_t i = 0; i < written.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(written[i]);
    if (c == 0x7f || (c == 0xc2 && i + 1 < written.size() &&
                      static_cast<unsigned char>(written[i + 1]) >= 0x80 &&
                      static_cast<unsigned char>(written[i + 1]) <= 0x9f))
      fail("a control character written raw", written);
  }
  nlohmann::json back = parseJson(written, "written.json");
  if (back.is_discarded())
    fail("written JSON does not parse", written);
  if (dumpJson(back) != dumpJson(j) || dumpJson(ordered) != dumpJson(j))
    fail("written JSON reads back different", written);
  return 0;
}
