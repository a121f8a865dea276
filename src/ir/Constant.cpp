//===- Constant.cpp - Compile-time constant values ------------------------===//
#include "ir/Constant.h"

#include "support/Error.h"

#include <cstring>

namespace anefit {
namespace {

template <typename T> std::vector<uint8_t> toBytes(const std::vector<T> &v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty())
    std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <typename T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

} // namespace

Constant Constant::fromF32(std::vector<float> values, std::vector<int64_t> shape) {
  Constant c;
  c.type = Type::tensor(DType::F32, shape);
  c.bytes = toBytes(values);
  return c;
}

Constant Constant::fromF16Bits(std::vector<uint16_t> values, std::vector<int64_t> shape) {
  Constant c;
  c.type = Type::tensor(DType::F16, shape);
  c.bytes = toBytes(values);
  return c;
}

Constant Constant::fromI32(std::vector<int32_t> values, std::vector<int64_t> shape) {
  Constant c;
  c.type = Type::tensor(DType::I32, shape);
  c.bytes = toBytes(values);
  return c;
}

Constant Constant::fromI64(std::vector<int64_t> values, std::vector<int64_t> shape) {
  Constant c;
  c.type = Type::tensor(DType::I64, shape);
  c.bytes = toBytes(values);
  return c;
}

Constant Constant::fromBool(std::vector<bool> values, std::vector<int64_t> shape) {
  Constant c;
  c.type = Type::tensor(DType::Bool, shape);
  for (bool b : values)
    c.bytes.push_back(b ? 1 : 0);
  return c;
}

Constant Constant::fromStrings(std::vector<std::string> values, std::vector<int64_t> shape) {
  Constant c;
  c.type = Type::tensor(DType::String, shape);
  c.strings = std::move(values);
  return c;
}

Constant Constant::fromBlob(Type type, BlobRef ref) {
  Constant c;
  c.type = std::move(type);
  c.kind = Kind::Blob;
  c.blob = std::move(ref);
  return c;
}

uint64_t Constant::numElements() const {
  if (type.dtype() == DType::String && kind == Kind::Tensor)
    return strings.size();
  auto n = type.numElements();
  return n ? static_cast<uint64_t>(*n) : 0;
}

std::span<const uint8_t> Constant::data() const {
  if (kind == Kind::Blob) {
    if (!blob.store)
      throw InputError::at(blob.fileName, "offset " + std::to_string(blob.offset),
                           "weight file is not available; keep the weights/ folder "
                           "next to the model");
    return blob.store->blobData(blob.offset, type.dtype());
  }
  return bytes;
}

double Constant::elementAsDouble(uint64_t i) const {
  DType t = type.dtype();
  std::span<const uint8_t> d = data();
  auto need = [&](uint64_t width) {
    if ((i + 1) * width > d.size())
      throw InputError("constant holds fewer elements than its type " + type.str() + " says");
  };
  if (isSubByte(t)) {
    uint32_t v = loadPackedBits(d, i, dtypeBits(t));
    if (t == DType::I4)
      return static_cast<double>(v >= 8 ? static_cast<int>(v) - 16 : static_cast<int>(v));
    return static_cast<double>(v);
  }
  switch (t) {
  case DType::Bool:
  case DType::U8:
    need(1);
    return d[i];
  case DType::I8:
    need(1);
    return static_cast<int8_t>(d[i]);
  case DType::F16:
    need(2);
    return halfToFloat(load<uint16_t>(&d[i * 2]));
  case DType::BF16:
    need(2);
    return bf16ToFloat(load<uint16_t>(&d[i * 2]));
  case DType::F32:
    need(4);
    return load<float>(&d[i * 4]);
  case DType::F64:
    need(8);
    return load<double>(&d[i * 8]);
  case DType::I16:
    need(2);
    return load<int16_t>(&d[i * 2]);
  case DType::U16:
    need(2);
    return load<uint16_t>(&d[i * 2]);
  case DType::I32:
    need(4);
    return load<int32_t>(&d[i * 4]);
  case DType::U32:
    need(4);
    return load<uint32_t>(&d[i * 4]);
  case DType::I64:
    need(8);
    return static_cast<double>(load<int64_t>(&d[i * 8]));
  case DType::U64:
    need(8);
    return static_cast<double>(load<uint64_t>(&d[i * 8]));
  default:
    throw InputError("constant of type " + type.str() + " has no numeric value");
  }
}

int64_t Constant::elementAsInt(uint64_t i) const {
  DType t = type.dtype();
  if (t == DType::I64 && kind == Kind::Tensor && (i + 1) * 8 <= bytes.size())
    return load<int64_t>(&bytes[i * 8]);
  // A float read as an integer converts as the runtime's casts do (a shape
  // written [3, -inf] then fails the shape's own checks).
  return truncToInt64(elementAsDouble(i));
}

std::vector<int64_t> Constant::asInts() const {
  std::vector<int64_t> out;
  if (!isTensorLike() || type.dtype() == DType::String)
    return out;
  uint64_t n = numElements();
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i)
    out.push_back(elementAsInt(i));
  return out;
}

std::vector<double> Constant::asDoubles() const {
  std::vector<double> out;
  if (!isTensorLike() || type.dtype() == DType::String)
    return out;
  uint64_t n = numElements();
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i)
    out.push_back(elementAsDouble(i));
  return out;
}

std::optional<std::string> Constant::asString() const {
  if (kind == Kind::Tensor && type.dtype() == DType::String && strings.size() == 1)
    return strings[0];
  return std::nullopt;
}

std::optional<double> Constant::asScalar() const {
  if (!isTensorLike() || type.dtype() == DType::String || numElements() != 1)
    return std::nullopt;
  return elementAsDouble(0);
}

} // namespace anefit
