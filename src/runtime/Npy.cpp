//===- Npy.cpp - numpy .npy and .npz files --------------------------------===//
//
// A small .npy header parser (the header is a Python dict literal with three
// keys) and a zip reader/writer covering what numpy produces: stored or
// deflated members, zip64 extra fields for sizes and offsets.
//
//===----------------------------------------------------------------------===//
#include "runtime/Npy.h"

#include "support/Zip.h"

#include "support/Error.h"
#include "support/FileSystem.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <zlib.h>

namespace anefit::runtime {
namespace {

/// One row per dtype numpy can describe: our dtype, numpy's descr code.
struct NpyDType {
  DType dtype;
  const char *descr; ///< without the byte-order character
};
constexpr NpyDType kNpyDTypes[] = {
    {DType::F32, "f4"}, {DType::F16, "f2"}, {DType::F64, "f8"}, {DType::I32, "i4"},
    {DType::I64, "i8"}, {DType::I16, "i2"}, {DType::I8, "i1"},  {DType::U8, "u1"},
    {DType::U16, "u2"}, {DType::U32, "u4"}, {DType::U64, "u8"}, {DType::Bool, "b1"},
};

uint16_t le16(const uint8_t *p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t *p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
void put16(std::vector<uint8_t> &o, uint16_t v) {
  o.push_back(v & 0xff);
  o.push_back(v >> 8);
}
void put32(std::vector<uint8_t> &o, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    o.push_back((v >> (8 * i)) & 0xff);
}
void put64(std::vector<uint8_t> &o, uint64_t v) {
  put32(o, static_cast<uint32_t>(v));
  put32(o, static_cast<uint32_t>(v >> 32));
}

/// The largest size or offset a plain zip field holds; from it on, zip64.
constexpr uint64_t kZip32Max = 0xFFFFFFFFu;

/// The value text following 'key': in a header dict.
std::string headerValue(const std::string &header, const std::string &key,
                        const std::string &where) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos)
    throw InputError::at(where, "npy header", "expected key '" + key + "', found none");
  size_t colon = header.find(':', k);
  if (colon == std::string::npos)
    throw InputError::at(where, "npy header", "expected ':' after '" + key + "'");
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos)
    throw InputError::at(where, "npy header", "missing value for '" + key + "'");
  size_t end;
  if (header[start] == '(')
    end = header.find(')', start) + 1;
  else if (header[start] == '\'')
    end = header.find('\'', start + 1) + 1;
  else
    end = header.find_first_of(",}", start);
  if (end == std::string::npos || end == 0)
    throw InputError::at(where, "npy header", "unterminated value for '" + key + "'");
  return header.substr(start, end - start);
}

/// CRC-32 of `n` bytes, continuing from `c` (the CRC of what came before).

} // namespace

namespace {

/// Where an .npy's data is and what it holds.
struct NpyLayout {
  DType dtype;
  Shape shape;
  uint64_t dataOffset = 0; ///< bytes before the data (magic, lengths, header)
  uint64_t dataBytes = 0;
};

/// Longest .npy header accepted (numpy writes a few hundred bytes).
constexpr uint64_t kMaxNpyHeader = uint64_t(1) << 20;

/// Bytes of an .npy that must be at hand to read its layout (the magic and
/// header length, then the header), given its first `have` bytes; 0 when
/// `prefix` holds enough. Throws InputError for a bad magic or version.
uint64_t npyPrefixNeeded(std::span<const uint8_t> prefix, const std::string &where) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (prefix.size() < 12)
    return 12;
  if (std::memcmp(prefix.data(), kMagic, 6) != 0)
    throw InputError::at(where, "offset 0", "expected the .npy magic \\x93NUMPY, found none");
  int major = prefix[6];
  if (major != 1 && major != 2 && major != 3)
    throw InputError::at(where, "offset 6",
                         "expected .npy format version 1, 2 or 3, found " + std::to_string(major));
  uint64_t need = major == 1 ? 10 + uint64_t(le16(&prefix[8])) : 12 + uint64_t(le32(&prefix[8]));
  if (need - 10 > kMaxNpyHeader)
    throw InputError::at(where, "npy header",
                         "expected a header of at most " + std::to_string(kMaxNpyHeader) +
                             " bytes, found " + std::to_string(need - 10));
  return prefix.size() >= need ? 0 : need;
}

