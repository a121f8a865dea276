//===- Diagnostic.h - Findings about a program -----------------*- C++ -*-===//
//
// Anything anefit has to say about a (well-formed) program — a verifier
// complaint, a warning about an unknown op — is a Diagnostic: severity, where
// (function and op), and a lower-case message with the values found and
// expected. Malformed files are InputErrors instead (support/Error.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace anefit {

struct Diagnostic {
  enum class Severity { Error, Warning, Note };
  Severity severity = Severity::Error;
  std::string function; ///< function name, if any
  std::string op;       ///< op name, if any
  std::string message;

  /// "error: main: op 'conv_0': message"
  std::string str() const {
    std::string s = severity == Severity::Error     ? "error: "
                    : severity == Severity::Warning ? "warning: "
                                                    : "note: ";
    if (!function.empty())
      s += function + ": ";
    if (!op.empty())
      s += "op '" + op + "': ";
    return s + message;
  }
};

using Diagnostics = std::vector<Diagnostic>;

inline bool hasErrors(const Diagnostics &ds) {
  for (const Diagnostic &d : ds)
    if (d.severity == Diagnostic::Severity::Error)
      return true;
  return false;
}

} // namespace anefit
