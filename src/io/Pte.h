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
//===----------------------------------------------------------------------===//
#pragma once

#include "support/FileSystem.h"

#include <cstdint>
#include <map>
#include <memory>
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

private:
  PteFile() = default;
  void parse();
  std::span<const uint8_t> segment(uint32_t index, const std::string &what) const;

  std::string path_;
  std::span<const uint8_t> bytes_;
  std::shared_ptr<const MappedFile> mapping_;
  std::string identifier_;
  uint64_t segmentBase_ = 0;
  std::vector<std::string> methods_;
  std::vector<PteDelegate> delegates_;
  std::vector<std::pair<uint64_t, uint64_t>> segments_; ///< (offset, size)
  std::vector<std::span<const uint8_t>> inlineData_;
  std::map<std::string, uint32_t> namedData_; ///< key -> segment index
};

/// Unpacks an inmemoryfs flattened directory (reversed JSON index at the
/// end). `context` names the payload in messages. Throws InputError.
std::vector<FlatFile> readFlattenedDirectory(std::span<const uint8_t> payload,
                                             const std::string &context);

} // namespace anefit
