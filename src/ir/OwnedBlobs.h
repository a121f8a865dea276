//===- OwnedBlobs.h - Weight blobs a rewrite computed, held in memory -*- C++ -*-===//
//
// Rewrites that compute new weights (requantized data, a slice of a wide
// projection) keep them as blob constants, like the weights read from a
// file, so every writer sends them to the model's weight file and no program
// carries a large immediate tensor. An OwnedBlobs store holds the bytes; each
// blob gets its own offset, so blobs are told apart as a file's are.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Constant.h"

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace anefit {

class OwnedBlobs final : public BlobStore {
public:
  /// `fileName` is what the blobs' BlobRef name ("@model_path/weights/x.bin");
  /// it must differ from the model's own weight files.
  explicit OwnedBlobs(std::string fileName) : fileName_(std::move(fileName)) {}
  const std::string &path() const override { return fileName_; }
  std::span<const uint8_t> blobData(uint64_t metadataOffset, DType expected) const override;

  /// Makes a blob constant of `type` holding `bytes` (element bytes as
  /// Constant::bytes holds them). `self` must own this store.
  static Constant add(const std::shared_ptr<OwnedBlobs> &self, Type type,
                      std::vector<uint8_t> bytes);

  /// Bytes held in all blobs.
  uint64_t heldBytes() const { return held_; }

private:
  struct Blob {
    DType dtype;
    std::vector<uint8_t> bytes;
  };
  std::string fileName_;
  std::map<uint64_t, Blob> blobs_;
  uint64_t next_ = 64;
  uint64_t held_ = 0;
};

} // namespace anefit
