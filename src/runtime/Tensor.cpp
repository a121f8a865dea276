//===- Tensor.cpp - Runtime tensors of the reference interpreter ----------===//
//
// Storage, element access and dtype conversion for runtime tensors.
//
//===----------------------------------------------------------------------===//
#include "runtime/Tensor.h"

#include "runtime/Convert.h"
#include "runtime/ThreadPool.h"
#include "support/Error.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include <sys/resource.h>

namespace anefit::runtime {
namespace {

template <typename T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// fp8 E4M3FN / E5M2 to float; the formats have no infinities (E4M3FN) or
/// follow IEEE (E5M2).
float fp8ToFloat(uint8_t v, bool e4m3) {
  int sign = v >> 7;
  int expBits = e4m3 ? 4 : 5, manBits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  int e = (v >> manBits) & ((1 << expBits) - 1);
  int m = v & ((1 << manBits) - 1);
  float r;
  if (e4m3 && e == 15 && m == 7)
    r = NAN;
  else if (!e4m3 && e == 31)
    r = m ? NAN : INFINITY;
  else if (e == 0)
    r = std::ldexp(static_cast<float>(m), 1 - bias - manBits);
  else
    r = std::ldexp(1.0f + static_cast<float>(m) / (1 << manBits), e - bias);
  return sign ? -r : r;
}

/// Recycles tensor buffers by size: an interpreter step frees and allocates
/// the same sizes op after op, so after the first step no op allocates.
class BufferPool {
public:
  static BufferPool &get() {
    static BufferPool *pool = new BufferPool(); // never destroyed: deleters may run late
    return *pool;
  }
  void *take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void *p = it->second.back();
        it->second.pop_back();
        pooled_ -= bytes;
        return p;
      }
    }
    return std::aligned_alloc(64, bytes);
  }
  void give(void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pooled_ + bytes > kMaxPooledBytes) {
      std::free(p);
      return;
    }
    free_[bytes].push_back(p);
    pooled_ += bytes;
  }

private:
  static constexpr size_t kMaxPooledBytes = size_t(256) << 20;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void *>> free_;
  size_t pooled_ = 0;
};

} // namespace

/// The bytes of an owned tensor. `half`, when set, is the fp16 form of the
/// fp32 values toHalfRoundingInPlace made, equal to them but in `dirty`:
/// runs [begin, end) of elements written since through mutableBytesForBox.
struct OwnedBuffer {
  struct HalfMirror {
    Tensor half;
    std::vector<std::pair<int64_t, int64_t>> dirty;
  };
  /// More runs than this, and a full conversion is as cheap.
  static constexpr size_t kMaxDirtyRuns = 1 << 16;

  void *p;
  size_t bytes;
  std::unique_ptr<HalfMirror> mirror;

  OwnedBuffer(void *p, size_t bytes) : p(p), bytes(bytes) {}
  OwnedBuffer(const OwnedBuffer &) = delete;
  OwnedBuffer &operator=(const OwnedBuffer &) = delete;
  ~OwnedBuffer() {
    mirror.reset();
    BufferPool::get().give(p, bytes);
    MemoryBudget::release(bytes);
  }
};

int64_t numElementsOf(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeStr(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

DType computeDType(DType t) {
  if (isFloat(t))
    return DType::F32;
  if (t == DType::Bool)
    return DType::Bool;
  return DType::I32;
}

//===----------------------------------------------------------------------===//
// MemoryBudget
//===----------------------------------------------------------------------===//

namespace {

std::atomic<uint64_t> gBudgetLimit{0}; // 0: not set yet
std::atomic<uint64_t> gBudgetUsed{0};
std::atomic<uint64_t> gBudgetPeak{0};

/// A number from a file such as /sys/fs/cgroup/memory.max ("max": none).
std::optional<uint64_t> readNumberFile(const char *path) {
  std::FILE *f = std::fopen(path, "r");
  if (!f)
    return std::nullopt;
  char buf[64] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  if (n == 0 || buf[0] < '0' || buf[0] > '9')
    return std::nullopt;
  return std::strtoull(buf, nullptr, 10);
}

/// MemAvailable of /proc/meminfo, in bytes.
std::optional<uint64_t> memAvailable() {
  std::FILE *f = std::fopen("/proc/meminfo", "r");
  if (!f)
    return std::nullopt;
  char line[256];
  std::optional<uint64_t> out;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "MemAvailable:", 13) == 0) {
      out = std::strtoull(line + 13, nullptr, 10) * 1024;
      break;
    }
  std::fclose(f);
  return out;
}

} // namespace

