//===- Zip.h - Members of a zip archive held in memory ----------*- C++ -*-===//
//
// The zip container as numpy's .npz and ExecuTorch's ETRecord use it: the
// central directory (zip64 included) read from a mapped file, each member's
// data located without copying, and a member's bytes read out (stored, or
// deflated through zlib) under a size cap. Every malformed archive raises
// InputError naming the file and place.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

struct ZipMember {
  std::string name;
  uint16_t method = 0; ///< 0 stored, 8 deflated (others are refused when read)
  uint32_t crc = 0;
  uint64_t size = 0; ///< uncompressed, as declared
  /// The member's data as stored in the archive (compressed for method 8).
  std::span<const uint8_t> data;
};

/// The members of the zip archive `bytes`, in central-directory order.
/// `where` names the archive in messages and `kind` says what it should be
/// ("a zip archive (.npz)"). Throws InputError.
std::vector<ZipMember> zipMembers(std::span<const uint8_t> bytes, const std::string &where,
                                  std::string_view kind = "a zip archive");

/// A member's bytes: stored ones checked against their CRC, deflated ones
/// inflated. Refuses a member that declares or inflates to more than
/// `maxBytes`. Throws InputError naming "<where>:<member>".
std::string readZipMember(const ZipMember &member, const std::string &where, uint64_t maxBytes);

/// zlib's CRC-32 of `bytes`, continued from `crc`.
uint32_t crc32Of(std::span<const uint8_t> bytes, uint32_t crc = 0);

} // namespace anefit
