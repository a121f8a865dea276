//===- OwnedBlobs.cpp - Weight blobs a rewrite computed, held in memory ---===//
#include "ir/OwnedBlobs.h"

#include "support/Error.h"

namespace anefit {

std::span<const uint8_t> OwnedBlobs::blobData(uint64_t metadataOffset, DType expected) const {
  auto it = blobs_.find(metadataOffset);
  if (it == blobs_.end())
    throw InputError::at(fileName_, "offset " + std::to_string(metadataOffset),
                         "expected a blob computed by a rewrite, found none at this offset");
  if (it->second.dtype != expected)
    throw InputError::at(fileName_, "offset " + std::to_string(metadataOffset),
                         "expected a blob of " + std::string(dtypeName(expected)) + ", found " +
                             std::string(dtypeName(it->second.dtype)));
  return it->second.bytes;
}

Constant OwnedBlobs::add(const std::shared_ptr<OwnedBlobs> &self, Type type,
                         std::vector<uint8_t> bytes) {
  uint64_t offset = self->next_;
  // Offsets advance like a weight file's would (64-byte aligned records), so
  // two blobs never share one.
  self->next_ += 64 + (bytes.size() + 63) / 64 * 64;
  self->held_ += bytes.size();
  DType dtype = type.dtype();
  self->blobs_.emplace(offset, Blob{dtype, std::move(bytes)});
  return Constant::fromBlob(std::move(type), BlobRef{self->fileName_, offset, self});
}

} // namespace anefit