uint64_t MemoryBudget::defaultLimit() {
  uint64_t avail = memAvailable().value_or(uint64_t(8) << 30);
  // A container's own limit counts too (cgroup v2, then v1).
  std::optional<uint64_t> max = readNumberFile("/sys/fs/cgroup/memory.max");
  std::optional<uint64_t> cur = readNumberFile("/sys/fs/cgroup/memory.current");
  if (!max) {
    max = readNumberFile("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    cur = readNumberFile("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (max && *max < (uint64_t(1) << 60))
    avail = std::min(avail, *max > cur.value_or(0) ? *max - cur.value_or(0) : 0);
  // So does the process's own address-space and data limit (ulimit -v / -d).
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit rl {};
    if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      avail = std::min<uint64_t>(avail, rl.rlim_cur);
  }
  return std::max<uint64_t>(avail / 4 * 3, uint64_t(64) << 20);
}

uint64_t MemoryBudget::limit() {
  uint64_t l = gBudgetLimit.load();
  if (l == 0) {
    uint64_t d = defaultLimit();
    gBudgetLimit.compare_exchange_strong(l, d);
    l = gBudgetLimit.load();
  }
  return l;
}

void MemoryBudget::setLimit(uint64_t bytes) { gBudgetLimit.store(bytes); }

std::optional<uint64_t> MemoryBudget::parseLimit(std::string_view text) {
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end == text.data())
    return std::nullopt;
  std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b'))
    unit.remove_suffix(1);
  if (unit.size() == 2 && unit[1] == 'i')
    unit.remove_suffix(1);
  int shift = unit.empty()                 ? 0
              : unit == "K" || unit == "k" ? 10
              : unit == "M" || unit == "m" ? 20
              : unit == "G" || unit == "g" ? 30
              : unit == "T" || unit == "t" ? 40
                                           : -1;
  if (shift < 0 || n == 0 || n > (~uint64_t(0) >> shift))
    return std::nullopt;
  return n << shift;
}
uint64_t MemoryBudget::used() { return gBudgetUsed.load(); }
uint64_t MemoryBudget::peak() { return gBudgetPeak.load(); }

void MemoryBudget::charge(uint64_t bytes, DType dtype, const std::vector<int64_t> &shape) {
  uint64_t lim = limit();
  uint64_t used = gBudgetUsed.load();
  do {
    if (bytes > lim || used > lim - bytes)
      throw MemoryBudgetError("a tensor of shape " + shapeStr(shape) + " " +
                              std::string(dtypeName(dtype)) + " needs " + std::to_string(bytes) +
                              " bytes; with " + std::to_string(used) +
                              " in use that exceeds the memory budget of " + std::to_string(lim) +
                              " bytes (set it with --max-memory)");
  } while (!gBudgetUsed.compare_exchange_weak(used, used + bytes));
  uint64_t now = used + bytes, peak = gBudgetPeak.load();
  while (now > peak && !gBudgetPeak.compare_exchange_weak(peak, now)) {
  }
}

void MemoryBudget::release(uint64_t bytes) { gBudgetUsed.fetch_sub(bytes); }

Tensor Tensor::zeros(DType dtype, Shape shape) { return allocate(dtype, std::move(shape), true); }

Tensor Tensor::empty(DType dtype, Shape shape) { return allocate(dtype, std::move(shape), false); }