/// Reads the layout of an .npy of `total` bytes from its first bytes `b`
/// (which hold at least the header), checking that the data fits exactly.
NpyLayout readNpyLayout(std::span<const uint8_t> b, uint64_t total, const std::string &where) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (b.size() < 10 || std::memcmp(b.data(), kMagic, 6) != 0)
    throw InputError::at(where, "offset 0", "expected the .npy magic \\x93NUMPY, found none");
  int major = b[6];
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = le16(&b[8]);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12)
      throw InputError::at(where, "offset 8", "truncated .npy header");
    headerLen = le32(&b[8]);
    headerStart = 12;
  } else {
    throw InputError::at(where, "offset 6",
                         "expected .npy format version 1, 2 or 3, found " + std::to_string(major));
  }
  if (headerLen > b.size() - headerStart || headerLen > total - headerStart)
    throw InputError::at(where, "npy header",
                         "header length " + std::to_string(headerLen) + " runs past the end");
  std::string header(reinterpret_cast<const char *>(&b[headerStart]), headerLen);
  std::string descr = headerValue(header, "descr", where);
  std::string fortran = headerValue(header, "fortran_order", where);
  std::string shapeText = headerValue(header, "shape", where);
  if (descr.size() < 4 || descr.front() != '\'' || descr.back() != '\'')
    throw InputError::at(where, "npy header", "expected a dtype string, found " + descr);
  descr = descr.substr(1, descr.size() - 2);
  char order = descr[0];
  std::string code = descr.substr(1);
  if (order == '>' && code != "i1" && code != "u1" && code != "b1")
    throw InputError::at(where, "npy header",
                         "big-endian arrays are not supported (descr '" + descr + "')");
  const NpyDType *dt = nullptr;
  for (const NpyDType &row : kNpyDTypes)
    if (code == row.descr)
      dt = &row;
  if (!dt)
    throw InputError::at(where, "npy header",
                         "expected a numeric or bool dtype, found '" + descr + "'");
  if (fortran != "False")
    throw InputError::at(where, "npy header",
                         "Fortran-order arrays are not supported; save a C-contiguous array");
  Shape shape;
  if (shapeText.size() < 2 || shapeText.front() != '(')
    throw InputError::at(where, "npy header", "expected a shape tuple, found " + shapeText);
  std::string inner = shapeText.substr(1, shapeText.size() - 2);
  size_t pos = 0;
  while (pos < inner.size()) {
    size_t next = inner.find(',', pos);
    std::string item =
        inner.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    size_t a = item.find_first_not_of(" L"), z = item.find_last_not_of(" L");
    if (a != std::string::npos) {
      item = item.substr(a, z - a + 1);
      if (item.empty() || item.size() > 18 ||
          item.find_first_not_of("0123456789") != std::string::npos)
        throw InputError::at(where, "npy header", "bad dimension '" + item + "' in shape");
      shape.push_back(std::stoll(item));
    }
    if (next == std::string::npos)
      break;
    pos = next + 1;
  }
  // Check the element count against the bytes present before allocating.
  uint64_t itemBytes = static_cast<uint64_t>(dtypeBits(dt->dtype) / 8);
  uint64_t avail = total - headerStart - headerLen, n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > avail / static_cast<uint64_t>(d))
      n = UINT64_MAX;
    else
      n *= static_cast<uint64_t>(d);
    if (n == UINT64_MAX)
      break;
  }
  if (n == UINT64_MAX || n * itemBytes > avail)
    throw InputError::at(where, "npy data",
                         "shape " + shapeStr(shape) + " of " + descr + " needs more than the " +
                             std::to_string(avail) + " data bytes present");
  return NpyLayout{dt->dtype, shape, headerStart + headerLen, n * itemBytes};
}

/// Deflated members may expand this much (numpy's savez_compressed of
/// ordinary data stays far below); beyond kInflateFloor bytes a larger claim
/// is refused before anything is allocated. Deflate itself allows 1032:1.
constexpr uint64_t kMaxInflateRatio = 128;
constexpr uint64_t kInflateFloor = uint64_t(64) << 20;

