//===- WeightData.h - Reading and writing the weights rewrites change -*- C++ -*-===//
//
// Passes that change weights (requantize, split-projection, depthwise-taps)
// read a weight as the device holds it after decompression and write new
// ones as blob constants of an OwnedBlobs store (small ones as immediates,
// the way coremltools keeps them), so the writers send them to the weight
// file. Decoding follows the interpreter's constexpr_blockwise_shift_scale
// kernel element for element ((data - offset) * scale in fp32), then rounds
// to the op's output dtype as Core ML materializes it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "ir/OwnedBlobs.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace anefit {

/// A weight's dense values, as the op that produced it materializes them.
struct DenseWeight {
  std::vector<int64_t> shape;
  DType dtype = DType::F16;  ///< the producer's output dtype
  std::vector<float> values; ///< already rounded to `dtype`
};

/// The constant bound to `param`: an input (immediate or const op) or, for
/// constexpr ops before iOS18, an attribute; null if neither.
const Constant *paramConstant(const Operation &op, std::string_view param);

/// The dense values of the weight `producer` makes: a const of a float dtype
/// or a constexpr_blockwise_shift_scale of packed integers or floats with
/// constant data, scale and offset. nullopt (with `why` set) for other forms
/// or when a constant's bytes cannot be read.
std::optional<DenseWeight> denseWeight(const Operation &producer, std::string *why = nullptr);

/// Element bytes of `values` stored as `dtype` (fp16, fp32, int8, uint8,
/// int4, uint4: sub-byte ones packed LSB-first); values must be in range.
std::vector<uint8_t> packElements(const std::vector<float> &values, DType dtype);

/// A constant of `type` holding `bytes`: an immediate up to 64 bytes, else a
/// blob of `store`.
ConstantRef makeWeightConstant(const std::shared_ptr<OwnedBlobs> &store, Type type,
                               std::vector<uint8_t> bytes);

/// Rows [begin, end) of axis 0 of a tensor constant (immediate or blob), as a
/// new constant of `store`; nullopt when a row is not a whole number of bytes.
std::optional<ConstantRef> sliceRows(const std::shared_ptr<OwnedBlobs> &store, const Constant &c,
                                     int64_t begin, int64_t end);

/// The store a pass run puts its new weights in.
std::shared_ptr<OwnedBlobs> newWeightStore(std::string_view pass);

} // namespace anefit