/// Every tensor buffer of the interpreter is made here.
Tensor Tensor::allocate(DType dtype, Shape shape, bool zero) {
  // Checked element count: every dim non-negative, product below the cap.
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw InputError("tensor shape " + shapeStr(shape) + " has a negative dimension");
    if (d != 0 && n > kMaxTensorBytes / static_cast<uint64_t>(d))
      throw MemoryBudgetError("a tensor of shape " + shapeStr(shape) +
                              " is larger than the per-tensor limit of " +
                              std::to_string(kMaxTensorBytes) + " bytes");
    n *= static_cast<uint64_t>(d);
  }
  uint64_t bytes = storageBytes(dtype, n);
  if (bytes > kMaxTensorBytes)
    throw MemoryBudgetError("a tensor of shape " + shapeStr(shape) + " " +
                            std::string(dtypeName(dtype)) + " needs " + std::to_string(bytes) +
                            " bytes, more than the per-tensor limit of " +
                            std::to_string(kMaxTensorBytes));
  Tensor t;
  t.dtype_ = dtype;
  // 64-byte alignment keeps BLAS and vector loops on their fast paths.
  size_t alloc = static_cast<size_t>((bytes + 63) / 64 * 64);
  if (!alloc)
    alloc = 64;
  MemoryBudget::charge(alloc, dtype, shape);
  t.shape_ = std::move(shape);
  t.numElements_ = static_cast<int64_t>(n);
  void *p = BufferPool::get().take(alloc);
  if (!p) {
    MemoryBudget::release(alloc);
    throw std::bad_alloc();
  }
  if (zero)
    std::memset(p, 0, alloc);
  else if (alloc > bytes) // the tail past the data, so no uninitialized byte is ever read
    std::memset(static_cast<uint8_t *>(p) + bytes, 0, alloc - bytes);
  try {
    t.owner_ = std::make_shared<OwnedBuffer>(p, alloc);
  } catch (...) {
    BufferPool::get().give(p, alloc);
    MemoryBudget::release(alloc);
    throw;
  }
  t.data_ = static_cast<const uint8_t *>(p);
  t.owned_ = true;
  return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, const void *bytes,
                      std::shared_ptr<const void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.numElements_ = numElementsOf(shape);
  t.shape_ = std::move(shape);
  // Bytes are never null, also for a constant without elements (an empty
  // list has no storage): kernels hand them to memcpy with a size of 0,
  // which must not be given a null pointer.
  alignas(64) static const uint8_t kNoBytes[64] = {};
  t.data_ = bytes ? static_cast<const uint8_t *>(bytes) : kNoBytes;
  t.owner_ = std::move(owner);
  t.owned_ = false;
  return t;
}

Tensor Tensor::lazy(DType dtype, Shape shape, std::shared_ptr<const LazyValue> value) {
  Tensor t;
  t.dtype_ = dtype;
  t.numElements_ = numElementsOf(shape);
  t.shape_ = std::move(shape);
  t.lazy_ = std::move(value);
  return t;
}

Tensor Tensor::materialize() const {
  if (!lazy_)
    return *this;
  Tensor t = lazy_->materialize();
  if (t.shape_ != shape_)
    t = t.reshaped(shape_);
  return t;
}

