//===- Text.cpp - Text from files made safe to print ----------------------===//
#include "support/Text.h"

#include <cstdio>

namespace anefit {
namespace {

/// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8Length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size())
    return 0;
  uint32_t cp = len == 1 ? c : c & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) {
    auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2)
      return 0;
    cp = (cp << 6) | (d & 0x3f);
  }
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
    return 0;
  return len;
}

void appendHex(std::string &out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

/// True for a C1 control encoded in UTF-8 (U+0080-U+009F: C2 80..C2 9F).
bool isC1(std::string_view s, size_t i) {
  return static_cast<unsigned char>(s[i]) == 0xc2 && i + 1 < s.size() &&
         static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
         static_cast<unsigned char>(s[i + 1]) <= 0x9f;
}

} // namespace

bool isUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len = utf8Length(s, i);
    if (len == 0)
      return false;
    i += len;
  }
  return true;
}

std::string escapeControls(std::string_view s, bool keepLayout) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (keepLayout && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      appendHex(out, c);
      ++i;
      continue;
    }
    size_t len = utf8Length(s, i);
    if (len == 0) {
      appendHex(out, c);
      ++i;
    } else if (isC1(s, i)) {
      appendHex(out, c);
      appendHex(out, static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string asciiLower(std::string_view s) {
  std::string out(s);
  for (char &c : out)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string joined(const std::vector<std::string> &items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i)
      out += separator;
    out += items[i];
  }
  return out;
}

std::string oneLine(std::string_view message, size_t maxBytes) {
  std::string out = escapeControls(message);
  if (out.size() > maxBytes) {
    size_t cut = maxBytes;
    // Do not cut a UTF-8 sequence or an escape in half.
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80)
      --cut;
    size_t left = out.size() - cut;
    out.resize(cut);
    out += "... (" + std::to_string(left) + " more bytes)";
  }
  return out;
}

TerminalSafeBuffer::TerminalSafeBuffer(std::streambuf *target, bool allowColor)
    : target_(target), allowColor_(allowColor) {}

TerminalSafeBuffer::~TerminalSafeBuffer() { sync(); }

void TerminalSafeBuffer::install(std::ostream &stream, bool allowColor) {
  // Lives as long as the program: the stream may be written from static
  // destructors.
  auto *buffer = new TerminalSafeBuffer(stream.rdbuf(), allowColor);
  stream.rdbuf(buffer);
}

void TerminalSafeBuffer::flushPending(bool complete) {
  if (pending_.empty())
    return;
  std::string out;
  if (pending_[0] == '\x1b') {
    // A colour sequence we allow: ESC [ digits and ';' ... m.
    bool sgr = complete && allowColor_ && pending_.size() >= 3 && pending_[1] == '[' &&
               pending_.back() == 'm' &&
               pending_.find_first_not_of("0123456789;", 2) == pending_.size() - 1;
    out = sgr ? pending_ : "\\x1b" + escapeControls(pending_.substr(1));
  } else {
    out = escapeControls(pending_);
  }
  pending_.clear();
  target_->sputn(out.data(), static_cast<std::streamsize>(out.size()));
}

void TerminalSafeBuffer::put(unsigned char c) {
  if (!pending_.empty() && pending_[0] == '\x1b') {
    pending_ += static_cast<char>(c);
    bool done = (pending_.size() == 2 && c != '[') ||
                (pending_.size() > 2 && (c < '0' || c > ';')) || pending_.size() > 32;
    if (done)
      flushPending(/*complete=*/true);
    return;
  }
  if (!pending_.empty()) {
    // Inside a multi-byte UTF-8 sequence.
    pending_ += static_cast<char>(c);
    auto lead = static_cast<unsigned char>(pending_[0]);
    size_t want = (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
    if ((c >> 6) != 2 || pending_.size() >= want)
      flushPending(true);
    return;
  }
  if (c == '\x1b' || c >= 0xc0) {
    pending_ += static_cast<char>(c);
    return;
  }
  if (c == '\n' || c == '\t' || c == '\r' || (c >= 0x20 && c != 0x7f && c < 0x80)) {
    target_->sputc(static_cast<char>(c));
    return;
  }
  std::string esc;
  appendHex(esc, c);
  target_->sputn(esc.data(), static_cast<std::streamsize>(esc.size()));
}

TerminalSafeBuffer::int_type TerminalSafeBuffer::overflow(int_type ch) {
  if (traits_type::eq_int_type(ch, traits_type::eof()))
    return traits_type::not_eof(ch);
  put(static_cast<unsigned char>(traits_type::to_char_type(ch)));
  return ch;
}

std::streamsize TerminalSafeBuffer::xsputn(const char *s, std::streamsize n) {
  std::streamsize i = 0;
  while (i < n) {
    // Runs of printable ASCII (most of any output) go through in one call.
    std::streamsize run = i;
    if (pending_.empty())
      while (run < n && ((s[run] >= 0x20 && s[run] < 0x7f) || s[run] == '\n'))
        ++run;
    if (run > i) {
      target_->sputn(s + i, run - i);
      i = run;
      continue;
    }
    put(static_cast<unsigned char>(s[i++]));
  }
  return n;
}

int TerminalSafeBuffer::sync() {
  // A sequence cut by a flush is printed escaped, never half raw.
  flushPending(/*complete=*/false);
  return target_->pubsync();
}

} // namespace anefit
