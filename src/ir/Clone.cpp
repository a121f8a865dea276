//===- Clone.cpp - Deep copies of operations ------------------------------===//
#include "ir/Clone.h"

namespace anefit {

std::unique_ptr<Operation> cloneOperation(const Operation &op, ValueMapping &mapping) {
  auto copy = std::make_unique<Operation>(op.type, op.name);
  copy->attributes = op.attributes;
  for (const OpInput &in : op.inputs) {
    OpInput c{in.name, {}};
    for (const Binding &b : in.bindings) {
      if (!b.isValue()) {
        c.bindings.push_back(b);
        continue;
      }
      auto it = mapping.find(b.value);
      c.bindings.push_back(Binding::of(it == mapping.end() ? b.value : it->second));
    }
    copy->inputs.push_back(std::move(c));
  }
  for (const auto &out : op.outputs)
    mapping[out.get()] = copy->addOutput(out->name, out->type);
  for (const auto &block : op.blocks) {
    Block *nb = copy->addBlock();
    nb->attributes = block->attributes;
    for (const auto &in : block->inputs)
      mapping[in.get()] = nb->addInput(in->name, in->type);
    for (const auto &inner : block->ops)
      nb->append(cloneOperation(*inner, mapping));
    for (const Value *v : block->outputs) {
      auto it = mapping.find(v);
      nb->outputs.push_back(it == mapping.end() ? const_cast<Value *>(v) : it->second);
    }
  }
  return copy;
}

} // namespace anefit
