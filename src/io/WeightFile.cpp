//===- WeightFile.cpp - MIL blob storage v2 (weight.bin) ------------------===//
//
// Reads weight files through a read-only memory mapping and checks every
// metadata record before handing out a span, so a corrupt file can only ever
// produce an InputError. Writes weight files blob by blob with stdio, seeking
// past the end to leave zero-filled alignment gaps.
//
//===----------------------------------------------------------------------===//
#include "io/WeightFile.h"

#include "support/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace anefit {
namespace {

constexpr uint64_t kAlign = 64;
constexpr uint64_t kHeaderSize = 64;
constexpr uint64_t kMetadataSize = 64;
constexpr uint32_t kSentinel = 0xDEADBEEF;
constexpr uint32_t kStorageVersion = 2;

uint32_t loadU32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint64_t loadU64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void storeU32(uint8_t *p, uint32_t v) { std::memcpy(p, &v, sizeof v); }
void storeU64(uint8_t *p, uint64_t v) { std::memcpy(p, &v, sizeof v); }

/// Rounds up to the next multiple of 64, saturating instead of wrapping so a
/// hostile size can never walk the reader backwards.
uint64_t alignUp(uint64_t v) {
  if (v > UINT64_MAX - (kAlign - 1))
    return UINT64_MAX;
  return (v + kAlign - 1) / kAlign * kAlign;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string blobPlace(uint64_t offset) { return "blob at offset " + std::to_string(offset); }

std::string dtypeLabel(DType t) {
  return std::string(dtypeName(t)) + " (code " + std::to_string(dtypeBlobCode(t)) + ")";
}

} // namespace

std::shared_ptr<WeightFile> WeightFile::open(const std::string &path, const std::string &within) {
  InputOptions options;
  options.within = within;
  std::shared_ptr<const MappedFile> mapped = MappedFile::open(path, options);
  return fromBytes(mapped->bytes(), path, mapped);
}

std::shared_ptr<WeightFile> WeightFile::fromBytes(std::span<const uint8_t> bytes, std::string name,
                                                  std::shared_ptr<const void> keepAlive) {
  if (bytes.size() < kHeaderSize)
    failExpected(name, "storage header", "at least 64 bytes",
                 std::to_string(bytes.size()) + " bytes");
  std::shared_ptr<WeightFile> file(new WeightFile());
  file->path_ = std::move(name);
  file->base_ = bytes.data();
  file->size_ = bytes.size();
  file->keepAlive_ = std::move(keepAlive);
  file->checkHeader();
  return file;
}

void WeightFile::checkHeader() {
  uint32_t count = loadU32(base_);
  uint32_t version = loadU32(base_ + 4);
  if (version != kStorageVersion)
    failExpected(path_, "storage header", "version 2", "version " + std::to_string(version));
  // Every blob needs at least its 64-byte record, which bounds a believable count.
  uint64_t maxBlobs = (size_ - kHeaderSize) / kMetadataSize;
  if (count > maxBlobs)
    failExpected(path_, "storage header",
                 "a blob count of at most " + std::to_string(maxBlobs) + " for a file of " +
                     std::to_string(size_) + " bytes",
                 std::to_string(count));
  count_ = count;
}

WeightFile::~WeightFile() = default;

BlobRecord WeightFile::record(uint64_t metadataOffset) const {
  std::string place = blobPlace(metadataOffset);
  if (metadataOffset < kHeaderSize || metadataOffset % kAlign != 0)
    failExpected(path_, place, "a 64-byte aligned offset after the storage header",
                 std::to_string(metadataOffset));
  if (metadataOffset > size_ || size_ - metadataOffset < kMetadataSize)
    failExpected(path_, place, "a 64-byte metadata record inside the file",
                 "end of file at " + std::to_string(size_));
  const uint8_t *p = base_ + metadataOffset;

  uint32_t sentinel = loadU32(p);
  if (sentinel != kSentinel)
    failExpected(path_, place, "sentinel 0xdeadbeef", hex(sentinel));

  BlobRecord r;
  r.metadataOffset = metadataOffset;
  r.rawDType = loadU32(p + 4);
  r.sizeInBytes = loadU64(p + 8);
  r.dataOffset = loadU64(p + 16);
  r.paddingBits = loadU64(p + 24);

  std::optional<DType> dtype = dtypeFromBlobCode(r.rawDType);
  if (!dtype)
    failExpected(path_, place, "a known blob data type code (1-17)", std::to_string(r.rawDType));
  r.dtype = *dtype;

  if (r.dataOffset != metadataOffset + kMetadataSize)
    failExpected(path_, place, "data offset " + std::to_string(metadataOffset + kMetadataSize),
                 std::to_string(r.dataOffset));
  if (r.dataOffset > size_ || r.sizeInBytes > size_ - r.dataOffset)
    failExpected(path_, place, "data within the file (" + std::to_string(size_) + " bytes)",
                 std::to_string(r.sizeInBytes) + " bytes at offset " +
                     std::to_string(r.dataOffset));

  int bits = dtypeBits(r.dtype);
  if (isSubByte(r.dtype)) {
    if (r.paddingBits >= 8)
      failExpected(path_, place, "fewer than 8 padding bits", std::to_string(r.paddingBits));
    if (r.sizeInBytes == 0 && r.paddingBits != 0)
      failExpected(path_, place, "no padding bits in an empty blob", std::to_string(r.paddingBits));
    // The used bits must be a whole number of elements.
    uint64_t usedBits = r.sizeInBytes * 8 - r.paddingBits;
    if (usedBits % static_cast<uint64_t>(bits) != 0)
      failExpected(path_, place, "a size of whole " + std::to_string(bits) + "-bit elements",
                   std::to_string(r.sizeInBytes) + " bytes with " + std::to_string(r.paddingBits) +
                       " padding bits");
  } else {
    if (r.paddingBits != 0)
      failExpected(path_, place, "0 padding bits for " + std::string(dtypeName(r.dtype)),
                   std::to_string(r.paddingBits));
    uint64_t width = static_cast<uint64_t>(bits / 8);
    if (r.sizeInBytes % width != 0)
      failExpected(path_, place, "a size that is a multiple of " + std::to_string(width) + " bytes",
                   std::to_string(r.sizeInBytes) + " bytes");
  }
  return r;
}

std::span<const uint8_t> WeightFile::blobData(uint64_t metadataOffset, DType expected) const {
  BlobRecord r = record(metadataOffset);
  if (r.dtype != expected)
    failExpected(path_, blobPlace(metadataOffset), "data type " + dtypeLabel(expected),
                 dtypeLabel(r.dtype));
  return {base_ + r.dataOffset, static_cast<size_t>(r.sizeInBytes)};
}

std::vector<BlobRecord> WeightFile::records() const {
  std::vector<BlobRecord> out;
  // count_ was bounded by the file size in open(), so this reserve is too.
  out.reserve(count_);
  uint64_t offset = kHeaderSize;
  for (uint32_t i = 0; i < count_; ++i) {
    BlobRecord r = record(offset);
    out.push_back(r);
    // Records only move forward (data follows its record), so the walk ends.
    offset = alignUp(r.dataOffset + r.sizeInBytes);
    if (i + 1 < count_ && offset >= size_)
      failExpected(path_, "storage header", std::to_string(count_) + " blobs",
                   "end of file after " + std::to_string(i + 1));
  }
  return out;
}

WeightWriter::WeightWriter(const std::string &path, const OutputOptions &options) : path_(path) {
  file_ = std::make_unique<AtomicFile>(path, options);
  AtomicFile *f = file_.get();
  sink_ = [f](uint64_t offset, std::span<const uint8_t> bytes) { f->writeAt(offset, bytes); };
  start();
}

WeightWriter::WeightWriter(Sink sink, std::string name)
    : path_(std::move(name)), sink_(std::move(sink)) {
  start();
}

void WeightWriter::start() {
  // A provisional header (count 0) so that an interrupted write is still a
  // valid, empty storage file.
  uint8_t header[kHeaderSize] = {};
  storeU32(header + 4, kStorageVersion);
  sink_(0, header);
  open_ = true;
}

WeightWriter::~WeightWriter() = default;

uint64_t WeightWriter::append(DType dtype, std::span<const uint8_t> data, uint64_t paddingBits) {
  if (!open_)
    throw InputError::at(path_, "", "weight file is already finished");
  uint32_t code = dtypeBlobCode(dtype);
  if (code == 0)
    throw InputError::at(path_, "blob " + std::to_string(count_),
                         "data type " + std::string(dtypeName(dtype)) +
                             " cannot be stored in a weight file");
  if (paddingBits >= 8 || (!isSubByte(dtype) && paddingBits != 0))
    failExpected(path_, "blob " + std::to_string(count_),
                 isSubByte(dtype) ? "fewer than 8 padding bits" : "0 padding bits",
                 std::to_string(paddingBits));

  uint64_t metadataOffset = alignUp(end_);
  uint8_t meta[kMetadataSize] = {};
  storeU32(meta, kSentinel);
  storeU32(meta + 4, code);
  storeU64(meta + 8, data.size());
  storeU64(meta + 16, metadataOffset + kMetadataSize);
  storeU64(meta + 24, paddingBits);

  // Writing past the end leaves a hole that reads back as zeros.
  sink_(metadataOffset, meta);
  if (!data.empty())
    sink_(metadataOffset + kMetadataSize, data);
  end_ = metadataOffset + kMetadataSize + data.size();
  ++count_;
  return metadataOffset;
}

void WeightWriter::finish() {
  if (!open_)
    return;
  open_ = false;
  uint8_t header[8];
  storeU32(header, count_);
  storeU32(header + 4, kStorageVersion);
  sink_(0, header);
  if (file_)
    file_->commit();
}

} // namespace anefit
