//===- Random.cpp - Seeded draws that every C++ library repeats -----------===//
//
// Built with floating-point contraction off (CMakeLists.txt): a fused
// multiply-add, which compilers form on their own where the CPU has one
// (aarch64), rounds once where the separate operations round twice.
//
//===----------------------------------------------------------------------===//
#include "support/Random.h"

#include <cmath>
#include <limits>

namespace anefit {

namespace {

/// 64 random bits: one draw of mt19937_64, two of mt19937 (high word first).
template <SeededEngine Engine> uint64_t bits64(Engine &rng) {
  if constexpr (std::same_as<Engine, std::mt19937_64>) {
    return rng();
  } else {
    uint64_t high = rng();
    uint64_t low = rng();
    return high << 32 | low;
  }
}

/// A uniform double in [0, 1) on the grid of 2^-53.
template <SeededEngine Engine> double unitDouble(Engine &rng) {
  return static_cast<double>(bits64(rng) >> 11) * 0x1p-53;
}

} // namespace

double portableLog(double x) {
  // x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s) for
  // s = (m - 1) / (m + 1), |s| < 0.172, whose odd series has converged to
  // double precision by its 20th term.
  int e = 0;
  double m = std::frexp(x, &e);
  if (m < 0.70710678118654752440) {
    m *= 2;
    --e;
  }
  double s = (m - 1) / (m + 1), s2 = s * s, power = s, sum = 0;
  for (int k = 1; k < 40; k += 2) {
    sum += power / k;
    power *= s2;
  }
  return 2 * sum + e * 0.69314718055994530942;
}

template <SeededEngine Engine> int64_t uniformInt(Engine &rng, int64_t lo, int64_t hi) {
  uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (range == 0) // [INT64_MIN, INT64_MAX]
    return static_cast<int64_t>(bits64(rng));
  // Draws below 2^64 mod range would make the low values likelier.
  uint64_t reject = (0 - range) % range, x = 0;
  do
    x = bits64(rng);
  while (x < reject);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % range);
}

template <SeededEngine Engine> float uniformFloat(Engine &rng, float lo, float hi) {
  double v = static_cast<double>(lo) + (static_cast<double>(hi) - lo) * unitDouble(rng);
  float f = static_cast<float>(v);
  // Rounding to float may reach hi itself.
  return f < hi ? f : std::nextafter(hi, lo);
}

template <SeededEngine Engine> float normalFloat(Engine &rng, float mean, float stddev) {
  // Marsaglia's polar method: a point uniform in the unit disc gives a
  // normal from its coordinate and its squared radius s (the pair's second
  // normal is not kept, so that a draw depends on the engine alone).
  for (;;) {
    double u = 2 * unitDouble(rng) - 1, v = 2 * unitDouble(rng) - 1, s = u * u + v * v;
    if (s > 0 && s < 1)
      return static_cast<float>(mean + stddev * (u * std::sqrt(-2 * portableLog(s) / s)));
  }
}

template <SeededEngine Engine> bool coinFlip(Engine &rng, double p) { return unitDouble(rng) < p; }

template int64_t uniformInt(std::mt19937 &, int64_t, int64_t);
template int64_t uniformInt(std::mt19937_64 &, int64_t, int64_t);
template float uniformFloat(std::mt19937 &, float, float);
template float uniformFloat(std::mt19937_64 &, float, float);
template float normalFloat(std::mt19937 &, float, float);
template float normalFloat(std::mt19937_64 &, float, float);
template bool coinFlip(std::mt19937 &, double);
template bool coinFlip(std::mt19937_64 &, double);

} // namespace anefit
