//===- Npy.h - numpy .npy and .npz files ------------------------*- C++ -*-===//
//
// Reading and writing the tensors users exchange with `anefit run`: .npy
// (format versions 1, 2 and 3, little-endian, C order) and .npz archives (zip
// files of .npy members; stored members, and deflated ones when built with
// zlib). Every malformed file raises InputError naming the file and place.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Interpreter.h"
#include "runtime/Tensor.h"
#include "support/FileSystem.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace anefit::runtime {

/// Parses .npy bytes; `where` names the source in messages.
Tensor parseNpy(std::span<const uint8_t> bytes, const std::string &where);
/// Encodes a tensor as .npy (version 1 header). bf16 and fp8 are widened to
/// fp32 and sub-byte integers to uint8/int8, since numpy has no such dtypes.
std::vector<uint8_t> encodeNpy(const Tensor &t);

Tensor readNpy(const std::string &path);
/// Writes under the output policy of support/FileSystem.h.
void writeNpy(const std::string &path, const Tensor &t, const OutputOptions &options = {});

/// The members of an .npz archive in archive order, names without ".npy".
std::vector<NamedTensor> parseNpz(std::span<const uint8_t> bytes, const std::string &where);
std::vector<NamedTensor> readNpz(const std::string &path);
/// Writes an .npz of stored members (what numpy.savez writes) under the
/// output policy of support/FileSystem.h (atomically).
void writeNpz(const std::string &path, const std::vector<NamedTensor> &tensors,
              const OutputOptions &options = {});

/// Writes an .npz one array at a time: each is encoded and written when
/// added, so a long stepped run holds one step's arrays, not all of them.
/// Archives of 65,535 members or 4 GiB and more get zip64 records, as
/// numpy.savez writes them. Nothing appears under `path` until finish();
/// destruction without it removes what was written (support/FileSystem.h's
/// AtomicFile).
class NpzWriter {
public:
  /// Checks the output policy and opens the temporary. Throws InputError.
  explicit NpzWriter(const std::string &path, const OutputOptions &options = {});
  /// Writes `tensor` as member NAME.npy. Throws InputError on a write error.
  void add(const std::string &name, const Tensor &tensor);
  /// Writes the central directory and puts the archive in place.
  void finish();
  /// Arrays added so far.
  uint64_t size() const { return count_; }

private:
  std::string path_;
  AtomicFile file_;
  std::vector<uint8_t> central_;
  uint64_t offset_ = 0;
  uint64_t count_ = 0;
  bool finished_ = false;
};

} // namespace anefit::runtime
