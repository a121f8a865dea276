//===- Pte.h - ExecuTorch program files and their Core ML payloads -*- C++ -*-===//
//
// An ExecuTorch .pte file is a flatbuffer (identifier "ET" + two digits)
// optionally followed by segments, announced by an extended header "eh00" at
// byte 8 (formats.md §7). anefit reads it with its own bounds-checked
// flatbuffer walker: the methods (execution plans), their backend delegates,
// and each Core ML delegate's payload, which is either an inmemoryfs
// flattened directory holding model.mlpackage, or a "CMJR" reference into the
// program's named data (multi-method weight sharing).
//
// Writing (writePteWithSegments) copies a program and replaces whole
// segments: the flatbuffer keeps every byte except the offsets and sizes of
// the segment table and the extended header's segment data size, which are
// recomputed for the new segment lengths, each segment keeping at least its
// old alignment.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/FileSystem.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace anefit {

/// One backend delegate of one method.
struct PteDelegate {
  std::string method;                              ///< execution plan name ("forward")
  uint32_t indexInMethod = 0;                      ///< position in the plan's delegate list
  std::string backendId;                           ///< "CoreMLBackend", "XnnpackBackend", ...
  std::map<std::string, std::string> compileSpecs; ///< key -> value as text
  /// Where the processed bytes live: "inline", "segment" or "named-data".
  std::string location;
  uint32_t dataIndex = 0;
  /// For Core ML payloads stored as a "CMJR" reference: the named-data key
  /// and the function of the multi-function package that is this method.
  std::string namedDataKey;
  std::string functionName;

  bool isCoreML() const { return backendId == "CoreMLBackend"; }
  /// "forward/delegate 0 (CoreMLBackend)", for messages.
  std::string label() const;
};

/// A file of an inmemoryfs flattened directory.
struct FlatFile {
  std::string path; ///< relative to the payload root, '/'-separated
  std::span<const uint8_t> data;
};

/// One entry of Program.segments and where its fields sit in the file.
struct PteSegment {
  uint64_t offset = 0; ///< relative to the segment base offset
  uint64_t size = 0;
  /// File positions of the DataSegment's offset and size fields; 0 when the
  /// field is absent from the flatbuffer (it then holds the default, 0).
  uint64_t offsetField = 0;
  uint64_t sizeField = 0;
};

/// What ExecuTorch does around one call of a delegate, read from the method's
/// instructions: which delegate outputs it copies back into which of the
/// delegate's inputs (a mutable buffer written back by `aten::copy_` after the
/// call, or an output that is the input's own value), so the next call sees
/// them. Positions count the delegate's inputs and outputs in the order of
/// its arguments (ExecuTorch passes inputs, then outputs).
struct PteWriteBack {
  uint32_t output = 0; ///< position among the delegate's outputs
  uint32_t input = 0;  ///< position among the delegate's inputs
  int32_t value = -1;  ///< the method's value (the buffer) that carries it
  /// How: "aten::copy_" (a write-back instruction) or "alias" (the output
  /// is the input's value).
  std::string via;
  /// The buffer is one of the method's own inputs (a mutable user input)
  /// rather than a memory-planned buffer.
  bool methodInput = false;
};

struct PteDelegateIO {
  std::vector<PteWriteBack> writeBacks;
  /// Set when the method has a form anefit cannot map (the delegate called
  /// more than once, control flow, a buffer written from something other
  /// than the delegate, ...): what it found. writeBacks is then empty.
  std::string unmappable;
};

/// Bytes to write, gathered from memory and from files on disk; files are
/// streamed, never loaded whole.
class ByteChunks {
public:
  /// Bytes the caller keeps alive until the chunks are written.
  void addBorrowed(std::span<const uint8_t> bytes);
  void addOwned(std::string bytes);
  /// `size` bytes of the file at `path` (checked when written).
  void addFile(std::string path, uint64_t size);
  void addZeros(uint64_t count);
  void append(const ByteChunks &other);
  uint64_t size() const { return size_; }
  /// Writes every chunk in order. Throws InputError naming a file that
  /// changed size or cannot be read.
  void writeTo(AtomicFile &out) const;

private:
  struct Chunk {
    enum class Kind { Borrowed, Owned, File, Zeros } kind;
    std::span<const uint8_t> bytes;
    std::shared_ptr<const std::string> owned;
    std::string path;
    uint64_t size = 0;
  };
  std::vector<Chunk> chunks_;
  uint64_t size_ = 0;
};

/// A file to put into a flattened directory.
struct FlatFileOut {
  std::string path; ///< relative to the root, '/'-separated
  ByteChunks data;
};

