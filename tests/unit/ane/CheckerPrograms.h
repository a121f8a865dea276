//===- CheckerPrograms.h - Programs built in C++ for checker tests -*- C++ -*-===//
//
// A builder of one-function programs op by op, the programs several checker
// tests share, and the questions they ask of a report. Used by the ane tests
// and by the report tests that print the same programs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anefit::ane::test {

/// Builds a one-function model op by op.
struct ProgramBuilder {
  Model model;
  Function *fn;

  ProgramBuilder() {
    model.program = std::make_unique<Program>();
    fn = model.program->addFunction("main");
    fn->opset = "CoreML8";
  }

  Value *input(const std::string &name, Type t) { return fn->addInput(name, std::move(t)); }

  Value *constant(const std::string &name, Constant c) {
    auto op = std::make_unique<Operation>("const", name);
    Type t = c.type;
    op->attributes["val"] = std::make_shared<Constant>(std::move(c));
    Value *v = op->addOutput(name, t);
    fn->body->append(std::move(op));
    return v;
  }

  /// Appends `type` named `name` with the given parameters and one result.
  Value *op(const std::string &type, const std::string &name,
            std::vector<std::pair<std::string, Binding>> params, Type result) {
    auto op = std::make_unique<Operation>(type, name);
    for (auto &[param, b] : params)
      op->setInput(param, b);
    Value *v = op->addOutput(name, std::move(result));
    fn->body->append(std::move(op));
    return v;
  }

  void output(Value *v) { fn->body->outputs.push_back(v); }
};

inline Binding imm(Constant c) { return Binding::of(std::make_shared<Constant>(std::move(c))); }
inline Binding val(Value *v) { return Binding::of(v); }
inline Type f16(std::vector<int64_t> shape) { return Type::tensor(DType::F16, shape); }

inline std::vector<const Finding *> findingsOf(const CheckReport &r, std::string_view code) {
  std::vector<const Finding *> out;
  for (const Finding &f : r.findings)
    if (ruleInfo(f.rule).code == code)
      out.push_back(&f);
  return out;
}

inline bool fires(const CheckReport &r, std::string_view code) {
  return !findingsOf(r, code).empty();
}

inline const OpReport *opNamed(const CheckReport &r, const std::string &name) {
  for (const FunctionReport &f : r.functions)
    for (const OpReport &o : f.ops)
      if (o.name == name)
        return &o;
  return nullptr;
}

/// A short-conv block in the exported form: the rolling buffer is a state,
/// extended with concat and cut back with slice_by_index.
inline void buildShortConv(ProgramBuilder &b, int64_t dim, int index = 0) {
  std::string s = std::to_string(index);
  Value *state = b.input("conv_state_" + s, Type::state(f16({1, dim, 2})));
  Value *x = b.input("bx_" + s, f16({1, dim, 1}));
  Value *old = b.op("read_state", "read_state_" + s, {{"input", val(state)}}, f16({1, dim, 2}));
  Value *padded =
      b.op("concat", "aten_cat_default_" + s,
           {{"values", val(old)}, {"axis", imm(Constant::scalarI32(2))}}, f16({1, dim, 3}));
  b.fn->body->ops.back()->input("values")->bindings.push_back(val(x));
  Value *next = b.op("slice_by_index", "aten_slice_copy_tensor_" + s,
                     {{"x", val(padded)},
                      {"begin", imm(Constant::fromI32({0, 0, 1}, {3}))},
                      {"end", imm(Constant::fromI32({1, (int32_t)dim, 3}, {3}))}},
                     f16({1, dim, 2}));
  b.op("coreml_update_state", "aten_copy_default_" + s,
       {{"state", val(state)}, {"value", val(next)}}, f16({1, dim, 2}));
  Value *y =
      b.op("reduce_sum", "sum_" + s,
           {{"x", val(padded)}, {"axes", imm(Constant::fromI32({2}, {1}))}}, f16({1, dim, 1}));
  b.output(y);
}

/// The ExecuTorch export shape of a KV cache write: the cache is a plain
/// input, written in-graph by slice_update at the position input `pos`
/// (`runtimeBegin`) or at a constant one.
inline void buildCacheWrite(ProgramBuilder &b, bool runtimeBegin) {
  Value *cache = b.input("k_cache", f16({1, 8, 256, 64}));
  Value *k = b.input("k", f16({1, 8, 1, 64}));
  Value *pos = b.input("pos", Type::tensor(DType::I32, std::vector<int64_t>{4}));
  Binding begin = runtimeBegin ? val(pos) : imm(Constant::fromI32({0, 0, 5, 0}, {4}));
  Value *upd = b.op("slice_update", "aten_index_put_default_3",
                    {{"x", val(cache)},
                     {"update", val(k)},
                     {"begin", begin},
                     {"end", imm(Constant::fromI32({1, 8, 6, 64}, {4}))}},
                    f16({1, 8, 256, 64}));
  b.output(upd);
}

/// Ops a user file may hold that are odd but parse: without results, with
/// several bindings where one is expected, of an unknown type.
inline void buildOddOps(ProgramBuilder &b) {
  Value *x = b.input("x", f16({2, 8, 4, 4}));
  Value *s = b.input("s", Type::state(f16({1, 8, 2})));
  auto bare = [&](const std::string &type, std::vector<std::pair<std::string, Binding>> params) {
    auto op = std::make_unique<Operation>(type, type + "_bare");
    for (auto &[param, bind] : params)
      op->setInput(param, bind);
    b.fn->body->append(std::move(op));
  };
  bare("cast", {{"x", val(x)}});
  bare("read_state", {{"input", val(s)}});
  bare("constexpr_blockwise_shift_scale", {{"data", val(x)}, {"scale", val(x)}});
  bare("reduce_argmax", {{"x", val(x)}, {"axis", imm(Constant::scalarI32(99))}});
  auto conv = std::make_unique<Operation>("conv", "conv_two_weights");
  conv->setInput("x", val(x));
  conv->setInput("weight", std::vector<Binding>{val(x), val(x)});
  conv->addOutput("conv_two_weights", f16({2, 8, 4, 4}));
  b.fn->body->append(std::move(conv));
  b.op("no_such_op", "mystery", {{"x", val(x)}}, Type::unranked(DType::F16));
  b.output(x);
}

/// The verdict and findings of `r`, one line each, for a failed test to show.
inline std::string findingsText(const CheckReport &r) {
  std::string out = "verdict " + std::string(verdictName(r.verdict)) + "\n";
  for (const Finding &f : r.findings)
    out += std::string(levelName(f.level())) + " " + std::string(ruleInfo(f.rule).code) + " '" +
           f.op + "': " + f.message + "\n";
  return out;
}

} // namespace anefit::ane::test
