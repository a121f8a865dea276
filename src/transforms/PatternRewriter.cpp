//===- PatternRewriter.cpp - Rewrite patterns and the worklist driver -----===//
//
// The rewriter's mutators and the greedy worklist driver (PatternRewriter.h).
//
//===----------------------------------------------------------------------===//
#include "transforms/PatternRewriter.h"

#include "ops/OpRegistry.h"

#include <algorithm>
#include <cassert>

namespace anefit {

bool hasSideEffects(const Operation &op) {
  if (opHasTrait(op.type, OpTrait::StateWrite))
    return true;
  for (const auto &nested : op.blocks) {
    bool effect = false;
    walk(static_cast<const Block &>(*nested), [&](const Operation &inner) {
      if (opHasTrait(inner.type, OpTrait::StateWrite))
        effect = true;
    });
    if (effect)
      return true;
  }
  return false;
}

bool isTriviallyDead(const Operation &op, const UseMap &uses) {
  if (hasSideEffects(op))
    return false;
  for (const auto &out : op.outputs)
    if (uses.hasUses(out.get()))
      return false;
  return true;
}

NameTable::NameTable(const Function &fn) {
  for (const auto &in : fn.inputs)
    names_.insert(in->name);
  walk(static_cast<const Block &>(*fn.body), [&](const Operation &op) {
    names_.insert(op.name);
    for (const auto &out : op.outputs)
      names_.insert(out->name);
    for (const auto &nested : op.blocks)
      for (const auto &in : nested->inputs)
        names_.insert(in->name);
  });
}

std::string NameTable::unique(std::string_view hint) {
  std::string base(hint.empty() ? "v" : hint);
  std::string name = base;
  for (int i = 1; names_.count(name); ++i)
    name = base + "_" + std::to_string(i);
  names_.insert(name);
  return name;
}

PatternRewriter::PatternRewriter(Function &fn, UseMap &uses) : fn_(fn), uses_(uses), names_(fn) {}
PatternRewriter::~PatternRewriter() = default;

Operation *PatternRewriter::insert(Block &block, int64_t index, std::unique_ptr<Operation> op) {
  op->parent = &block;
  auto it = block.ops.insert(block.ops.begin() + index, std::move(op));
  Operation *raw = it->get();
  uses_.notifyInserted(*raw);
  touched_.push_back(raw);
  return raw;
}

static std::unique_ptr<Operation> buildOp(NameTable &names, std::string type,
                                          std::string_view nameHint, std::vector<NewInput> inputs,
                                          std::vector<Type> resultTypes) {
  std::string name = names.unique(nameHint);
  auto op = std::make_unique<Operation>(std::move(type), name);
  for (NewInput &in : inputs) {
    std::vector<Binding> bs;
    for (Value *v : in.values)
      bs.push_back(Binding::of(v));
    op->setInput(std::move(in.name), std::move(bs));
  }
  for (size_t i = 0; i < resultTypes.size(); ++i) {
    // The first result takes the op's name, as coremltools does for
    // single-result ops; further results get their own unique names.
    std::string valueName = i == 0 ? name : names.unique(name + "_" + std::to_string(i));
    op->addOutput(valueName, std::move(resultTypes[i]));
  }
  return op;
}

Operation *PatternRewriter::create(Operation &pos, std::string type, std::string_view nameHint,
                                   std::vector<NewInput> inputs, std::vector<Type> resultTypes) {
  Block &block = *pos.parent;
  int64_t index = block.indexOf(&pos);
  assert(index >= 0 && "insertion point not in its block");
  return insert(
      block, index,
      buildOp(names_, std::move(type), nameHint, std::move(inputs), std::move(resultTypes)));
}

Value *PatternRewriter::createConst(Operation &pos, std::string_view nameHint, Constant c) {
  Type t = c.type;
  Operation *op = create(pos, "const", nameHint, {}, {t});
  op->attributes["val"] = std::make_shared<const Constant>(std::move(c));
  return op->output(0);
}

void PatternRewriter::replaceOpKeepingNames(Operation &op, Value *value) {
  std::string valueName = op.output()->name, opName = op.name;
  replaceOp(op, {value});
  value->name = std::move(valueName);
  value->definingOp->name = std::move(opName);
}

void PatternRewriter::replaceAllUsesWith(Value *from, Value *to) {
  for (Operation *user : uses_.users(from))
    touched_.push_back(user);
  uses_.replaceAllUsesWith(from, to);
}

void PatternRewriter::replaceOp(Operation &op, const std::vector<Value *> &values) {
  assert(values.size() == op.outputs.size() && "replaceOp needs one value per result");
  for (size_t i = 0; i < values.size(); ++i)
    replaceAllUsesWith(op.output(i), values[i]);
  eraseOp(op);
}

void PatternRewriter::eraseOp(Operation &op) {
  for (Value *v : op.operandValues())
    if (v->definingOp)
      touched_.push_back(v->definingOp);
  uses_.notifyRemoved(op);
  Block &block = *op.parent;
  int64_t index = block.indexOf(&op);
  assert(index >= 0 && "erasing an op that is not in its block");
  erased_.insert(&op);
  for (auto &nested : op.blocks)
    walk(*nested, [&](Operation &inner) { erased_.insert(&inner); });
  graveyard_.push_back(std::move(block.ops[index]));
  block.ops.erase(block.ops.begin() + index);
}

std::vector<Operation *> PatternRewriter::takeTouched() {
  std::vector<Operation *> out;
  out.swap(touched_);
  return out;
}

void eraseDeadProducers(PatternRewriter &rw, std::vector<Value *> values) {
  while (!values.empty()) {
    Value *v = values.back();
    values.pop_back();
    Operation *def = v->definingOp;
    if (!def || rw.isErased(def) || !isTriviallyDead(*def, rw.uses()))
      continue;
    std::vector<Value *> next = def->operandValues();
    rw.eraseOp(*def);
    values.insert(values.end(), next.begin(), next.end());
  }
}

GreedyResult applyPatternsGreedily(Function &fn, const PatternList &patterns, size_t maxRewrites) {
  GreedyResult result;
  UseMap uses(fn);
  PatternRewriter rewriter(fn, uses);

  std::vector<const RewritePattern *> ordered;
  for (const auto &p : patterns)
    ordered.push_back(p.get());
  std::stable_sort(
      ordered.begin(), ordered.end(),
      [](const RewritePattern *a, const RewritePattern *b) { return a->benefit() > b->benefit(); });

  std::deque<Operation *> worklist;
  std::unordered_set<Operation *> queued;
  auto push = [&](Operation *op) {
    if (!rewriter.isErased(op) && queued.insert(op).second)
      worklist.push_back(op);
  };
  walk(*fn.body, [&](Operation &op) { push(&op); });

  while (!worklist.empty()) {
    Operation *op = worklist.front();
    worklist.pop_front();
    queued.erase(op);
    if (rewriter.isErased(op))
      continue;

    if (isTriviallyDead(*op, uses)) {
      rewriter.eraseOp(*op);
      ++result.erased;
    } else {
      if (result.rewrites >= maxRewrites) {
        result.converged = false;
        break;
      }
      for (const RewritePattern *p : ordered) {
        if (!p->rootType().empty() && p->rootType() != op->type)
          continue;
        if (p->matchAndRewrite(*op, rewriter)) {
          ++result.rewrites;
          push(op);
          break;
        }
      }
    }
    for (Operation *t : rewriter.takeTouched())
      push(t);
  }
  return result;
}

} // namespace anefit