class PteFile {
public:
  /// Maps `path` and reads the program table. Throws InputError.
  static std::shared_ptr<PteFile> open(const std::string &path);
  /// Reads a .pte held in memory (`bytes` must outlive the result).
  static std::shared_ptr<PteFile> fromBytes(std::span<const uint8_t> bytes,
                                            const std::string &name);
  ~PteFile();

  const std::string &path() const { return path_; }
  std::string fileIdentifier() const { return identifier_; }
  const std::vector<std::string> &methods() const { return methods_; }
  const std::vector<PteDelegate> &delegates() const { return delegates_; }
  /// The processed bytes of a delegate (following a CMJR reference into
  /// named data for Core ML payloads). Throws InputError.
  std::span<const uint8_t> payload(const PteDelegate &d) const;
  /// The segment holding a delegate's processed bytes (for a CMJR reference,
  /// the named data's segment); nullopt for inline data.
  std::optional<uint32_t> payloadSegment(const PteDelegate &d) const;

  /// The write-back of delegate `d` (PteWriteBack), given how many inputs
  /// and outputs its model has. Never throws: a corrupt or unexpected method
  /// is reported in `unmappable`.
  PteDelegateIO delegateIO(const PteDelegate &d, size_t numInputs, size_t numOutputs) const;

  std::span<const uint8_t> bytes() const { return bytes_; }
  const std::vector<PteSegment> &segmentTable() const { return segments_; }
  /// Extended header: its length (0 when absent), program size, segment
  /// base offset and segment data size (0 when the header has no such field).
  uint32_t extendedHeaderLength() const { return extHeaderLength_; }
  uint64_t programSize() const { return programSize_; }
  uint64_t segmentBase() const { return segmentBase_; }
  uint64_t segmentDataSize() const { return segmentDataSize_; }

private:
  PteFile() = default;
  void parse();
  std::span<const uint8_t> segment(uint32_t index, const std::string &what) const;

  std::string path_;
  std::span<const uint8_t> bytes_;
  std::shared_ptr<const MappedFile> mapping_;
  std::string identifier_;
  uint32_t extHeaderLength_ = 0;
  uint64_t programSize_ = 0;
  uint64_t segmentBase_ = 0;
  uint64_t segmentDataSize_ = 0;
  std::vector<std::string> methods_;
  std::vector<uint64_t> planTables_; ///< file position of each execution plan table
  std::vector<PteDelegate> delegates_;
  std::vector<PteSegment> segments_;
  std::vector<std::span<const uint8_t>> inlineData_;
  std::map<std::string, uint32_t> namedData_; ///< key -> segment index
};

/// A payload that is a "CMJR" reference into the program's named data
/// (multi-method weight sharing): the key and the function it names.
struct CoreMLPayloadReference {
  std::string key;
  std::string functionName;
};
/// The reference a payload holds, or nullopt for a payload that is not one.
/// Throws InputError for a "CMJR" payload without a string "key".
std::optional<CoreMLPayloadReference> coreMLPayloadReference(std::span<const uint8_t> payload,
                                                             const std::string &label);

/// Unpacks an inmemoryfs flattened directory (reversed JSON index at the
/// end). `context` names the payload in messages. Throws InputError.
std::vector<FlatFile> readFlattenedDirectory(std::span<const uint8_t> payload,
                                             const std::string &context);
/// The name of a flattened directory's root node ("lowered_module").
std::string flattenedDirectoryRootName(std::span<const uint8_t> payload,
                                       const std::string &context);

/// Packs files into an inmemoryfs flattened directory whose root is named
/// `rootName`: file data back to back (each start aligned to 16 KiB when the
/// data exceeds 1 GiB), then the node index as compact JSON, byte-reversed.
/// Nodes are listed post-order with children by name, the root last.
/// Throws InputError on an empty, absolute or duplicate path.
ByteChunks writeFlattenedDirectory(const std::string &rootName, std::vector<FlatFileOut> files);

/// Writes a copy of the program `pte` to `outPath` in which segment i holds
/// `replacements[i]` instead of its old bytes. Everything else is copied byte
/// for byte except the segment table's offsets and sizes and the extended
/// header's segment data size; each segment starts at an offset at least as
/// aligned as its old one. Atomic (temporary sibling renamed into place).
/// Throws InputError when a field that must change is absent from the
/// flatbuffer, or the file has bytes after its last segment.
void writePteWithSegments(const PteFile &pte, const std::map<uint32_t, ByteChunks> &replacements,
                          const std::string &outPath, const OutputOptions &options = {});

} // namespace anefit