Tensor Tensor::fromF32(std::vector<float> values, Shape shape) {
  Tensor t = zeros(DType::F32, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numElements_)
    throw InputError("fromF32: " + std::to_string(values.size()) + " values for shape " +
                     shapeStr(t.shape_));
  std::memcpy(t.mutableBytes(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::fromI32(std::vector<int32_t> values, Shape shape) {
  Tensor t = zeros(DType::I32, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numElements_)
    throw InputError("fromI32: " + std::to_string(values.size()) + " values for shape " +
                     shapeStr(t.shape_));
  std::memcpy(t.mutableBytes(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

Tensor Tensor::fromBool(std::vector<bool> values, Shape shape) {
  Tensor t = zeros(DType::Bool, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numElements_)
    throw InputError("fromBool: " + std::to_string(values.size()) + " values for shape " +
                     shapeStr(t.shape_));
  uint8_t *p = t.mutableBytes();
  for (size_t i = 0; i < values.size(); ++i)
    p[i] = values[i] ? 1 : 0;
  return t;
}

OwnedBuffer *Tensor::ownedBuffer() const {
  return owned_ ? static_cast<OwnedBuffer *>(const_cast<void *>(owner_.get())) : nullptr;
}

bool Tensor::holdsHalfValues() const {
  OwnedBuffer *buf = dtype_ == DType::F32 && !lazy_ ? ownedBuffer() : nullptr;
  return buf && buf->mirror && buf->mirror->dirty.empty();
}

void Tensor::roundToHalfInPlace() {
  OwnedBuffer *buf = dtype_ == DType::F32 && !lazy_ ? ownedBuffer() : nullptr;
  if (buf && buf->mirror && data_ == buf->p) {
    float *self = reinterpret_cast<float *>(const_cast<uint8_t *>(data_));
    for (auto [b, e] : buf->mirror->dirty)
      if (b < numElements_)
        roundToHalfN(self + b, std::min(e, numElements_) - b);
    return;
  }
  roundToHalfN(mutableData<float>(), numElements_);
}

uint8_t *Tensor::mutableBytes() {
  // Borrowed bytes may be a read-only mapping; kernels only write results
  // they allocated themselves.
  if (!owned_)
    throw std::logic_error("write to a borrowed tensor");
  if (OwnedBuffer *b = ownedBuffer())
    b->mirror.reset();
  return const_cast<uint8_t *>(data_);
}

uint8_t *Tensor::mutableBytesForBox(int64_t offset, const Shape &lengths,
                                    const std::vector<int64_t> &strides) {
  OwnedBuffer *b = ownedBuffer();
  if (!b || !b->mirror || dtype_ != DType::F32)
    return mutableBytes();
  auto &dirty = b->mirror->dirty;
  // Elements from the start of the buffer; runs along the last dim when it
  // is contiguous, else one per element.
  int64_t base = (data_ - static_cast<const uint8_t *>(b->p)) / 4 + offset;
  int64_t rank = static_cast<int64_t>(lengths.size());
  int64_t inner = rank && strides.back() == 1 ? lengths.back() : 1;
  int64_t runs = inner ? numElementsOf(lengths) / inner : 0;
  if (dirty.size() + static_cast<size_t>(runs) > OwnedBuffer::kMaxDirtyRuns)
    return mutableBytes();
  int64_t outer = inner == 1 ? rank : rank - 1;
  std::vector<int64_t> at(static_cast<size_t>(outer), 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t e = base;
    for (int64_t d = 0; d < outer; ++d)
      e += at[d] * strides[d];
    dirty.emplace_back(e, e + inner);
    for (int64_t d = outer - 1; d >= 0 && ++at[d] == lengths[d]; --d)
      at[d] = 0;
  }
  return const_cast<uint8_t *>(data_);
}

Tensor Tensor::reshaped(Shape shape) const {
  if (numElementsOf(shape) != numElements_)
    throw InputError("cannot reshape " + shapeStr(shape_) + " to " + shapeStr(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view(int64_t elementOffset, Shape shape) const {
  int64_t n = numElementsOf(shape);
  if (lazy_ || isSubByte(dtype_) || elementOffset < 0 || elementOffset + n > numElements_)
    throw std::logic_error("view outside its tensor");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.numElements_ = n;
  t.data_ = data_ + elementOffset * (dtypeBits(dtype_) / 8);
  return t;
}

float Tensor::floatAt(int64_t i) const {
  switch (dtype_) {
  case DType::F32:
    return load<float>(data_ + i * 4);
  case DType::F16:
    return halfToFloat(load<uint16_t>(data_ + i * 2));
  case DType::BF16:
    return bf16ToFloat(load<uint16_t>(data_ + i * 2));
  case DType::F64:
    return static_cast<float>(load<double>(data_ + i * 8));
  case DType::F8E4M3FN:
    return fp8ToFloat(data_[i], true);
  case DType::F8E5M2:
    return fp8ToFloat(data_[i], false);
  default:
    return static_cast<float>(intAt(i));
  }
}

int64_t Tensor::intAt(int64_t i) const {
  if (isSubByte(dtype_)) {
    uint32_t v = loadPackedBits({data_, static_cast<size_t>(numBytes())}, static_cast<uint64_t>(i),
                                dtypeBits(dtype_));
    if (dtype_ == DType::I4)
      return v >= 8 ? static_cast<int64_t>(v) - 16 : v;
    return v;
  }
  switch (dtype_) {
  case DType::Bool:
  case DType::U8:
    return data_[i];
  case DType::I8:
    return static_cast<int8_t>(data_[i]);
  case DType::I16:
    return load<int16_t>(data_ + i * 2);
  case DType::U16:
    return load<uint16_t>(data_ + i * 2);
  case DType::I32:
    return load<int32_t>(data_ + i * 4);
  case DType::U32:
    return load<uint32_t>(data_ + i * 4);
  case DType::I64:
    return load<int64_t>(data_ + i * 8);
  case DType::U64:
    return static_cast<int64_t>(load<uint64_t>(data_ + i * 8));
  case DType::String:
    throw InputError("a string tensor has no numeric value");
  default:
    return truncToInt64(floatAt(i));
  }
}

std::vector<float> Tensor::toFloats() const {
  std::vector<float> out(static_cast<size_t>(numElements_));
  if (dtype_ == DType::F32) {
    if (numElements_)
      std::memcpy(out.data(), data_, out.size() * 4);
    return out;
  }
  for (int64_t i = 0; i < numElements_; ++i)
    out[i] = floatAt(i);
  return out;
}

std::vector<int64_t> Tensor::toInts() const {
  std::vector<int64_t> out(static_cast<size_t>(numElements_));
  for (int64_t i = 0; i < numElements_; ++i)
    out[i] = intAt(i);
  return out;
}

Tensor Tensor::toHalfRoundingInPlace() {
  if (dtype_ != DType::F32 || lazy_ || !ownsUniquely())
    throw std::logic_error("toHalfRoundingInPlace: expected an fp32 tensor owned alone");
  OwnedBuffer *buf = ownedBuffer();
  float *self = reinterpret_cast<float *>(const_cast<uint8_t *>(data_));
  // The mirror covers the whole buffer: this tensor must start at it.
  bool whole = data_ == buf->p;
  auto readOnly = [this](const Tensor &half) {
    return borrow(DType::F16, shape_, half.bytes(), half.owner_);
  };
  auto &m = buf->mirror;
  bool inside = m && std::all_of(m->dirty.begin(), m->dirty.end(),
                                 [this](const auto &run) { return run.second <= numElements_; });
  if (whole && inside && m->half.ownsUniquely() && m->half.shape_ == shape_) {
    auto *half = reinterpret_cast<uint16_t *>(const_cast<uint8_t *>(m->half.data_));
    for (auto [b, e] : m->dirty)
      toHalfRoundingN(self + b, half + b, e - b);
    m->dirty.clear();
    return readOnly(m->half);
  }
  Tensor out = empty(DType::F16, shape_);
  auto *half = reinterpret_cast<uint16_t *>(out.mutableBytes());
  parallelFor(numElements_, int64_t(1) << 16,
              [&](int64_t b, int64_t e) { toHalfRoundingN(self + b, half + b, e - b); });
  if (!whole)
    return out;
  m = std::make_unique<OwnedBuffer::HalfMirror>();
  m->half = std::move(out);
  return readOnly(m->half);
}

Tensor Tensor::convertTo(DType to) const {
  if (lazy_)
    return materialize().convertTo(to);
  Tensor out = empty(to, shape_);
  uint8_t *p = out.mutableBytes();
  // Copies and fp16 conversions of large tensors (the KV caches of a decode
  // step) are split over the interpreter's threads.
  constexpr int64_t kChunk = int64_t(1) << 16;
  if (to == dtype_) {
    if (isSubByte(dtype_)) {
      std::memcpy(p, data_, numBytes());
      return out;
    }
    int eb = dtypeBits(dtype_) / 8;
    parallelFor(numElements_, kChunk, [&](int64_t b, int64_t e) {
      std::memcpy(p + b * eb, data_ + b * eb, static_cast<size_t>((e - b) * eb));
    });
    return out;
  }
  if (dtype_ == DType::F16 && to == DType::F32) {
    parallelFor(numElements_, kChunk, [&](int64_t b, int64_t e) {
      halfToFloatN(reinterpret_cast<const uint16_t *>(data_) + b, reinterpret_cast<float *>(p) + b,
                   e - b);
    });
    return out;
  }
  if (dtype_ == DType::F32 && to == DType::F16) {
    parallelFor(numElements_, kChunk, [&](int64_t b, int64_t e) {
      floatToHalfN(reinterpret_cast<const float *>(data_) + b, reinterpret_cast<uint16_t *>(p) + b,
                   e - b);
    });
    return out;
  }
  bool fromFloat = isFloat(dtype_);
  for (int64_t i = 0; i < numElements_; ++i) {
    switch (to) {
    case DType::F32: {
      float v = floatAt(i);
      std::memcpy(p + i * 4, &v, 4);
      break;
    }
    case DType::F16: {
      uint16_t h = floatToHalf(floatAt(i));
      std::memcpy(p + i * 2, &h, 2);
      break;
    }
    case DType::F64: {
      double v = fromFloat ? static_cast<double>(floatAt(i)) : static_cast<double>(intAt(i));
      std::memcpy(p + i * 8, &v, 8);
      break;
    }
    case DType::Bool:
      p[i] = fromFloat ? (floatAt(i) != 0.0f) : (intAt(i) != 0);
      break;
    default: {
      if (!isInteger(to) || isSubByte(to))
        throw InputError(std::string("cannot convert to ") + std::string(dtypeName(to)));
      int64_t v = fromFloat ? truncToInt64(floatAt(i)) : intAt(i);
      int bytes = dtypeBits(to) / 8;
      // Little-endian truncation to the target width (two's complement wrap).
      std::memcpy(p + i * bytes, &v, static_cast<size_t>(bytes));
      break;
    }
    }
  }
  return out;
}

Tensor Tensor::clone() const { return convertTo(dtype_); }

} // namespace anefit::runtime