/// Inflates a deflated .npy member of declared size `usize` straight into
/// its tensor: the header first, then the data into memory the budget has
/// granted; never more than declared. Checks the CRC on the way.
Tensor inflateNpy(std::span<const uint8_t> data, uint64_t usize, uint32_t crc,
                  const std::string &member) {
  z_stream zs{};
  if (inflateInit2(&zs, -15) != Z_OK)
    throw InputError::at(member, "zip data", "cannot start inflate");
  struct End {
    z_stream &zs;
    ~End() { inflateEnd(&zs); }
  } end{zs};
  const uint8_t *in = data.data();
  uint64_t inLeft = data.size();
  uint32_t sum = 0;
  bool finished = false;
  // Fills exactly `n` bytes at `out` from the stream.
  auto produce = [&](uint8_t *out, uint64_t n) {
    uint64_t done = 0;
    while (done < n) {
      if (finished)
        throw InputError::at(member, "zip data",
                             "deflated member ends after " + std::to_string(zs.total_out) +
                                 " bytes, before its declared " + std::to_string(usize));
      uInt chunkIn = static_cast<uInt>(std::min<uint64_t>(inLeft, 1u << 30));
      uInt chunkOut = static_cast<uInt>(std::min<uint64_t>(n - done, 1u << 30));
      zs.next_in = const_cast<Bytef *>(in);
      zs.avail_in = chunkIn;
      zs.next_out = out + done;
      zs.avail_out = chunkOut;
      int rc = inflate(&zs, Z_NO_FLUSH);
      uint64_t used = chunkIn - zs.avail_in, made = chunkOut - zs.avail_out;
      in += used;
      inLeft -= used;
      if (made)
        sum = static_cast<uint32_t>(::crc32(sum, out + done, static_cast<uInt>(made)));
      done += made;
      if (rc == Z_STREAM_END)
        finished = true;
      else if (rc != Z_OK || (used == 0 && made == 0))
        throw InputError::at(member, "zip data", "deflated member is corrupt");
    }
  };
  std::vector<uint8_t> prefix(12);
  if (usize < prefix.size())
    throw InputError::at(member, "npy header",
                         "expected at least 12 bytes, found " + std::to_string(usize));
  produce(prefix.data(), prefix.size());
  if (uint64_t need = npyPrefixNeeded(prefix, member)) {
    if (need > usize)
      throw InputError::at(member, "npy header", "header runs past the member's declared size");
    prefix.resize(need);
    produce(prefix.data() + 12, need - 12);
  }
  NpyLayout layout = readNpyLayout(prefix, usize, member);
  if (layout.dataOffset + layout.dataBytes != usize)
    throw InputError::at(member, "npy data",
                         "the array takes " + std::to_string(layout.dataOffset + layout.dataBytes) +
                             " bytes but the member declares " + std::to_string(usize));
  // Past the header, what remains is the data itself.
  std::vector<uint8_t>().swap(prefix);
  Tensor t = Tensor::empty(layout.dtype, layout.shape);
  if (layout.dataBytes)
    produce(t.mutableBytes(), layout.dataBytes);
  // Nothing may follow: one more byte would mean the size was a lie.
  uint8_t extra;
  if (!finished) {
    zs.next_in = const_cast<Bytef *>(in);
    zs.avail_in = static_cast<uInt>(std::min<uint64_t>(inLeft, 1u << 30));
    zs.next_out = &extra;
    zs.avail_out = 1;
    int rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_STREAM_END || zs.avail_out != 1)
      throw InputError::at(member, "zip data",
                           "deflated member is longer than its declared " + std::to_string(usize) +
                               " bytes, or corrupt");
  }
  if (sum != crc)
    throw InputError::at(member, "zip data", "CRC mismatch");
  return t;
}

} // namespace

Tensor parseNpy(std::span<const uint8_t> b, const std::string &where) {
  uint64_t need = npyPrefixNeeded(b, where);
  if (need > b.size())
    throw InputError::at(where, "npy header",
                         "expected " + std::to_string(need) + " header bytes, found " +
                             std::to_string(b.size()));
  NpyLayout layout = readNpyLayout(b, b.size(), where);
  Tensor t = Tensor::empty(layout.dtype, layout.shape);
  if (layout.dataBytes)
    std::memcpy(t.mutableBytes(), &b[layout.dataOffset], layout.dataBytes);
  return t;
}

