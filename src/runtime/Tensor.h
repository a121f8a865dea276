//===- Tensor.h - Runtime tensors of the reference interpreter --*- C++ -*-===//
//
// A Tensor is a dtype, a static shape and a view of contiguous row-major
// bytes. The bytes are either owned (results of kernels) or borrowed from
// somewhere that outlives the view (constants in a memory-mapped weight file),
// so weights are used in place and never copied.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"
#include "support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::runtime {

using Shape = std::vector<int64_t>;

/// Number of elements of `shape` (1 for a scalar).
int64_t numElementsOf(const Shape &shape);
/// "[1, 8, 64]".
std::string shapeStr(const Shape &shape);
/// Row-major strides (in elements) of `shape`.
std::vector<int64_t> stridesOf(const Shape &shape);

/// Largest tensor a kernel may allocate, in bytes. Guards allocation driven by
/// shapes read from a model or from user inputs.
inline constexpr uint64_t kMaxTensorBytes = uint64_t(16) << 30;

class Tensor;
struct OwnedBuffer;

/// The interpreter's memory budget: the bytes of tensor buffers alive at
/// once. Every buffer is charged in Tensor's one allocation path before it is
/// allocated, so a shape read from a model or an input (a state of
/// (1, 2147483648, 2), a split into 10^8 parts) is refused instead of taking
/// the machine's memory. The limit is process-wide; verbs that run models
/// set it from --max-memory.
class MemoryBudget {
public:
  /// The limit in bytes. Unless set, 3/4 of the memory available to the
  /// process when first asked (MemAvailable, the cgroup's limit and the
  /// process's address-space and data limits).
  static uint64_t limit();
  /// Sets the limit; 0 restores the default.
  static void setLimit(uint64_t bytes);
  /// Reads a limit as a user writes it: "8G", "512M", "64KiB", "1048576"
  /// (K, M, G, T as powers of 1024, an optional "i" and "B"). nullopt for
  /// anything else, zero, or a size past 2^64.
  static std::optional<uint64_t> parseLimit(std::string_view text);
  /// Bytes charged now, and the most charged at once so far.
  static uint64_t used();
  static uint64_t peak();
  /// What the default limit would be now.
  static uint64_t defaultLimit();
  /// Charges `bytes` for a tensor of `dtype` and `shape`; throws
  /// MemoryBudgetError (leaving nothing charged) if the limit would be
  /// passed.
  static void charge(uint64_t bytes, DType dtype, const std::vector<int64_t> &shape);
  static void release(uint64_t bytes);
};

/// An allocation the memory budget refused. The interpreter adds the op it
/// happened in; verbs add the model file.
class MemoryBudgetError : public InputError {
public:
  using InputError::InputError;
};

/// Forms of LazyValue (bits, so a kernel parameter can take several).
enum LazyKind : unsigned {
  /// A `tile` held as its input plus repetitions (kernels/Lazy.h).
  kLazyTiled = 1,
  /// A compressed constant decoded where it is read (kernels/Lazy.h).
  kLazyCompressed = 2,
};

/// A value the interpreter holds in a form cheaper than its dense bytes: a
/// compressed weight read in place, a repetition that is never written out.
/// Kernels that know the form use it; for every other reader the interpreter
/// makes the dense tensor with materialize().
class LazyValue {
public:
  virtual ~LazyValue() = default;
  virtual LazyKind kind() const = 0;
  /// The dense tensor this value stands for (an owned or borrowed tensor).
  virtual Tensor materialize() const = 0;
};

class Tensor {
public:
  Tensor() = default;

  /// A new zero-filled tensor. Throws InputError if the shape is negative or
  /// the size exceeds kMaxTensorBytes, MemoryBudgetError if it does not fit
  /// the memory budget.
  static Tensor zeros(DType dtype, Shape shape);
  /// A new tensor whose bytes the caller overwrites in full (not initialized).
  /// Same checks as zeros.
  static Tensor empty(DType dtype, Shape shape);
  /// A view of `bytes` (which must hold the whole tensor) kept alive by `owner`;
  /// null `bytes` (a tensor without elements) gives a non-null empty view.
  static Tensor borrow(DType dtype, Shape shape, const void *bytes,
                       std::shared_ptr<const void> owner);
  /// A tensor of `dtype` and `shape` held as `value` (no bytes until
  /// materialized).
  static Tensor lazy(DType dtype, Shape shape, std::shared_ptr<const LazyValue> value);
  /// Builders used by tests and tools.
  static Tensor fromF32(std::vector<float> values, Shape shape);
  static Tensor fromI32(std::vector<int32_t> values, Shape shape);
  static Tensor fromBool(std::vector<bool> values, Shape shape);
  static Tensor scalarF32(float v) { return fromF32({v}, {}); }
  static Tensor scalarI32(int32_t v) { return fromI32({v}, {}); }

