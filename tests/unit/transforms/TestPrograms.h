//===- TestPrograms.h - Building small programs for pass tests --*- C++ -*-===//
//
// A terse builder for the programs the transforms tests rewrite, so each test
// reads like the MIL it builds, plus a few lookups over the result.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"

#include <memory>
#include <string>
#include <vector>

namespace anefit::test {

inline Type f16(std::vector<int64_t> shape) { return Type::tensor(DType::F16, shape); }
inline Type f32(std::vector<int64_t> shape) { return Type::tensor(DType::F32, shape); }
inline Type i32(std::vector<int64_t> shape) { return Type::tensor(DType::I32, shape); }

/// Builds one function's body op by op.
class FnBuilder {
public:
  explicit FnBuilder(Function &fn) : fn(fn) {}
  Function &fn;

  Value *input(const std::string &name, Type t) { return fn.addInput(name, std::move(t)); }
  Value *state(const std::string &name, Type t) { return fn.addInput(name, Type::state(t)); }

  /// An op with one result named like the op.
  Value *op(const std::string &type, const std::string &name,
            std::vector<std::pair<std::string, std::vector<Value *>>> inputs, Type result) {
    Operation *o = raw(type, name, std::move(inputs));
    return o->addOutput(name, std::move(result));
  }
  /// An op without results (write_state).
  Operation *raw(const std::string &type, const std::string &name,
                 std::vector<std::pair<std::string, std::vector<Value *>>> inputs) {
    auto o = std::make_unique<Operation>(type, name);
    for (auto &[param, values] : inputs) {
      std::vector<Binding> bs;
      for (Value *v : values)
        bs.push_back(Binding::of(v));
      o->setInput(param, std::move(bs));
    }
    return fn.body->append(std::move(o));
  }
  Value *constant(const std::string &name, Constant c) {
    Type t = c.type;
    Operation *o = raw("const", name, {});
    o->attributes["val"] = std::make_shared<const Constant>(std::move(c));
    return o->addOutput(name, t);
  }
  Value *ints(const std::string &name, std::vector<int32_t> v) {
    int64_t n = static_cast<int64_t>(v.size());
    return constant(name, Constant::fromI32(std::move(v), {n}));
  }
  Value *scalarInt(const std::string &name, int32_t v) {
    return constant(name, Constant::scalarI32(v));
  }
  Value *read(const std::string &name, Value *state) {
    return op("read_state", name, {{"input", {state}}}, state->type.elementType());
  }
  void write(const std::string &name, Value *state, Value *data) {
    raw("write_state", name, {{"input", {state}}, {"data", {data}}});
  }
  Value *concat(const std::string &name, std::vector<Value *> values, int32_t axis, Type t) {
    Value *a = scalarInt(name + "_axis", axis);
    Value *i = constant(name + "_interleave", Constant::scalarBool(false));
    return op("concat", name, {{"values", values}, {"axis", {a}}, {"interleave", {i}}}, t);
  }
  Value *slice(const std::string &name, Value *x, std::vector<int32_t> b, std::vector<int32_t> e,
               Type t) {
    Value *bv = ints(name + "_begin", std::move(b));
    Value *ev = ints(name + "_end", std::move(e));
    return op("slice_by_index", name, {{"x", {x}}, {"begin", {bv}}, {"end", {ev}}}, t);
  }
  void output(Value *v) { fn.body->outputs.push_back(v); }
};

/// A model with spec 9, opset CoreML8 and a description mirroring `fn`'s
/// inputs (tensors / states) and outputs, as coremltools writes it.
inline void describe(Model &m) {
  auto feature = [](const Value &v) {
    FeatureDescription f;
    f.name = v.name;
    const Type &t = v.type;
    f.type.kind = t.isState() ? FeatureType::Kind::State : FeatureType::Kind::MultiArray;
    f.type.shape = t.staticShape().value_or(std::vector<int64_t>{});
    f.type.dataType = arrayDataTypeOf(t.dtype()).value_or(ArrayDataType::Invalid);
    return f;
  };
  bool multi = m.program->functions.size() > 1;
  for (auto &fn : m.program->functions) {
    FunctionDescription d;
    d.name = fn->name;
    for (auto &in : fn->inputs)
      (in->type.isState() ? d.states : d.inputs).push_back(feature(*in));
    for (Value *out : fn->body->outputs)
      d.outputs.push_back(feature(*out));
    if (multi)
      m.description.functions.push_back(d);
    if (fn->name == "main" || !multi) {
      m.description.inputs = d.inputs;
      m.description.outputs = d.outputs;
      m.description.states = d.states;
    }
  }
  if (multi)
    m.description.defaultFunctionName = "main";
}

inline std::unique_ptr<Model> newModel() {
  auto m = std::make_unique<Model>();
  m->specificationVersion = 9;
  m->program = std::make_unique<Program>();
  return m;
}

inline Function &newFunction(Model &m, const std::string &name) {
  Function *f = m.program->addFunction(name);
  f->opset = "CoreML8";
  return *f;
}

/// Number of ops of `type` in `fn` (nested blocks included).
inline int countOps(const Function &fn, const std::string &type) {
  int n = 0;
  walk(static_cast<const Block &>(*fn.body), [&](const Operation &op) { n += op.type == type; });
  return n;
}

inline std::vector<std::string> outputNames(const Function &fn) {
  std::vector<std::string> names;
  for (Value *v : fn.body->outputs)
    names.push_back(v->name);
  return names;
}

inline std::vector<std::string> featureNames(const std::vector<FeatureDescription> &fs) {
  std::vector<std::string> names;
  for (const auto &f : fs)
    names.push_back(f.name);
  return names;
}

} // namespace anefit::test
