//===- UseMap.h - Who uses each value, built on demand ----------*- C++ -*-===//
//
// The IR keeps no use-lists, so rewrites that need them build a UseMap over a
// function: for every value, the op bindings and block outputs that refer to
// it, nested blocks included. The map is kept up to date by the mutators
// here (replaceAllUsesWith, erase, notifyInserted), which the pattern
// rewriter and the passes go through.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <unordered_map>
#include <vector>

namespace anefit {

/// One reference to a value: binding `binding` of input `input` of `user`,
/// or (when `user` is null) output `outputIndex` of `block`.
struct Use {
  Operation *user = nullptr;
  size_t input = 0;
  size_t binding = 0;
  Block *block = nullptr;
  size_t outputIndex = 0;

  bool isBlockOutput() const { return user == nullptr; }
};

class UseMap {
public:
  /// Builds the map for every op and block output of `fn`.
  explicit UseMap(Function &fn);

  /// Uses of `v` (empty if none). Invalidated by the mutators below.
  const std::vector<Use> &uses(const Value *v) const;
  bool hasUses(const Value *v) const { return !uses(v).empty(); }
  /// Distinct ops using `v`, in first-use order.
  std::vector<Operation *> users(const Value *v) const;

  /// Makes every use of `from` (op bindings in any block, block outputs)
  /// refer to `to` instead.
  void replaceAllUsesWith(Value *from, Value *to);
  /// Sets binding (input, binding) of `op` to `v`, keeping the map current.
  void setOperand(Operation &op, size_t input, size_t binding, Value *v);
  /// Records the operands and nested ops of an op just inserted.
  void notifyInserted(Operation &op);
  /// Forgets the uses made by `op` and its nested ops (before erasing it).
  void notifyRemoved(Operation &op);
  /// Removes `op` from its block; its results must be unused.
  void erase(Operation &op);

private:
  std::unordered_map<const Value *, std::vector<Use>> uses_;
  void addOpUses(Operation &op);
  void addBlockUses(Block &block);
};

} // namespace anefit