namespace {

/// An .npy file as its header and the tensor whose bytes follow it (the
/// input itself, or a widened copy for dtypes numpy lacks).
struct NpyParts {
  std::vector<uint8_t> header;
  Tensor data;
};

NpyParts npyParts(const Tensor &input) {
  Tensor t = input.materialize();
  const NpyDType *dt = nullptr;
  for (const NpyDType &row : kNpyDTypes)
    if (row.dtype == t.dtype())
      dt = &row;
  if (!dt) {
    DType to = isFloat(t.dtype()) ? DType::F32 : (t.dtype() == DType::I4 ? DType::I8 : DType::U8);
    t = t.convertTo(to);
    for (const NpyDType &row : kNpyDTypes)
      if (row.dtype == to)
        dt = &row;
  }
  char order = dtypeBits(t.dtype()) == 8 ? '|' : '<';
  std::string header =
      std::string("{'descr': '") + order + dt->descr + "', 'fortran_order': False, 'shape': (";
  // Python tuple syntax: "(3,)" for one dim, "(2, 3)" otherwise.
  for (size_t i = 0; i < t.shape().size(); ++i)
    header += (i ? ", " : "") + std::to_string(t.shape()[i]);
  if (t.shape().size() == 1)
    header += ",";
  header += "), }";
  // Pad with spaces so the data starts at a multiple of 64, ending in '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  put16(out, static_cast<uint16_t>(header.size()));
  out.insert(out.end(), header.begin(), header.end());
  return {std::move(out), std::move(t)};
}

} // namespace

std::vector<uint8_t> encodeNpy(const Tensor &input) {
  NpyParts parts = npyParts(input);
  std::vector<uint8_t> out = std::move(parts.header);
  out.insert(out.end(), parts.data.bytes(), parts.data.bytes() + parts.data.numBytes());
  return out;
}

Tensor readNpy(const std::string &path) {
  std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  return parseNpy(file->bytes(), path);
}

void writeNpy(const std::string &path, const Tensor &t, const OutputOptions &options) {
  // The header, then the tensor's own bytes, as NpzWriter writes a member.
  NpyParts npy = npyParts(t);
  AtomicFile file(path, options);
  file.write(npy.header);
  file.write(std::span<const uint8_t>(npy.data.bytes(), static_cast<size_t>(npy.data.numBytes())));
  file.commit();
}

std::vector<NamedTensor> parseNpz(std::span<const uint8_t> b, const std::string &where) {
  std::vector<NamedTensor> out;
  for (const ZipMember &z : zipMembers(b, where, "a zip archive (.npz)")) {
    std::string name = z.name;
    std::string member = where + ":" + name;
    uint16_t method = z.method;
    uint32_t crc = z.crc;
    uint64_t usize = z.size, csize = z.data.size();
    std::span<const uint8_t> data = z.data;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    if (method == 8) {
      // The declared size is checked before anything is allocated: against
      // a ratio no real array needs, then (as the tensor is made) against
      // the memory budget.
      if (usize > std::max(kInflateFloor, csize * kMaxInflateRatio))
        throw InputError::at(member, "zip data",
                             "a deflated member of " + std::to_string(csize) +
                                 " bytes claims to inflate to " + std::to_string(usize) +
                                 " bytes, more than " + std::to_string(kMaxInflateRatio) +
                                 " times its size; save large arrays with numpy.savez "
                                 "(uncompressed)");
      out.push_back({name, inflateNpy(data, usize, crc, member)});
      continue;
    } else if (method != 0) {
      throw InputError::at(member, "zip data",
                           "expected stored or deflated member, found method " +
                               std::to_string(method));
    } else if (usize != csize) {
      throw InputError::at(member, "zip data", "stored member sizes differ");
    }
    if (crc32Of(data) != crc)
      throw InputError::at(member, "zip data", "CRC mismatch");
    out.push_back({name, parseNpy(data, member)});
  }
  return out;
}

std::vector<NamedTensor> readNpz(const std::string &path) {
  std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  return parseNpz(file->bytes(), path);
}

NpzWriter::NpzWriter(const std::string &path, const OutputOptions &options)
    : path_(path), file_(path, options) {}

