//===- ProgramGraph.h - A checked function as a graph to draw ---*- C++ -*-===//
//
// The dataflow of one function, seen the way the checker sees it: the
// compute ops of its body (FunctionReport::ops, same indices), the values
// each reads from other ops, from the function's inputs and states, and the
// outputs it returns. The ops are cut into chunks where at most one value
// flows across (the residual stream between transformer layers); runs of
// chunks that repeat with the same op types become groups (the layers), which
// the report can draw collapsed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"
#include "ir/IR.h"

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace anefit::report {

inline constexpr size_t kNone = static_cast<size_t>(-1);

/// Where an operand comes from.
struct OperandSource {
  enum class Kind : uint8_t { Op, Input, State, Const, Inner } kind = Kind::Op;
  size_t op = kNone; ///< the producing op (Kind::Op)
};

struct Operand {
  std::string param; ///< parameter name ("x", "weight", "values[1]")
  const Value *value = nullptr;
  OperandSource source;
};

struct GraphOp {
  const Operation *op = nullptr;
  std::vector<Operand> operands;
  std::vector<size_t> preds;             ///< distinct producing ops, ascending
  std::vector<size_t> succs;             ///< distinct consuming ops, ascending
  std::vector<const Value *> inputs;     ///< function inputs read (not states)
  std::vector<const Value *> statesRead; ///< states read (read_state)
  std::vector<const Value *> statesWritten;
  std::vector<std::string> returned; ///< function outputs this op produces
  size_t chunk = 0;
};

/// Consecutive ops [firstOp, lastOp] with at most one value entering from
/// the previous chunk (`entry`, produced there) besides function inputs,
/// states and broadcast values.
struct Chunk {
  size_t firstOp = 0;
  size_t lastOp = 0;
  const Value *entry = nullptr;
  size_t group = kNone;
};

/// A repeated block: chunks [firstChunk, lastChunk].
struct Group {
  size_t firstChunk = 0;
  size_t lastChunk = 0;
  size_t firstOp = 0;
  size_t lastOp = 0;
  size_t shape = 0; ///< groups with the same op types share a shape
  std::string kind; ///< a hint for people: "attention", "conv", or an op type
};

struct FunctionGraph {
  const Function *function = nullptr;
  std::vector<GraphOp> ops;
  std::vector<Chunk> chunks;
  std::vector<Group> groups;
  /// Every op name of the body, nested ops included, to its top-level op.
  std::map<std::string, size_t, std::less<>> opByName;
};

struct GraphOptions {
  /// A value read by at least this many ops (rotary tables, masks, cache
  /// positions) does not count as flowing across a chunk boundary.
  size_t broadcastUsers = 4;
  /// Nor does a value not read again within this many ops of the cut.
  size_t nearUse = 8;
  /// Only chunks of at least this many ops can mark where groups end (a
  /// repeated cast or reshape between layers should not).
  size_t minAnchorOps = 3;
};

/// Builds the graph of `fn` from its check report `fr` (ane::checkModel on
/// the same model: same ops, same order). Throws InputError if they disagree.
FunctionGraph buildFunctionGraph(const Function &fn, const ane::FunctionReport &fr,
                                 const GraphOptions &options = {});

} // namespace anefit::report
