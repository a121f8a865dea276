//===- WeightFileFuzzer.cpp - Fuzz the weight.bin reader ------------------===//
//
// Feeds arbitrary bytes to WeightFile as a file (an in-memory memfd, so no
// disk traffic): open, walk every record, read each blob with its own and a
// wrong dtype, and probe offsets taken from the input itself. Anything but
// success or InputError is a bug.
//
//===----------------------------------------------------------------------===//
#include "io/WeightFile.h"

#include "support/Error.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

using namespace anefit;

namespace {

int memFile() {
  static int fd = memfd_create("anefit-fuzz-weight", 0);
  return fd;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memFile();
  if (fd < 0 || ftruncate(fd, 0) != 0)
    return 0;
  if (size && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    return 0;
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    auto file = WeightFile::open(path);
    volatile uint8_t sink = 0;
    try {
      for (const BlobRecord &r : file->records()) {
        std::span<const uint8_t> blob = file->blobData(r.metadataOffset, r.dtype);
        for (uint8_t b : blob)
          sink = sink + b; // touches every byte: ASan catches reads past the mapping
        try {
          file->blobData(r.metadataOffset, r.dtype == DType::F16 ? DType::F32 : DType::F16);
        } catch (const InputError &) {
        }
      }
    } catch (const InputError &) {
    }
    // Offsets chosen by the input: the last 8 bytes, read as a little-endian number.
    if (size >= 8) {
      uint64_t offset;
      std::memcpy(&offset, data + size - 8, 8);
      try {
        file->blobData(offset, DType::U8);
      } catch (const InputError &) {
      }
    }
  } catch (const InputError &) {
  }
  return 0;
}