  /// False for a default-constructed tensor (no value).
  bool valid() const {
    return data_ != nullptr || lazy_ != nullptr || (numElements_ == 0 && !shape_.empty());
  }
  /// True for a tensor held as a LazyValue: bytes() is null, read the value
  /// or materialize() it.
  bool isLazy() const { return lazy_ != nullptr; }
  const LazyValue *lazyValue() const { return lazy_.get(); }
  const std::shared_ptr<const LazyValue> &lazyShared() const { return lazy_; }
  /// The dense form: this tensor itself unless it is lazy.
  Tensor materialize() const;
  DType dtype() const { return dtype_; }
  const Shape &shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numElements() const { return numElements_; }
  uint64_t numBytes() const { return storageBytes(dtype_, static_cast<uint64_t>(numElements_)); }
  bool isOwned() const { return owned_; }
  /// True when this tensor is the only holder of its owned bytes (no other
  /// tensor, view or reshape shares them), so they may be written in place.
  bool ownsUniquely() const { return owned_ && owner_.use_count() == 1; }
  /// True when both tensors view the same storage.
  bool sharesStorage(const Tensor &o) const { return owner_ && owner_ == o.owner_; }

  const uint8_t *bytes() const { return data_; }
  template <typename T> const T *data() const { return reinterpret_cast<const T *>(data_); }
  /// Writable bytes; only for owned tensors (kernel results being filled).
  template <typename T> T *mutableData() { return reinterpret_cast<T *>(mutableBytes()); }
  uint8_t *mutableBytes();
  /// mutableBytes for a write of the elements offset + sum_d i_d * strides[d]
  /// (0 <= i_d < lengths[d]) alone: the fp16 form toHalfRoundingInPlace keeps
  /// of these bytes stays, and only the box is converted again next time
  /// (mutableBytes drops it: any element may change).
  uint8_t *mutableBytesForBox(int64_t offset, const Shape &lengths,
                              const std::vector<int64_t> &strides);

  /// The same bytes seen with another shape of the same element count.
  Tensor reshaped(Shape shape) const;
  /// A view of `shape` starting `elementOffset` elements into these bytes
  /// (whole-byte dtypes; the view must lie inside the tensor). Shares the
  /// storage: owned views stay owned but not uniquely.
  Tensor view(int64_t elementOffset, Shape shape) const;

  /// Element i converted to float / int64 (any numeric or bool dtype).
  float floatAt(int64_t i) const;
  int64_t intAt(int64_t i) const;
  /// All elements as float / int64 (converting copies).
  std::vector<float> toFloats() const;
  std::vector<int64_t> toInts() const;

  /// A new owned tensor of dtype `to` holding these values (float -> int
  /// truncates toward zero, like MIL cast; -> bool is "!= 0").
  Tensor convertTo(DType to) const;
  /// convertTo(F16) of an fp32 tensor this one owns alone, which in the same
  /// pass has its own values rounded to fp16 (each becomes the fp32 of its
  /// fp16 value): the two forms a host keeps of an fp16 output it writes
  /// back into an fp32 buffer, for one read of the values. The fp16 tensor
  /// is read-only and kept with these bytes: when no one else holds it by
  /// the next call, and the bytes were written since only through
  /// mutableBytesForBox, that call converts just the boxes written (a KV
  /// cache carried from step to step: the rows a step added, not the cache).
  Tensor toHalfRoundingInPlace();
  /// True when every value of these fp32 bytes is an fp16 value: they are
  /// what toHalfRoundingInPlace left, written since through
  /// mutableBytesForBox in no place (a carried fp16 output, a KV cache).
  bool holdsHalfValues() const;
  /// Rounds these fp32 values (owned alone) to fp16 in place, as roundToHalfN
  /// does. Where toHalfRoundingInPlace's fp16 form is kept, only the
  /// elements written since through mutableBytesForBox can change, so only
  /// they are rounded, and the form stays.
  void roundToHalfInPlace();
  /// An owned copy.
  Tensor clone() const;

private:
  static Tensor allocate(DType dtype, Shape shape, bool zero);
  /// The storage allocate() made, for an owned tensor; null otherwise.
  OwnedBuffer *ownedBuffer() const;

  DType dtype_ = DType::F32;
  Shape shape_;
  int64_t numElements_ = 0;
  const uint8_t *data_ = nullptr;
  std::shared_ptr<const void> owner_;
  std::shared_ptr<const LazyValue> lazy_;
  bool owned_ = false;
};

/// The dtype the interpreter computes a value of declared dtype `t` in:
/// fp32 for every float type, int32 for integers, bool for bool.
DType computeDType(DType t);

} // namespace anefit::runtime
