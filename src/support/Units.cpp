//===- Units.cpp - Sizes and operation counts as people read them ---------===//
#include "support/Units.h"

#include <cstdio>

namespace anefit {

std::string humanBytes(uint64_t b) {
  char buf[32];
  if (b >= 1000000000ull)
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(b) / 1e9);
  else if (b >= 1000000ull)
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
  else if (b >= 1000ull)
    std::snprintf(buf, sizeof buf, "%.1f KB", static_cast<double>(b) / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string humanFlops(double f) {
  char buf[32];
  if (f >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GFLOP", f / 1e9);
  else if (f >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f MFLOP", f / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f FLOP", f);
  return buf;
}

} // namespace anefit
