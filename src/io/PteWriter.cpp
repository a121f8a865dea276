//===- PteWriter.cpp - Writing ExecuTorch programs with new payloads ------===//
//
// A .pte is copied, not re-serialized: the flatbuffer is taken byte for byte
// and only the fields that locate segments are patched in place (each a
// fixed-width scalar, so no offset inside the flatbuffer moves). Segments are
// then laid out again in their old order, each at the next offset that is at
// least as aligned as its old one, with zero padding between them, exactly
// as ExecuTorch's serializer lays them out. Payload files are streamed from
// memory and disk, so a multi-GB program is never held in memory.
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"
#include "io/Pte.h"
#include "support/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <map>
#include <set>

namespace anefit {

//===----------------------------------------------------------------------===//
// ByteChunks
//===----------------------------------------------------------------------===//

void ByteChunks::addBorrowed(std::span<const uint8_t> bytes) {
  chunks_.push_back(Chunk{Chunk::Kind::Borrowed, bytes, nullptr, "", bytes.size()});
  size_ += bytes.size();
}

void ByteChunks::addOwned(std::string bytes) {
  uint64_t n = bytes.size();
  chunks_.push_back(
      Chunk{Chunk::Kind::Owned, {}, std::make_shared<const std::string>(std::move(bytes)), "", n});
  size_ += n;
}

void ByteChunks::addFile(std::string path, uint64_t size) {
  chunks_.push_back(Chunk{Chunk::Kind::File, {}, nullptr, std::move(path), size});
  size_ += size;
}

void ByteChunks::addZeros(uint64_t count) {
  if (count == 0)
    return;
  chunks_.push_back(Chunk{Chunk::Kind::Zeros, {}, nullptr, "", count});
  size_ += count;
}

void ByteChunks::append(const ByteChunks &other) {
  chunks_.insert(chunks_.end(), other.chunks_.begin(), other.chunks_.end());
  size_ += other.size_;
}

void ByteChunks::writeTo(AtomicFile &out) const {
  static const char zeros[4096] = {};
  std::vector<char> buffer;
  for (const Chunk &c : chunks_) {
    switch (c.kind) {
    case Chunk::Kind::Borrowed:
      out.write(c.bytes);
      break;
    case Chunk::Kind::Owned:
      out.write(std::string_view(*c.owned));
      break;
    case Chunk::Kind::Zeros:
      for (uint64_t left = c.size; left > 0;) {
        uint64_t n = std::min<uint64_t>(left, sizeof zeros);
        out.write(std::string_view(zeros, n));
        left -= n;
      }
      break;
    case Chunk::Kind::File: {
      InputOptions untracked;
      untracked.track = false;
      std::shared_ptr<const MappedFile> file = MappedFile::open(c.path, untracked);
      if (file->size() != c.size)
        throw InputError::at(c.path, "",
                             "file has " + std::to_string(file->size()) + " bytes, expected " +
                                 std::to_string(c.size) + "; it changed while being written");
      out.write(file->bytes());
      break;
    }
    }
  }
}

//===----------------------------------------------------------------------===//
// Flattened directories
//===----------------------------------------------------------------------===//

namespace {

/// Above this much file data, inmemoryfs writers align each file to a page.
constexpr uint64_t kLargePayload = uint64_t(1) << 30;
constexpr uint64_t kLargePayloadAlignment = 16384;

uint64_t alignUp(uint64_t n, uint64_t alignment) {
  return alignment <= 1 ? n : (n + alignment - 1) / alignment * alignment;
}

struct DirNode {
  std::map<std::string, DirNode> dirs;
  std::map<std::string, size_t> files; ///< name -> index into the file list
};

} // namespace

ByteChunks writeFlattenedDirectory(const std::string &rootName, std::vector<FlatFileOut> files) {
  DirNode root;
  std::set<std::string> seen;
  uint64_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string &path = files[i].path;
    if (path.empty() || path.front() == '/' || path.back() == '/' || !seen.insert(path).second)
      throw InputError::at("flattened directory", "file '" + path + "'",
                           "expected a unique relative path");
    DirNode *dir = &root;
    size_t start = 0;
    for (size_t slash; (slash = path.find('/', start)) != std::string::npos; start = slash + 1) {
      std::string part = path.substr(start, slash - start);
      if (part.empty() || part == "." || part == "..")
        throw InputError::at("flattened directory", "file '" + path + "'",
                             "expected a path without empty, '.' or '..' parts");
      dir = &dir->dirs[part];
    }
    std::string name = path.substr(start);
    if (dir->dirs.count(name))
      throw InputError::at("flattened directory", "file '" + path + "'", "is also a directory");
    dir->files[name] = i;
    total += files[i].data.size();
  }
  uint64_t alignment = total > kLargePayload ? kLargePayloadAlignment : 1;

