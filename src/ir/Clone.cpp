//===- Clone.cpp - Deep copies of operations and models -------------------===//
#include "ir/Clone.h"

namespace anefit {
namespace {

/// Copies the ops, outputs and attributes of `from` into the empty `to`.
void cloneBlockInto(const Block &from, Block &to, ValueMapping &mapping) {
  to.attributes = from.attributes;
  for (const auto &in : from.inputs)
    mapping[in.get()] = to.addInput(in->name, in->type);
  for (const auto &op : from.ops)
    to.append(cloneOperation(*op, mapping));
  for (const Value *v : from.outputs) {
    auto it = mapping.find(v);
    to.outputs.push_back(it == mapping.end() ? const_cast<Value *>(v) : it->second);
  }
}

} // namespace

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
  for (const auto &block : op.blocks)
    cloneBlockInto(*block, *copy->addBlock(), mapping);
  return copy;
}

std::unique_ptr<Program> cloneProgram(const Program &program) {
  auto copy = std::make_unique<Program>();
  copy->version = program.version;
  copy->docString = program.docString;
  copy->attributes = program.attributes;
  for (const auto &fn : program.functions) {
    Function *f = copy->addFunction(fn->name);
    f->opset = fn->opset;
    f->attributes = fn->attributes;
    ValueMapping mapping;
    for (const auto &in : fn->inputs)
      mapping[in.get()] = f->addInput(in->name, in->type);
    cloneBlockInto(*fn->body, *f->body, mapping);
    for (const auto &[key, block] : fn->otherSpecializations) {
      auto b = std::make_unique<Block>();
      b->parentFunc = f;
      cloneBlockInto(*block, *b, mapping);
      f->otherSpecializations.emplace(key, std::move(b));
    }
  }
  return copy;
}

std::unique_ptr<Model> cloneModel(const Model &model) {
  auto copy = std::make_unique<Model>();
  copy->specificationVersion = model.specificationVersion;
  copy->description = model.description;
  copy->isUpdatable = model.isUpdatable;
  if (model.program)
    copy->program = cloneProgram(*model.program);
  copy->sourcePath = model.sourcePath;
  copy->weightFiles = model.weightFiles;
  copy->origin = model.origin;
  copy->debugHandles = model.debugHandles;
  copy->hostWriteBacks = model.hostWriteBacks;
  copy->hostWriteBackError = model.hostWriteBackError;
  return copy;
}

} // namespace anefit