void NpzWriter::add(const std::string &name, const Tensor &tensor) {
  if (finished_)
    throw std::logic_error("NpzWriter::add after finish");
  // The header, then the tensor's own bytes: no copy of the data is made.
  NpyParts npy = npyParts(tensor);
  std::span<const uint8_t> bytes(npy.data.bytes(), static_cast<size_t>(npy.data.numBytes()));
  std::string member = name + ".npy";
  if (member.size() > 0xFFFF)
    throw InputError::at(path_, name, "array name longer than a zip archive allows");
  uint32_t crc = crc32Of(bytes, crc32Of(npy.header));
  uint64_t size = npy.header.size() + bytes.size();
  // zip64 fields for what does not fit in 32 bits: sizes of 4 GiB and more
  // in both headers, offsets from 4 GiB on in the central one.
  bool bigSize = size >= kZip32Max, bigOffset = offset_ >= kZip32Max;
  auto header = [&](std::vector<uint8_t> &o, bool central) {
    std::vector<uint8_t> extra;
    if (bigSize) {
      put64(extra, size);
      put64(extra, size);
    }
    if (central && bigOffset)
      put64(extra, offset_);
    uint16_t version = extra.empty() ? 20 : 45;
    put32(o, central ? 0x02014b50 : 0x04034b50);
    if (central)
      put16(o, version); // version made by
    put16(o, version);   // version needed
    put16(o, 0);         // flags
    put16(o, 0);         // stored
    put16(o, 0);         // time
    put16(o, 0x21);      // date 1980-01-01: fixed, so equal arrays give equal files
    put32(o, crc);
    put32(o, bigSize ? 0xFFFFFFFFu : static_cast<uint32_t>(size));
    put32(o, bigSize ? 0xFFFFFFFFu : static_cast<uint32_t>(size));
    put16(o, static_cast<uint16_t>(member.size()));
    put16(o, static_cast<uint16_t>(extra.empty() ? 0 : extra.size() + 4));
    if (central) {
      put16(o, 0); // comment
      put16(o, 0); // disk
      put16(o, 0); // internal attributes
      put32(o, 0); // external attributes
      put32(o, bigOffset ? 0xFFFFFFFFu : static_cast<uint32_t>(offset_));
    }
    o.insert(o.end(), member.begin(), member.end());
    if (!extra.empty()) {
      put16(o, 0x0001);
      put16(o, static_cast<uint16_t>(extra.size()));
      o.insert(o.end(), extra.begin(), extra.end());
    }
  };
  std::vector<uint8_t> local;
  header(local, false);
  header(central_, true);
  file_.write(local);
  file_.write(npy.header);
  file_.write(bytes);
  offset_ += local.size() + size;
  ++count_;
}

void NpzWriter::finish() {
  if (finished_)
    return;
  uint64_t cdOffset = offset_, cdSize = central_.size();
  std::vector<uint8_t> end = std::move(central_);
  bool zip64 = count_ >= 0xFFFF || cdSize >= kZip32Max || cdOffset >= kZip32Max;
  if (zip64) {
    uint64_t record = cdOffset + cdSize;
    put32(end, 0x06064b50); // zip64 end of central directory record
    put64(end, 44);         // its size after this field
    put16(end, 45);
    put16(end, 45);
    put32(end, 0);
    put32(end, 0);
    put64(end, count_);
    put64(end, count_);
    put64(end, cdSize);
    put64(end, cdOffset);
    put32(end, 0x07064b50); // its locator
    put32(end, 0);
    put64(end, record);
    put32(end, 1);
  }
  put32(end, 0x06054b50);
  put16(end, 0);
  put16(end, 0);
  put16(end, zip64 ? 0xFFFF : static_cast<uint16_t>(count_));
  put16(end, zip64 ? 0xFFFF : static_cast<uint16_t>(count_));
  put32(end, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cdSize));
  put32(end, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cdOffset));
  put16(end, 0);
  file_.write(end);
  file_.commit();
  finished_ = true;
}

void writeNpz(const std::string &path, const std::vector<NamedTensor> &tensors,
              const OutputOptions &options) {
  NpzWriter writer(path, options);
  for (const NamedTensor &nt : tensors)
    writer.add(nt.name, nt.tensor);
  writer.finish();
}

} // namespace anefit::runtime
