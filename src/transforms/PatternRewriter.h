//===- PatternRewriter.h - Rewrite patterns and the worklist driver -*- C++ -*-===//
//
// A RewritePattern looks at one operation and, if it matches, rewrites it
// through a PatternRewriter, which keeps the UseMap current, hands out unique
// names and tells the driver which operations to look at again. The greedy
// driver applies a set of patterns until nothing matches, revisiting the
// users of changed values and the operands of erased ops instead of
// restarting the scan, and erases operations that became dead on the way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "transforms/UseMap.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace anefit {

/// True if `op` has an effect besides its results (state writes, or nested
/// blocks that contain one); such ops are never erased for being unused.
bool hasSideEffects(const Operation &op);
/// True if no result of `op` is used and it has no side effect.
bool isTriviallyDead(const Operation &op, const UseMap &uses);

/// Hands out value/op names that are unique within one function.
class NameTable {
public:
  explicit NameTable(const Function &fn);
  /// `hint` if unused, else `hint_1`, `hint_2`, ...; the name is reserved.
  std::string unique(std::string_view hint);
  bool contains(const std::string &name) const { return names_.count(name) != 0; }
  void reserve(const std::string &name) { names_.insert(name); }

private:
  std::set<std::string> names_;
};

/// A named parameter for a new operation: one or more values.
struct NewInput {
  std::string name;
  std::vector<Value *> values;
};

class PatternRewriter {
public:
  PatternRewriter(Function &fn, UseMap &uses);
  ~PatternRewriter();

  Function &function() { return fn_; }
  UseMap &uses() { return uses_; }
  NameTable &names() { return names_; }

  /// Creates an op of `type` before `pos`, named uniquely after `nameHint`,
  /// with one result per entry of `resultTypes` (named like the op).
  Operation *create(Operation &pos, std::string type, std::string_view nameHint,
                    std::vector<NewInput> inputs, std::vector<Type> resultTypes);
  /// Creates a const op holding `c` before `pos`; returns its result.
  Value *createConst(Operation &pos, std::string_view nameHint, Constant c);

  /// Replaces every use of `from` with `to`; users are revisited.
  void replaceAllUsesWith(Value *from, Value *to);
  /// Replaces the results of `op` with `values` (same count) and erases it.
  void replaceOp(Operation &op, const std::vector<Value *> &values);
  /// Replaces the single result of `op` with `value`, erases `op`, and gives
  /// `value` and the op defining it the names `op` and its result had, so
  /// that whatever refers to them by name (function outputs, ExecuTorch's
  /// debug-handle map) still finds them.
  void replaceOpKeepingNames(Operation &op, Value *value);
  /// Erases `op` (results must be unused); its operands' producers are revisited.
  void eraseOp(Operation &op);
  bool isErased(const Operation *op) const { return erased_.count(op) != 0; }

  /// Operations the driver should look at again; drained by the driver.
  std::vector<Operation *> takeTouched();

private:
  Function &fn_;
  UseMap &uses_;
  NameTable names_;
  std::vector<Operation *> touched_;
  std::unordered_set<const Operation *> erased_;
  /// Erased ops stay alive until the rewriter dies, so pointers held by the
  /// worklist never dangle or get reused.
  std::vector<std::unique_ptr<Operation>> graveyard_;
  Operation *insert(Block &block, int64_t index, std::unique_ptr<Operation> op);
};

/// Erases the producers of `values` that no longer have a use, and then
/// theirs, transitively (what a rewrite outside the greedy driver leaves
/// dead). Side-effecting ops stay.
void eraseDeadProducers(PatternRewriter &rw, std::vector<Value *> values);

class RewritePattern {
public:
  /// `rootType`: op type this pattern looks at ("" = any). Higher benefit first.
  explicit RewritePattern(std::string rootType, int benefit = 1)
      : rootType_(std::move(rootType)), benefit_(benefit) {}
  virtual ~RewritePattern() = default;
  const std::string &rootType() const { return rootType_; }
  int benefit() const { return benefit_; }
  /// Rewrites `op` and returns true, or returns false leaving the IR untouched.
  virtual bool matchAndRewrite(Operation &op, PatternRewriter &rewriter) const = 0;

private:
  std::string rootType_;
  int benefit_;
};

using PatternList = std::vector<std::unique_ptr<RewritePattern>>;

struct GreedyResult {
  size_t rewrites = 0; ///< successful pattern applications
  size_t erased = 0;   ///< ops erased as dead
  bool converged = true;
};

/// Applies `patterns` to every op of `fn` until none matches (or
/// `maxRewrites` is reached; then converged is false, which is not an error).
GreedyResult applyPatternsGreedily(Function &fn, const PatternList &patterns,
                                   size_t maxRewrites = 1000000);

} // namespace anefit
