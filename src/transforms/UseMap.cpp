//===- UseMap.cpp - Who uses each value, built on demand ------------------===//
//
// Builds and maintains the value -> uses index described in UseMap.h.
//
//===----------------------------------------------------------------------===//
#include "transforms/UseMap.h"

#include <algorithm>
#include <cassert>

namespace anefit {

UseMap::UseMap(Function &fn) {
  for (auto &op : fn.body->ops)
    addOpUses(*op);
  addBlockUses(*fn.body);
}

void UseMap::addOpUses(Operation &op) {
  for (size_t i = 0; i < op.inputs.size(); ++i)
    for (size_t j = 0; j < op.inputs[i].bindings.size(); ++j)
      if (Value *v = op.inputs[i].bindings[j].value)
        uses_[v].push_back(Use{&op, i, j, nullptr, 0});
  for (auto &nested : op.blocks) {
    for (auto &inner : nested->ops)
      addOpUses(*inner);
    addBlockUses(*nested);
  }
}

void UseMap::addBlockUses(Block &block) {
  for (size_t k = 0; k < block.outputs.size(); ++k)
    if (Value *v = block.outputs[k])
      uses_[v].push_back(Use{nullptr, 0, 0, &block, k});
}

const std::vector<Use> &UseMap::uses(const Value *v) const {
  static const std::vector<Use> kNone;
  auto it = uses_.find(v);
  return it == uses_.end() ? kNone : it->second;
}

std::vector<Operation *> UseMap::users(const Value *v) const {
  std::vector<Operation *> out;
  for (const Use &u : uses(v))
    if (u.user && std::find(out.begin(), out.end(), u.user) == out.end())
      out.push_back(u.user);
  return out;
}

void UseMap::replaceAllUsesWith(Value *from, Value *to) {
  if (from == to)
    return;
  auto it = uses_.find(from);
  if (it == uses_.end())
    return;
  std::vector<Use> moved = std::move(it->second);
  uses_.erase(it);
  for (const Use &u : moved) {
    if (u.user)
      u.user->inputs[u.input].bindings[u.binding].value = to;
    else
      u.block->outputs[u.outputIndex] = to;
  }
  std::vector<Use> &dest = uses_[to];
  dest.insert(dest.end(), moved.begin(), moved.end());
}

void UseMap::setOperand(Operation &op, size_t input, size_t binding, Value *v) {
  Binding &b = op.inputs.at(input).bindings.at(binding);
  if (b.value) {
    auto &list = uses_[b.value];
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const Use &u) {
                                return u.user == &op && u.input == input && u.binding == binding;
                              }),
               list.end());
  }
  b.value = v;
  b.constant = nullptr;
  if (v)
    uses_[v].push_back(Use{&op, input, binding, nullptr, 0});
}

void UseMap::notifyInserted(Operation &op) { addOpUses(op); }

void UseMap::notifyRemoved(Operation &op) {
  for (Value *v : op.operandValues()) {
    auto it = uses_.find(v);
    if (it == uses_.end())
      continue;
    auto &list = it->second;
    list.erase(
        std::remove_if(list.begin(), list.end(), [&](const Use &u) { return u.user == &op; }),
        list.end());
  }
  for (auto &nested : op.blocks) {
    for (auto &inner : nested->ops)
      notifyRemoved(*inner);
    for (Value *v : nested->outputs) {
      auto it = uses_.find(v);
      if (it == uses_.end())
        continue;
      auto &list = it->second;
      Block *b = nested.get();
      list.erase(
          std::remove_if(list.begin(), list.end(), [&](const Use &u) { return u.block == b; }),
          list.end());
    }
  }
  // Results of a removed op can have no uses left worth keeping.
  for (auto &out : op.outputs)
    uses_.erase(out.get());
}

void UseMap::erase(Operation &op) {
  notifyRemoved(op);
  assert(op.parent && "erasing an op without a block");
  op.parent->erase(&op);
}

} // namespace anefit
