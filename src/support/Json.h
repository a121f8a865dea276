//===- Json.h - JSON read from files and written for people -----*- C++ -*-===//
//
// One policy for every JSON document anefit reads from a file it was given
// (plans, observations, manifests, state maps, evidence, ETRecords, the
// JSON inside a .pte) and one writer for every JSON it prints or saves.
//
// Reading: the text is scanned once before nlohmann-json builds anything.
// Arrays and objects nested deeper than kMaxJsonDepth are refused with an
// InputError naming the byte, so neither the parser nor the value's copy and
// destruction (both recursive) can run out of stack. Documents are read into
// nlohmann::json, whose objects are ordered maps (a key is found in log n;
// ordered_json looks keys up one by one, quadratic in an object's size).
// A document of N bytes takes at most kJsonMemoryPerByte * N bytes once
// built (the worst case is a flat array of empty objects).
//
// Writing: nlohmann-json escapes only C0 controls. dumpJson also writes DEL
// and the C1 controls (U+0080-U+009F) as \u escapes and replaces bytes that
// are not UTF-8, so the text is the same whether it goes to a file or through
// the terminal's escaping (support/Text.h): valid JSON either way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace anefit {

/// The deepest nesting of arrays and objects a JSON input may have.
inline constexpr size_t kMaxJsonDepth = 128;

/// Bytes of memory a parsed document takes per byte of its text, at most:
/// measured on 30 MB documents, `[{},{},...]` 37, `["",...]` 32, `[[],...]`
/// 27, `[0,0,...]` 24 (an element's 16 bytes, twice over while its array
/// grows, and what it holds).
inline constexpr size_t kJsonMemoryPerByte = 40;

/// Throws InputError ("FILE: PLACE: expected JSON nested at most 128 deep,
/// found deeper nesting at byte N") when `text` nests arrays and objects
/// deeper than `maxDepth`. One pass, no allocation; strings are skipped.
void checkJsonDepth(std::string_view text, const std::string &origin, const std::string &place = "",
                    size_t maxDepth = kMaxJsonDepth);

/// JSON text with every DEL and C1 control character written as a \u
/// escape. Outside strings JSON text is ASCII, so only string contents
/// change.
std::string escapeJsonControls(std::string text);

/// Throws InputError when kJsonMemoryPerByte times the size of `text` is
/// more memory than the process can still have (the machine's available
/// memory, and its address-space limit): refused up front, since running out
/// while nlohmann-json builds or frees a document ends the process.
void checkJsonFits(std::string_view text, const std::string &origin, const std::string &place = "");

/// Parses a document read from `origin` under the reader policy: deep
/// nesting, or a document that would not fit in memory, throws InputError;
/// malformed text gives a discarded value (each reader says what it
/// expected).
template <class Json = nlohmann::json>
Json parseJson(std::string_view text, const std::string &origin, const std::string &place = "") {
  checkJsonDepth(text, origin, place);
  checkJsonFits(text, origin, place);
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

/// `j` as JSON text for a file or a terminal: bytes that are not UTF-8
/// replaced (U+FFFD), every control character escaped.
template <class Json> std::string dumpJson(const Json &j, int indent = -1) {
  return escapeJsonControls(j.dump(indent, ' ', false, Json::error_handler_t::replace));
}

} // namespace anefit
