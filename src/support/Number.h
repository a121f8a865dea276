//===- Number.h - Decimal numbers read from text ----------------*- C++ -*-===//
//
// Floating-point numbers of MIL text and of the command line, read the way
// std::from_chars reads them (the whole text, no locale, no leading space or
// '+', no hexadecimal form) on every standard library: libc++ before 20 has no
// floating-point std::from_chars, and there the C library's correctly rounded
// strtod_l/strtof_l in the "C" locale does the work.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string_view>

namespace anefit {

/// Reads all of `text` as a decimal floating-point number ("1.5", "-2e-3",
/// "inf", "nan"), rounded to nearest. False, with `out` untouched, when `text`
/// is not one whole number in that form, or when its value is out of the
/// type's range (it overflows, or a non-zero number rounds to zero).
bool parseFloating(std::string_view text, double &out);
bool parseFloating(std::string_view text, float &out);

} // namespace anefit
