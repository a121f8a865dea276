//===- Constant.h - Compile-time constant values ---------------*- C++ -*-===//
//
// A Constant is a compile-time value: an immediate tensor held in memory, a
// reference to a blob in a weight file (memory-mapped by its BlobStore and
// never copied until a kernel asks for the bytes), or a tuple, list or
// dictionary of constants. Const ops, immediate op inputs and attributes all
// hold Constants.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Type.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace anefit {

/// A weight file that blobs can be read from. Implemented by io (mmap).
class BlobStore {
public:
  virtual ~BlobStore() = default;
  /// Path of the file, for messages.
  virtual const std::string &path() const = 0;
  /// The data bytes of the blob whose metadata record is at `metadataOffset`.
  /// Checks the record (sentinel, bounds, dtype == `expected`); throws
  /// InputError naming the file and offset on any mismatch. Bytes stay valid
  /// while the store lives.
  virtual std::span<const uint8_t> blobData(uint64_t metadataOffset, DType expected) const = 0;
};

/// Where a blob-backed constant lives.
struct BlobRef {
  std::string fileName; ///< as written in the model, e.g. "@model_path/weights/weight.bin"
  uint64_t offset = 0;  ///< offset of the blob's metadata record
  std::shared_ptr<const BlobStore> store; ///< null when the weight file is not available
};

class Constant {
public:
  enum class Kind : uint8_t { Tensor, Blob, Tuple, List, Dict };

  Type type;
  Kind kind = Kind::Tensor;
  /// Tensor: raw little-endian element bytes; bool one byte per element;
  /// sub-byte types packed LSB-first (formats.md §4).
  std::vector<uint8_t> bytes;
  /// Tensor of dtype string: the strings.
  std::vector<std::string> strings;
  /// Blob: where the bytes live.
  BlobRef blob;
  /// Tuple/List: members. Dict: key0, value0, key1, value1, ...
  std::vector<Constant> elements;
  std::string docString;
  /// Which TensorValue field the value was read from (0 = writer's choice);
  /// kept so a read -> write round trip reproduces the same encoding.
  uint8_t protoEncoding = 0;

  // Builders for immediate tensors.
  static Constant fromF32(std::vector<float> values, std::vector<int64_t> shape);
  static Constant fromF16Bits(std::vector<uint16_t> values, std::vector<int64_t> shape);
  static Constant fromI32(std::vector<int32_t> values, std::vector<int64_t> shape);
  static Constant fromI64(std::vector<int64_t> values, std::vector<int64_t> shape);
  static Constant fromBool(std::vector<bool> values, std::vector<int64_t> shape);
  static Constant fromStrings(std::vector<std::string> values, std::vector<int64_t> shape);
  static Constant scalarF32(float v) { return fromF32({v}, {}); }
  static Constant scalarI32(int32_t v) { return fromI32({v}, {}); }
  static Constant scalarBool(bool v) { return fromBool({v}, {}); }
  static Constant scalarString(std::string v) { return fromStrings({std::move(v)}, {}); }
  /// A tensor constant whose bytes live in a weight file.
  static Constant fromBlob(Type type, BlobRef ref);

  bool isTensorLike() const { return kind == Kind::Tensor || kind == Kind::Blob; }
  /// Number of elements of a tensor constant (from its type).
  uint64_t numElements() const;
  /// The raw element bytes; reads through the BlobStore for blob constants
  /// (throws InputError if the weight file is missing or the record is bad).
  std::span<const uint8_t> data() const;

  /// Element i converted to double / int64 (any numeric or bool dtype, any kind).
  double elementAsDouble(uint64_t i) const;
  int64_t elementAsInt(uint64_t i) const;
  /// All elements as int64 / double; empty for strings.
  std::vector<int64_t> asInts() const;
  std::vector<double> asDoubles() const;
  /// Scalar (or 1-element) string constant.
  std::optional<std::string> asString() const;
  /// Scalar (or 1-element) numeric/bool constant.
  std::optional<double> asScalar() const;
};

using ConstantRef = std::shared_ptr<const Constant>;

/// Resolves the weight-file name a model uses ("@model_path/weights/weight.bin")
/// to an opened store; may return null when weights are deliberately not
/// opened (blob constants then keep their BlobRef without a store).
using WeightOpener = std::function<std::shared_ptr<const BlobStore>(const std::string &fileName)>;

} // namespace anefit
