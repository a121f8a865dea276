//===- ETRecord.h - Source lines behind an ExecuTorch program ---*- C++ -*-===//
//
// An ETRecord (`export_llm ... +debug.generate_etrecord=true`, or
// executorch.devtools.generate_etrecord) is a zip archive holding the
// programs of an export as torch.export JSON, their weights, and the maps
// from delegate ops to debug handles. This reads what joins a Core ML op to
// the user's code without touching the weights: the edge-dialect program's
// nodes by debug handle (their Python stack and module path) and its graph
// signature (which placeholder is which buffer, which outputs ExecuTorch
// writes back into which buffer). Members whose names end in `_state_dict`,
// `_constants` or `_example_inputs` are never read.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace anefit {

/// One frame of a node's Python stack.
struct SourceFrame {
  std::string file; ///< as recorded (the exporting machine's path)
  int64_t line = 0;
  std::string function;
  std::string code; ///< the source line, stripped
};

/// An edge-dialect node that carries a debug handle.
struct EdgeNode {
  std::string name;   ///< FX node name ("aten_index_put_default_1")
  std::string target; ///< "executorch.exir.dialects.edge.ops.aten.index_put.default"
  int64_t debugHandle = 0;
  std::vector<SourceFrame> stack; ///< outermost first
  std::string modulePath;         ///< innermost nn.Module ("layers.2.attention")
  std::string moduleType;         ///< its class ("...attention.AttentionMHA")
};

/// Where a Core ML op comes from in the user's code.
struct SourceOrigin {
  const EdgeNode *node = nullptr;
  /// The innermost frame outside PyTorch itself (not under a torch/
  /// package directory); null when the node has no such frame.
  const SourceFrame *frame = nullptr;
};

struct ETRecord {
  std::string path;
  std::string method;         ///< the edge program read ("forward")
  std::deque<EdgeNode> nodes; ///< a deque: read node by node, never moved whole
  std::map<int64_t, std::vector<size_t>> byHandle; ///< debug handle -> nodes
  /// Placeholder names of buffers -> their module paths
  /// ("b_layers_0_conv_conv_state" -> "layers.0.conv.conv_state").
  std::map<std::string, std::string> buffers;
  /// Mutated buffers by module path, with the graph output that writes them.
  std::map<std::string, std::string> mutations;
  /// The method's delegate maps, one per delegate call: Core ML op (its
  /// first output's name, the part of "<MIL output>:<MIL op>" before the
  /// colon) -> debug handles.
  std::vector<std::map<std::string, std::vector<int64_t>>> delegateMaps;

  /// The origin of an op with these debug handles: the first handle whose
  /// node has a frame outside PyTorch, else the first node found.
  SourceOrigin originOf(const std::vector<int64_t> &handles) const;
  /// The module path of a buffer placeholder, also given as the name
  /// coremltools derived from it ("..._to_fp16" suffixes are dropped).
  std::optional<std::string> bufferPath(const std::string &name) const;
};

/// Reads the ETRecord at `path` for `method`. Throws InputError (not a zip,
/// no ETRecord version marker, a version this reader does not know, no
/// edge program for the method, malformed JSON).
ETRecord readETRecord(const std::string &path, const std::string &method = "forward");
/// The same from bytes in memory; `path` names them in messages.
ETRecord parseETRecord(std::span<const uint8_t> bytes, const std::string &path,
                       const std::string &method = "forward");

/// How many of `opHandles` (a Core ML model's op -> debug handles, as read
/// from its .pte) a delegate map of `record` gives the same handles, of how
/// many: the best delegate's. A join is sound only when they all agree.
std::pair<size_t, size_t>
delegateMapAgreement(const ETRecord &record,
                     const std::map<std::string, std::vector<int64_t>> &opHandles);

/// `file` shown relative to `root` when it lies under it, or under a
/// directory of that name elsewhere (the exporting machine's checkout);
/// unchanged otherwise.
std::string relativeSource(const std::string &file, const std::string &root);

} // namespace anefit
