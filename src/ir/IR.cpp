//===- IR.cpp - The in-memory form of a MIL program -----------------------===//
#include "ir/IR.h"

#include <algorithm>
#include <cassert>

namespace anefit {

const OpInput *Operation::input(std::string_view param) const {
  for (const OpInput &in : inputs)
    if (in.name == param)
      return &in;
  return nullptr;
}

OpInput *Operation::input(std::string_view param) {
  for (OpInput &in : inputs)
    if (in.name == param)
      return &in;
  return nullptr;
}

Value *Operation::inputValue(std::string_view param) const {
  const OpInput *in = input(param);
  if (!in || in->bindings.size() != 1)
    return nullptr;
  return in->bindings[0].value;
}

const Type *Operation::inputType(std::string_view param) const {
  const OpInput *in = input(param);
  if (!in || in->bindings.size() != 1)
    return nullptr;
  const Binding &b = in->bindings[0];
  if (b.isValue())
    return &b.value->type;
  return b.constant ? &b.constant->type : nullptr;
}

const Constant *Operation::constInput(std::string_view param) const {
  const OpInput *in = input(param);
  if (!in || in->bindings.size() != 1)
    return nullptr;
  const Binding &b = in->bindings[0];
  if (!b.isValue())
    return b.constant.get();
  const Operation *def = b.value->definingOp;
  if (def && def->type == "const")
    return def->attribute("val");
  return nullptr;
}

std::vector<Value *> Operation::operandValues() const {
  std::vector<Value *> out;
  for (const OpInput &in : inputs)
    for (const Binding &b : in.bindings)
      if (b.isValue())
        out.push_back(b.value);
  return out;
}

void Operation::setInput(std::string param, Binding b) {
  setInput(std::move(param), std::vector<Binding>{std::move(b)});
}

void Operation::setInput(std::string param, std::vector<Binding> bs) {
  if (OpInput *in = input(param)) {
    in->bindings = std::move(bs);
    return;
  }
  inputs.push_back(OpInput{std::move(param), std::move(bs)});
}

void Operation::removeInput(std::string_view param) {
  inputs.erase(std::remove_if(inputs.begin(), inputs.end(),
                              [&](const OpInput &in) { return in.name == param; }),
               inputs.end());
}

Value *Operation::addOutput(std::string valueName, Type type) {
  outputs.push_back(std::make_unique<Value>(std::move(valueName), std::move(type)));
  outputs.back()->definingOp = this;
  return outputs.back().get();
}

Block *Operation::addBlock() {
  blocks.push_back(std::make_unique<Block>());
  blocks.back()->parentOp = this;
  return blocks.back().get();
}

const Constant *Operation::attribute(std::string_view key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? nullptr : it->second.get();
}

Function *Operation::parentFunction() const { return parent ? parent->function() : nullptr; }

Value *Block::addInput(std::string name, Type type) {
  inputs.push_back(std::make_unique<Value>(std::move(name), std::move(type)));
  inputs.back()->ownerBlock = this;
  return inputs.back().get();
}

Operation *Block::append(std::unique_ptr<Operation> op) {
  op->parent = this;
  ops.push_back(std::move(op));
  return ops.back().get();
}

int64_t Block::indexOf(const Operation *op) const {
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].get() == op)
      return static_cast<int64_t>(i);
  return -1;
}

Operation *Block::insertBefore(const Operation *pos, std::unique_ptr<Operation> op) {
  int64_t i = indexOf(pos);
  assert(i >= 0 && "insertion point not in this block");
  op->parent = this;
  auto it = ops.insert(ops.begin() + i, std::move(op));
  return it->get();
}

Operation *Block::insertAfter(const Operation *pos, std::unique_ptr<Operation> op) {
  int64_t i = indexOf(pos);
  assert(i >= 0 && "insertion point not in this block");
  op->parent = this;
  auto it = ops.insert(ops.begin() + i + 1, std::move(op));
  return it->get();
}

void Block::erase(const Operation *op) {
  int64_t i = indexOf(op);
  assert(i >= 0 && "erasing an op that is not in this block");
  ops.erase(ops.begin() + i);
}

Function *Block::function() const {
  const Block *b = this;
  while (b->parentOp && b->parentOp->parent)
    b = b->parentOp->parent;
  return b->parentFunc;
}

Value *Function::addInput(std::string name, Type type) {
  inputs.push_back(std::make_unique<Value>(std::move(name), std::move(type)));
  inputs.back()->ownerBlock = body.get();
  return inputs.back().get();
}

Value *Function::findInput(std::string_view name) const {
  for (const auto &v : inputs)
    if (v->name == name)
      return v.get();
  return nullptr;
}

Function *Program::findFunction(std::string_view name) const {
  for (const auto &f : functions)
    if (f->name == name)
      return f.get();
  return nullptr;
}

Function *Program::addFunction(std::string name) {
  functions.push_back(std::make_unique<Function>(std::move(name)));
  return functions.back().get();
}

int opsetNumber(std::string_view opset) {
  if (opset.size() < 7 || opset.substr(0, 6) != "CoreML")
    return 0;
  int n = 0;
  for (char c : opset.substr(6)) {
    if (c < '0' || c > '9')
      return 0;
    n = n * 10 + (c - '0');
    if (n > 1000)
      return 0;
  }
  return n;
}

} // namespace anefit
