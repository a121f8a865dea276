//===- RandomInput.h - Random input tensors for a function -------*- C++ -*-===//
//
// Verifying a rewrite or a split needs inputs nobody has to supply: normal(0,
// 1) floats, small non-negative integers (valid positions and indices for
// the small models users verify) and fair bools, from a seeded generator so
// runs repeat exactly, with any C++ library (support/Random.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"
#include "runtime/Tensor.h"

#include <random>

namespace anefit::runtime {

/// A random tensor for function input `in`. Symbolic dims take the default
/// shape of `desc` (the input's feature description) when given, else 1.
Tensor randomInput(const Value &in, const FeatureDescription *desc, std::mt19937_64 &rng);

} // namespace anefit::runtime
