//===- DType.h - MIL element types ------------------------------*- C++ -*-===//
//
// The element types of MIL tensors, generated from DTypes.def so that the
// text names, protobuf codes and weight-blob codes can never drift apart.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

namespace anefit {

enum class DType : uint8_t {
#define DTYPE(Enum, Name, Proto, Blob, Bits, Kind) Enum,
#include "support/DTypes.def"
};

enum class DTypeKind : uint8_t { Bool, String, Float, Signed, Unsigned };

/// Number of rows in DTypes.def.
inline constexpr int kNumDTypes = 0
#define DTYPE(Enum, Name, Proto, Blob, Bits, Kind) +1
#include "support/DTypes.def"
    ;

/// Text name as coremltools prints it ("fp16", "int32", ...).
std::string_view dtypeName(DType t);
/// Inverse of dtypeName; nullopt for an unknown name.
std::optional<DType> dtypeFromName(std::string_view name);
/// MILSpec.DataType enum value.
int dtypeProtoCode(DType t);
std::optional<DType> dtypeFromProtoCode(int code);
/// BlobDataType code used in weight.bin records; 0 if the type cannot be stored there.
uint32_t dtypeBlobCode(DType t);
std::optional<DType> dtypeFromBlobCode(uint32_t code);
/// Storage width in bits of one element (0 for string).
int dtypeBits(DType t);
DTypeKind dtypeKind(DType t);
inline bool isFloat(DType t) { return dtypeKind(t) == DTypeKind::Float; }
inline bool isInteger(DType t) {
  return dtypeKind(t) == DTypeKind::Signed || dtypeKind(t) == DTypeKind::Unsigned;
}
/// True for the packed sub-byte types (int4, uint1..uint6).
inline bool isSubByte(DType t) { return dtypeBits(t) > 0 && dtypeBits(t) < 8; }

/// Number of bytes needed to store `count` elements (sub-byte types packed LSB-first).
uint64_t storageBytes(DType t, uint64_t count);

/// Element i of a packed sub-byte tensor (LSB-first, formats.md §4), the
/// low `bits` bits of the result. Bits past the end of `bytes` read as 0.
uint32_t loadPackedBits(std::span<const uint8_t> bytes, uint64_t i, int bits);
/// ORs the low `bits` bits of `v` into element i of a zero-initialised packed
/// buffer; `bytes` must hold at least storageBytes(t, i + 1) bytes.
void storePackedBits(std::span<uint8_t> bytes, uint64_t i, int bits, uint64_t v);

/// IEEE binary16 <-> binary32 conversions, round-to-nearest-even.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
/// halfToFloat of the fp16 value stored at p, which need not be 2-byte
/// aligned (a model file's fp16 data often is not).
inline float halfToFloatAt(const uint16_t *p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return halfToFloat(h);
}
/// bfloat16 <-> binary32 (round-to-nearest-even).
float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);

/// A float as an integer the way a cast to int64 does it here: truncated
/// toward zero and saturated (NaN is 0, a value beyond int64 its nearest
/// bound), never the undefined conversion.
int64_t truncToInt64(double v);

} // namespace anefit
