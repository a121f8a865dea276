//===- Json.cpp - JSON read from files and written for people -------------===//
#include "support/Json.h"

#include "support/Error.h"
#include "support/Units.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <sys/resource.h>
#include <unistd.h>

namespace anefit {

void checkJsonDepth(std::string_view text, const std::string &origin, const std::string &place,
                    size_t maxDepth) {
  size_t depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i; // the escaped character, whatever it is
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        throw InputError::at(origin, place,
                             "expected JSON nested at most " + std::to_string(maxDepth) +
                                 " deep, found deeper nesting at byte " + std::to_string(i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

namespace {

/// Bytes this process can still allocate: the machine's MemAvailable, and
/// what the address-space limit leaves (ulimit -v).
uint64_t memoryLeft() {
  uint64_t left = UINT64_MAX;
  if (FILE *f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        left = static_cast<uint64_t>(kb) * 1024;
        break;
      }
    std::fclose(f);
  }
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    unsigned long long pages = 0;
    if (FILE *f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%llu", &pages) != 1)
        pages = 0;
      std::fclose(f);
    }
    uint64_t used = static_cast<uint64_t>(pages) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    uint64_t limit = static_cast<uint64_t>(rl.rlim_cur);
    left = std::min(left, limit > used ? limit - used : 0);
  }
  return left;
}

} // namespace

void checkJsonFits(std::string_view text, const std::string &origin, const std::string &place) {
  uint64_t need = static_cast<uint64_t>(text.size()) * kJsonMemoryPerByte;
  if (need < (uint64_t(64) << 20))
    return; // small documents: never worth a look
  uint64_t left = memoryLeft();
  if (need > left)
    throw InputError::at(origin, place,
                         "expected JSON that fits in memory once read (up to " +
                             std::to_string(kJsonMemoryPerByte) + " times its " +
                             humanBytes(text.size()) + ": " + humanBytes(need) + "), found " +
                             humanBytes(left) + " left");
}

std::string escapeJsonControls(std::string text) {
  auto needs = [&](size_t i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    return c == 0x7f ||
           (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
            static_cast<unsigned char>(text[i + 1]) <= 0x9f);
  };
  size_t first = 0;
  while (first < text.size() && !needs(first))
    ++first;
  if (first == text.size())
    return text;
  static const char hex[] = "0123456789abcdef";
  std::string out = text.substr(0, first);
  out.reserve(text.size() + 16);
  for (size_t i = first; i < text.size(); ++i) {
    if (!needs(i)) {
      out += text[i];
      continue;
    }
    // DEL is U+007F; 0xC2 0x80-0x9F is U+0080-U+009F.
    unsigned cp =
        static_cast<unsigned char>(text[i]) == 0x7f ? 0x7fu : static_cast<unsigned char>(text[++i]);
    out += "\\u00";
    out += hex[cp >> 4];
    out += hex[cp & 15];
  }
  return out;
}

} // namespace anefit
