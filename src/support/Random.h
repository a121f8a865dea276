//===- Random.h - Seeded draws that every C++ library repeats -----*- C++ -*-===//
//
// The standard fixes the bits of its engines (std::mt19937, std::mt19937_64)
// but not how a distribution turns them into numbers: libstdc++ and libc++
// draw different normals, uniform floats and integers from the same engine.
// Random inputs (`--random`, rewrites verified on random inputs) and the
// tests' random cases are drawn here instead, from the engine's raw output
// with + - * / and a square root only (IEEE-exact everywhere; the logarithm
// is our own), so a seed gives the same bits with g++ or clang++, libstdc++
// or libc++, on x86-64 or aarch64.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <iterator>
#include <random>

namespace anefit {

/// The draws below are defined for these two engines.
template <class Engine>
concept SeededEngine = std::same_as<Engine, std::mt19937> || std::same_as<Engine, std::mt19937_64>;

/// A uniform integer in [lo, hi] (lo <= hi), without bias.
template <SeededEngine Engine> int64_t uniformInt(Engine &rng, int64_t lo, int64_t hi);

/// A uniform float in [lo, hi) (lo < hi).
template <SeededEngine Engine> float uniformFloat(Engine &rng, float lo, float hi);

/// A normal float of `mean` and standard deviation `stddev`.
template <SeededEngine Engine>
float normalFloat(Engine &rng, float mean = 0.0f, float stddev = 1.0f);

/// true with probability `p`.
template <SeededEngine Engine> bool coinFlip(Engine &rng, double p);

/// Puts [first, last) in a uniformly random order (Fisher-Yates), the same
/// order with every library (std::shuffle's is not).
template <SeededEngine Engine, std::random_access_iterator It>
void shuffleRange(Engine &rng, It first, It last) {
  for (int64_t i = static_cast<int64_t>(last - first) - 1; i > 0; --i)
    std::iter_swap(first + i, first + uniformInt(rng, 0, i));
}

/// The natural logarithm of a positive finite x, from exact operations
/// only (the C library's log differs between systems in the last bit).
double portableLog(double x);

extern template int64_t uniformInt(std::mt19937 &, int64_t, int64_t);
extern template int64_t uniformInt(std::mt19937_64 &, int64_t, int64_t);
extern template float uniformFloat(std::mt19937 &, float, float);
extern template float uniformFloat(std::mt19937_64 &, float, float);
extern template float normalFloat(std::mt19937 &, float, float);
extern template float normalFloat(std::mt19937_64 &, float, float);
extern template bool coinFlip(std::mt19937 &, double);
extern template bool coinFlip(std::mt19937_64 &, double);

} // namespace anefit
