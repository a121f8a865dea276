//===- DType.cpp - MIL element types --------------------------------------===//
#include "support/DType.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace anefit {
namespace {

struct DTypeInfo {
  std::string_view name;
  int protoCode;
  uint32_t blobCode;
  int bits;
  DTypeKind kind;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
#define DTYPE(Enum, Name, Proto, Blob, Bits, Kind) {Name, Proto, Blob, Bits, DTypeKind::Kind},
#include "support/DTypes.def"
}};

const DTypeInfo &info(DType t) { return kInfo[static_cast<size_t>(t)]; }

} // namespace

std::string_view dtypeName(DType t) { return info(t).name; }
int dtypeProtoCode(DType t) { return info(t).protoCode; }
uint32_t dtypeBlobCode(DType t) { return info(t).blobCode; }
int dtypeBits(DType t) { return info(t).bits; }
DTypeKind dtypeKind(DType t) { return info(t).kind; }

std::optional<DType> dtypeFromName(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name)
      return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<DType> dtypeFromProtoCode(int code) {
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].protoCode == code)
      return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<DType> dtypeFromBlobCode(uint32_t code) {
  if (code == 0)
    return std::nullopt;
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].blobCode == code)
      return static_cast<DType>(i);
  return std::nullopt;
}

uint64_t storageBytes(DType t, uint64_t count) {
  uint64_t bits = static_cast<uint64_t>(dtypeBits(t));
  return (count * bits + 7) / 8;
}

uint32_t loadPackedBits(std::span<const uint8_t> bytes, uint64_t i, int bits) {
  uint64_t bit = i * static_cast<uint64_t>(bits);
  uint32_t v = 0;
  for (int b = 0; b < bits; ++b, ++bit)
    if (bit / 8 < bytes.size() && (bytes[bit / 8] >> (bit % 8)) & 1u)
      v |= 1u << b;
  return v;
}

void storePackedBits(std::span<uint8_t> bytes, uint64_t i, int bits, uint64_t v) {
  uint64_t bit = i * static_cast<uint64_t>(bits);
  for (int b = 0; b < bits; ++b, ++bit)
    if ((v >> b) & 1u)
      bytes[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal half: renormalise into a normal float.
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) // inf or nan; keep nan quiet
    return static_cast<uint16_t>(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
  if (absx >= 0x477FF000u) // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7C00u);
  if (absx < 0x38800000u) { // below the smallest normal half: subnormal or zero
    if (absx < 0x33000000u)
      return static_cast<uint16_t>(sign);
    uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23); // 14..24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((absx >> 13) - ((127 - 15) << 10));
  uint32_t rem = absx & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
    ++half;
  return static_cast<uint16_t>(sign | half);
}

int64_t truncToInt64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 9.2e18)
    return INT64_MAX;
  if (v <= -9.2e18)
    return INT64_MIN;
  return static_cast<int64_t>(v);
}

float bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

} // namespace anefit