  ByteChunks out;
  nlohmann::json nodes = nlohmann::json::array();
  std::function<size_t(const std::string &, const DirNode &)> emit =
      [&](const std::string &name, const DirNode &dir) -> size_t {
    // Post-order: every child (directories and files, by name) before the directory.
    std::map<std::string, size_t> children;
    std::set<std::string> names;
    for (const auto &[n, d] : dir.dirs)
      names.insert(n);
    for (const auto &[n, f] : dir.files)
      names.insert(n);
    for (const std::string &n : names) {
      auto d = dir.dirs.find(n);
      if (d != dir.dirs.end()) {
        children[n] = emit(n, d->second);
        continue;
      }
      FlatFileOut &file = files[dir.files.at(n)];
      uint64_t offset = alignUp(out.size(), alignment);
      out.addZeros(offset - out.size());
      uint64_t size = file.data.size();
      out.append(file.data);
      nodes.push_back({{"children", nlohmann::json::object()},
                       {"dataRegion", {{"offset", offset}, {"size", size}}},
                       {"kind", 0},
                       {"name", n}});
      children[n] = nodes.size() - 1;
    }
    nlohmann::json childJson = nlohmann::json::object();
    for (const auto &[n, idx] : children)
      childJson[n] = idx;
    nodes.push_back({{"children", childJson},
                     {"dataRegion", {{"offset", 0}, {"size", 0}}},
                     {"kind", 1},
                     {"name", name}});
    return nodes.size() - 1;
  };
  emit(rootName, root);
  out.addZeros(alignUp(out.size(), alignment) - out.size());
  std::string index = nlohmann::json{{"nodes", nodes}}.dump();
  std::reverse(index.begin(), index.end());
  out.addOwned(std::move(index));
  return out;
}

//===----------------------------------------------------------------------===//
// Programs
//===----------------------------------------------------------------------===//

namespace {

/// The largest power of two dividing `offset` (capped: an offset of 0, or
/// one that happens to be a multiple of a huge power, asks for no more).
uint64_t alignmentOf(uint64_t offset) {
  constexpr uint64_t kCap = uint64_t(1) << 16;
  if (offset == 0)
    return kCap;
  return std::min<uint64_t>(kCap, uint64_t(1) << std::countr_zero(offset));
}

void patchU64(std::string &head, uint64_t pos, uint64_t value) {
  std::memcpy(head.data() + pos, &value, sizeof value);
}

} // namespace

void writePteWithSegments(const PteFile &pte, const std::map<uint32_t, ByteChunks> &replacements,
                          const std::string &outPath, const OutputOptions &options) {
  const std::string &in = pte.path();
  std::span<const uint8_t> bytes = pte.bytes();
  const std::vector<PteSegment> &segments = pte.segmentTable();
  for (const auto &[index, data] : replacements)
    if (index >= segments.size())
      throw InputError::at(in, "segments", "no segment " + std::to_string(index) + " to replace");
  if (segments.empty()) {
    writeFileAtomically(
        outPath, std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
    return;
  }

  // Old extent of the segment data; nothing may follow it.
  uint64_t base = pte.segmentBase();
  uint64_t oldEnd = 0;
  for (const PteSegment &s : segments) {
    if (s.offset > bytes.size() || s.size > bytes.size() - s.offset ||
        base > bytes.size() - s.offset - s.size)
      throw InputError::at(in, "segments", "a segment runs past the end of the file");
    oldEnd = std::max(oldEnd, s.offset + s.size);
  }
  if (base + oldEnd != bytes.size())
    throw InputError::at(in, "segments",
                         "the file has " + std::to_string(bytes.size() - base - oldEnd) +
                             " bytes after its last segment that the program does not describe; "
                             "anefit does not rewrite such files");
  if (pte.programSize() > base)
    throw InputError::at(in, "extended header", "the program overlaps the segment data");

  // Lay the segments out again in their old order.
  std::vector<uint32_t> order(segments.size());
  for (uint32_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return segments[a].offset < segments[b].offset; });
  std::string head(reinterpret_cast<const char *>(bytes.data()), base);
  ByteChunks data;
  for (uint32_t i : order) {
    const PteSegment &s = segments[i];
    auto replaced = replacements.find(i);
    uint64_t size = replaced != replacements.end() ? replaced->second.size() : s.size;
    uint64_t offset = alignUp(data.size(), alignmentOf(s.offset));
    std::string what = "segments[" + std::to_string(i) + "]";
    if (offset != s.offset) {
      if (!s.offsetField)
        throw InputError::at(in, what,
                             "the offset field is absent (default 0) and cannot be patched to " +
                                 std::to_string(offset));
      patchU64(head, s.offsetField, offset);
    }
    if (size != s.size) {
      if (!s.sizeField)
        throw InputError::at(in, what,
                             "the size field is absent (default 0) and cannot be patched to " +
                                 std::to_string(size));
      patchU64(head, s.sizeField, size);
    }
    data.addZeros(offset - data.size());
    if (replaced != replacements.end())
      data.append(replaced->second);
    else
      data.addBorrowed(bytes.subspan(base + s.offset, s.size));
  }
  if (pte.extendedHeaderLength() >= 32)
    patchU64(head, 32, data.size());

  AtomicFile out(outPath, options);
  out.write(std::string_view(head));
  data.writeTo(out);
  out.commit();
}

} // namespace anefit
