//===- StateMap.h - How the host carries moved states ----------*- C++ -*-===//
//
// After state-to-io, the host owns what used to be a Core ML state: it feeds
// zeros to the state's input on the first prediction and the state's output
// back into that input on every later one. The state map ("anefit.statemap/1")
// records this contract per moved state. It is written next to a fixed
// package and into the model's user-defined metadata.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace anefit {

/// One moved state.
struct StateMapEntry {
  std::string state;  ///< the state's name in the original model
  std::string input;  ///< input that receives the state's value
  std::string output; ///< output that carries its value after the prediction
  std::vector<int64_t> shape;
  DType dtype = DType::F16;
  /// Functions that read or write it (all of them take the input and
  /// produce the output).
  std::vector<std::string> functions;
  /// False when no function writes the state: its output equals its input.
  bool written = true;
};

struct StateMap {
  static constexpr const char *kSchema = "anefit.statemap/1";
  /// Metadata key under which the map is stored in the model.
  static constexpr const char *kMetadataKey = "com.anefit.statemap";

  std::vector<StateMapEntry> entries;
  /// States that stay Core ML states (e.g. the KV cache under keep-largest).
  std::vector<std::string> keptStates;

  bool empty() const { return entries.empty(); }
  /// Entry for the state named `state`, or null.
  const StateMapEntry *find(const std::string &state) const;

  /// JSON text; `indent` < 0 gives one line.
  std::string toJson(int indent = 2) const;
  /// Parses JSON text; throws InputError naming `origin` on a malformed map.
  static StateMap fromJson(const std::string &text, const std::string &origin);
};

/// "OUT.mlpackage" -> "OUT.statemap.json" (same directory).
std::string stateMapPathFor(const std::string &modelPath);

} // namespace anefit
