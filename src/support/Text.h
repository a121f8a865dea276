//===- Text.h - Text from files made safe to print --------------*- C++ -*-===//
//
// Names and strings in a model are data: they may hold newlines, NUL bytes,
// terminal escape sequences or bytes that are not UTF-8. Messages and
// reports print them through these helpers, so an error stays one line and a
// name cannot drive the user's terminal.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

/// True if `s` is valid UTF-8 (no overlong forms, surrogates or values past
/// U+10FFFF).
bool isUtf8(std::string_view s);

/// `s` with every control character (C0, DEL and the C1 range U+0080-U+009F)
/// and every byte that is not part of valid UTF-8 written as \xNN; a
/// backslash stays as it is. With `keepLayout`, '\n' and '\t' are kept.
std::string escapeControls(std::string_view s, bool keepLayout = false);

/// `s` with A-Z made a-z and every other byte kept: for names, extensions and
/// settings, whatever the C library's locale says.
std::string asciiLower(std::string_view s);

/// `items` with `separator` between them: "a, b, c".
std::string joined(const std::vector<std::string> &items, std::string_view separator);

/// A message as one printable line: escapeControls without layout, cut to
/// `maxBytes` with a note of how much was left out.
std::string oneLine(std::string_view message, size_t maxBytes = 4096);

/// Wraps a stream's buffer so that control characters written to it are
/// escaped as \xNN, except '\n', '\t', '\r' (progress lines) and, when
/// `allowColor`, the colour sequences ESC [ ... m the program writes itself.
/// Installed on std::cout and std::cerr by the command-line programs.
class TerminalSafeBuffer : public std::streambuf {
public:
  TerminalSafeBuffer(std::streambuf *target, bool allowColor);
  ~TerminalSafeBuffer() override;

  /// Installs a TerminalSafeBuffer on `stream` for the rest of the program.
  static void install(std::ostream &stream, bool allowColor);

protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char *s, std::streamsize n) override;
  int sync() override;

private:
  void put(unsigned char c);
  void flushPending(bool complete);
  std::streambuf *target_;
  bool allowColor_;
  std::string pending_; ///< an escape sequence or UTF-8 sequence not yet complete
};

} // namespace anefit
