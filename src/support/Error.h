//===- Error.h - Errors raised by malformed user input ----------*- C++ -*-===//
//
// anefit reports every problem that user input can trigger (a truncated
// protobuf, a blob offset past the end of a file, an unknown state name) as an
// InputError: one line naming the file, the place and what was expected versus
// what was found. Tools catch it at the top and exit with code 2. Our own
// invariants use assert; nothing user-controlled may reach an assert.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <stdexcept>
#include <string>

namespace anefit {

/// A problem with user input. `what()` is a complete one-line message.
class InputError : public std::runtime_error {
public:
  explicit InputError(const std::string &message) : std::runtime_error(message) {}

  /// Builds "FILE: PLACE: MESSAGE", leaving out empty parts.
  static InputError at(const std::string &file, const std::string &place,
                       const std::string &message);
};

/// Throws InputError::at(file, place, "expected EXPECTED, found FOUND").
[[noreturn]] void failExpected(const std::string &file, const std::string &place,
                               const std::string &expected, const std::string &found);

} // namespace anefit
