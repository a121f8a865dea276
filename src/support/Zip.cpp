//===- Zip.cpp - Members of a zip archive held in memory ------------------===//
#include "support/Zip.h"

#include "support/Error.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>

namespace anefit {
namespace {

uint16_t le16(const uint8_t *p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t *p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const uint8_t *p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }

} // namespace

uint32_t crc32Of(std::span<const uint8_t> bytes, uint32_t crc) {
  const uint8_t *p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

std::vector<ZipMember> zipMembers(std::span<const uint8_t> b, const std::string &where,
                                  std::string_view kind) {
  // The end-of-central-directory record, from the back (a comment of up to
  // 64 KiB may follow it).
  if (b.size() < 22)
    throw InputError::at(where, "", "expected " + std::string(kind) + ", file is too short");
  size_t eocd = SIZE_MAX;
  size_t lowest = b.size() > 22 + 65535 ? b.size() - 22 - 65535 : 0;
  for (size_t p = b.size() - 22 + 1; p-- > lowest;)
    if (le32(&b[p]) == 0x06054b50) {
      eocd = p;
      break;
    }
  if (eocd == SIZE_MAX)
    throw InputError::at(where, "", "expected " + std::string(kind) + ", found no end record");
  uint64_t count = le16(&b[eocd + 10]);
  uint64_t cdOffset = le32(&b[eocd + 16]);
  if (cdOffset == 0xFFFFFFFFu || count == 0xFFFF) {
    // zip64: the locator right before the end record points at the zip64 one.
    if (eocd < 20 || le32(&b[eocd - 20]) != 0x07064b50)
      throw InputError::at(where, "zip end record", "zip64 locator missing");
    uint64_t z = le64(&b[eocd - 20 + 8]);
    if (b.size() < 56 || z > b.size() - 56 || le32(&b[z]) != 0x06064b50)
      throw InputError::at(where, "zip64 end record", "bad zip64 end record");
    count = le64(&b[z + 32]);
    cdOffset = le64(&b[z + 48]);
  }
  std::vector<ZipMember> out;
  uint64_t p = cdOffset;
  for (uint64_t i = 0; i < count; ++i) {
    std::string place = "central directory entry " + std::to_string(i);
    if (p > b.size() || b.size() - p < 46 || le32(&b[p]) != 0x02014b50)
      throw InputError::at(where, place, "expected a central directory header");
    ZipMember m;
    m.method = le16(&b[p + 10]);
    m.crc = le32(&b[p + 16]);
    uint64_t csize = le32(&b[p + 20]);
    m.size = le32(&b[p + 24]);
    uint16_t nameLen = le16(&b[p + 28]), extraLen = le16(&b[p + 30]), commentLen = le16(&b[p + 32]);
    uint64_t local = le32(&b[p + 42]);
    if (b.size() - p - 46 < static_cast<uint64_t>(nameLen) + extraLen + commentLen)
      throw InputError::at(where, place, "entry runs past the end");
    m.name.assign(reinterpret_cast<const char *>(&b[p + 46]), nameLen);
    // zip64 extra field: the 0xFFFFFFFF fields, in order size, csize, offset.
    const uint8_t *ex = &b[p + 46 + nameLen];
    for (uint32_t e = 0; e + 4 <= extraLen;) {
      uint16_t id = le16(ex + e), len = le16(ex + e + 2);
      if (e + 4 + len > extraLen)
        break;
      if (id == 0x0001) {
        const uint8_t *f = ex + e + 4;
        uint32_t used = 0;
        if (m.size == 0xFFFFFFFFu && used + 8 <= len)
          m.size = le64(f + used), used += 8;
        if (csize == 0xFFFFFFFFu && used + 8 <= len)
          csize = le64(f + used), used += 8;
        if (local == 0xFFFFFFFFu && used + 8 <= len)
          local = le64(f + used), used += 8;
      }
      e += 4 + len;
    }
    p += 46 + nameLen + extraLen + commentLen;
    if (local > b.size() || b.size() - local < 30 || le32(&b[local]) != 0x04034b50)
      throw InputError::at(where, place,
                           "local header offset " + std::to_string(local) +
                               " does not point at a local header");
    uint64_t dataStart = local + 30 + le16(&b[local + 26]) + le16(&b[local + 28]);
    if (dataStart > b.size() || b.size() - dataStart < csize)
      throw InputError::at(where + ":" + m.name, "zip data",
                           "member data runs past the end of the archive");
    m.data = std::span<const uint8_t>(b.data() + dataStart, csize);
    out.push_back(std::move(m));
  }
  return out;
}

std::string readZipMember(const ZipMember &m, const std::string &where, uint64_t maxBytes) {
  std::string member = where + ":" + m.name;
  if (m.size > maxBytes)
    throw InputError::at(member, "zip data",
                         "member of " + std::to_string(m.size) + " bytes, more than the " +
                             std::to_string(maxBytes) + " read here");
  std::string out;
  if (m.method == 0) {
    if (m.size != m.data.size())
      throw InputError::at(member, "zip data", "stored member sizes differ");
    out.assign(reinterpret_cast<const char *>(m.data.data()), m.data.size());
  } else if (m.method == 8) {
    if (m.size > UINT32_MAX)
      throw InputError::at(member, "zip data", "deflated member of 4 GiB or more");
    // Deflate cannot expand more than 1032:1: a larger declared size is a
    // lie, refused before anything is allocated for it.
    if (m.size > m.data.size() * 1032 + 64)
      throw InputError::at(member, "zip data",
                           "a deflated member of " + std::to_string(m.data.size()) +
                               " bytes claims to inflate to " + std::to_string(m.size) +
                               " bytes, more than deflate can");
    out.resize(m.size);
    z_stream zs{};
    if (inflateInit2(&zs, -15) != Z_OK)
      throw InputError::at(member, "zip data", "cannot start inflate");
    zs.next_in = const_cast<Bytef *>(m.data.data());
    zs.avail_in = static_cast<uInt>(std::min<size_t>(m.data.size(), UINT32_MAX));
    zs.next_out = reinterpret_cast<Bytef *>(out.data());
    zs.avail_out = static_cast<uInt>(std::min<uint64_t>(m.size, UINT32_MAX));
    int rc = inflate(&zs, Z_FINISH);
    uint64_t made = zs.total_out;
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || made != m.size)
      throw InputError::at(member, "zip data",
                           "deflated data does not inflate to its declared " +
                               std::to_string(m.size) + " bytes");
  } else {
    throw InputError::at(member, "zip data",
                         "expected stored or deflated member, found method " +
                             std::to_string(m.method));
  }
  if (crc32Of({reinterpret_cast<const uint8_t *>(out.data()), out.size()}) != m.crc)
    throw InputError::at(member, "zip data", "CRC mismatch");
  return out;
}

} // namespace anefit
