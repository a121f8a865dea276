//===- WeightFile.h - MIL blob storage v2 (weight.bin) ----------*- C++ -*-===//
//
// Reading: a weight file is memory-mapped once; blobs are handed out as spans
// into the mapping after their 64-byte metadata record has been checked
// (sentinel, dtype, bounds). Nothing is copied. Writing: blobs are appended
// one by one to a file, 64-byte aligned, so a model's weights never need to
// be held in memory at once (formats.md §4).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Constant.h"
#include "support/FileSystem.h"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace anefit {

/// One metadata record of a weight file.
struct BlobRecord {
  uint64_t metadataOffset = 0;
  DType dtype = DType::F32;
  uint32_t rawDType = 0;
  uint64_t dataOffset = 0;
  uint64_t sizeInBytes = 0;
  uint64_t paddingBits = 0;
};

/// A memory-mapped weight.bin.
class WeightFile : public BlobStore {
public:
  /// Maps `path` and checks the storage header. With `within` (the model's
  /// directory) no component below it may be a symbolic link. Throws
  /// InputError.
  static std::shared_ptr<WeightFile> open(const std::string &path, const std::string &within = "");
  /// A weight file held in memory (e.g. inside an ExecuTorch .pte payload);
  /// `keepAlive` owns the bytes. `name` is used in messages. Checks the header.
  static std::shared_ptr<WeightFile> fromBytes(std::span<const uint8_t> bytes, std::string name,
                                               std::shared_ptr<const void> keepAlive);
  ~WeightFile() override;

  const std::string &path() const override { return path_; }
  std::span<const uint8_t> blobData(uint64_t metadataOffset, DType expected) const override;
  /// Checks and returns the record at `metadataOffset`. Throws InputError.
  BlobRecord record(uint64_t metadataOffset) const;
  /// All records, walking from offset 64 (StorageReader order). Throws InputError.
  std::vector<BlobRecord> records() const;
  uint32_t blobCount() const { return count_; }
  uint64_t size() const { return size_; }

private:
  WeightFile() = default;
  /// Validates the storage header of base_/size_. Throws InputError.
  void checkHeader();
  std::string path_;
  std::shared_ptr<const void> keepAlive_;
  const uint8_t *base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t count_ = 0;
};

/// Appends blobs to a new weight file. Call finish() to write the header.
class WeightWriter {
public:
  /// Writes bytes at an offset of the file being built.
  using Sink = std::function<void(uint64_t offset, std::span<const uint8_t> bytes)>;

  /// Writes `path` atomically under the output policy (support/FileSystem.h);
  /// finish() makes it appear. Throws InputError if it cannot be created.
  explicit WeightWriter(const std::string &path,
                        const OutputOptions &options = OutputOptions::replacing());
  /// Writes through `sink` (a file of a package being assembled); `name`
  /// is used in messages.
  WeightWriter(Sink sink, std::string name);
  ~WeightWriter();
  /// Appends one blob and returns the offset of its metadata record.
  /// `paddingBits` is for sub-byte types (unused bits in the last byte).
  uint64_t append(DType dtype, std::span<const uint8_t> data, uint64_t paddingBits = 0);
  /// Writes the final header and closes the file.
  void finish();
  uint32_t count() const { return count_; }

private:
  void start();
  std::string path_;
  std::unique_ptr<AtomicFile> file_;
  Sink sink_;
  bool open_ = false;
  uint64_t end_ = 64;
  uint32_t count_ = 0;
};

} // namespace anefit
