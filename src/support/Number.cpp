//===- Number.cpp - Decimal numbers read from text ------------------------===//
#include "support/Number.h"

#include <charconv>
#include <cmath>
#include <system_error>

#if !defined(__cpp_lib_to_chars)
#include <cctype>
#include <cerrno>
#include <clocale>
#include <cstdlib>
#include <locale.h>
#include <string>
#endif

namespace anefit {

namespace {

#if defined(__cpp_lib_to_chars)

template <class T> bool parse(std::string_view text, T &out) {
  T v{};
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size())
    return false;
  out = v;
  return true;
}

#else

/// The "C" locale, made once: strtod_l reads '.' as the decimal point
/// whatever the program's locale says.
locale_t cLocale() {
  static locale_t c = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  return c;
}

double strto(const char *s, char **end, double) { return strtod_l(s, end, cLocale()); }
float strto(const char *s, char **end, float) { return strtof_l(s, end, cLocale()); }

template <class T> bool parse(std::string_view text, T &out) {
  // What from_chars refuses and strtod takes: leading space, '+', "0x".
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || text[0] == '+')
    return false;
  std::string_view digits = text[0] == '-' ? text.substr(1) : text;
  if (digits.size() >= 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
    return false;
  std::string copy(text); // strtod reads up to a NUL
  char *end = nullptr;
  errno = 0;
  T v = strto(copy.c_str(), &end, T{});
  if (end != copy.c_str() + copy.size())
    return false;
  // ERANGE is also set for a result in the subnormal range, which from_chars
  // returns; out of range is an overflow or a non-zero number gone to zero.
  if (errno == ERANGE && (std::isinf(v) || v == 0))
    return false;
  out = v;
  return true;
}

#endif

} // namespace

bool parseFloating(std::string_view text, double &out) { return parse(text, out); }
bool parseFloating(std::string_view text, float &out) { return parse(text, out); }

} // namespace anefit
