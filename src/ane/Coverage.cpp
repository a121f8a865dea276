//===- Coverage.cpp - Which patterns have working evidence ----------------===//
#include "ane/Coverage.h"

#include "ops/OpRegistry.h"
#include "support/DType.h"

namespace anefit::ane {
namespace {

bool constLike(const Operation &op) { return opHasTrait(op.type, OpTrait::ConstLike); }

/// "fp16", "fp32", "int" or "bool": the dtype class of the op's first result.
std::string dtypeClass(const Operation &op) {
  if (op.outputs.empty())
    return "none";
  DType t = op.output()->type.dtype();
  std::string name(dtypeName(t));
  if (name == "fp16" || name == "fp32" || name == "bool")
    return name;
  return "int";
}

/// The compression family of one decompression op: "lut", "sparse",
/// "affine", "shift-scale:per-channel" or "shift-scale:per-block". Storage
/// widths (4, 6, 8 bits) are not part of it: the evidence shows the layout,
/// not the width, deciding placement (per-block falls back where per-channel
/// of the same width runs).
std::string familyOf(const Operation &op) {
  if (op.type == "constexpr_lut_to_dense")
    return "lut";
  if (op.type == "constexpr_sparse_to_dense")
    return "sparse";
  if (op.type == "constexpr_affine_dequantize")
    return "affine";
  if (op.type == "constexpr_blockwise_shift_scale") {
    const Type *data = op.inputType("data");
    const Type *scale = op.inputType("scale");
    if (data && scale && data->rank() == scale->rank())
      for (int64_t i = 0; i < data->rank(); ++i) {
        const Dim &d = data->shape()[size_t(i)], &s = scale->shape()[size_t(i)];
        if (d.isStatic() && s.isStatic() && s.size > 1 && s.size < d.size)
          return "shift-scale:per-block";
      }
    return "shift-scale:per-channel";
  }
  return op.type;
}

/// The decompression chain behind a weight, innermost first:
/// "lut+shift-scale:per-channel"; empty for a plain const.
std::string layoutOf(const Operation &def) {
  std::string out;
  const Operation *op = &def;
  for (int depth = 0; op && constLike(*op) && op->type != "const" && depth < 4; ++depth) {
    out = out.empty() ? familyOf(*op) : familyOf(*op) + "+" + out;
    const Operation *next = nullptr;
    for (const Value *v : op->operandValues())
      if (v->definingOp && constLike(*v->definingOp) && v->definingOp->type != "const")
        next = v->definingOp;
    op = next;
  }
  return out;
}

bool runtimeValue(const Value *v) { return v && !(v->definingOp && constLike(*v->definingOp)); }

} // namespace

OpPattern opPattern(const Operation &op) {
  OpPattern p;
  p.key = op.type + " " + dtypeClass(op);
  bool stateOp =
      opHasTrait(op.type, OpTrait::StateRead) || opHasTrait(op.type, OpTrait::StateWrite);
  for (const Value *v : op.operandValues()) {
    if (v->type.isState()) {
      stateOp = true;
      const auto &shape = v->type.shape();
      if (!shape.empty() && shape.back().isStatic()) {
        int64_t inner = shape.back().size;
        p.key += inner < 32 ? " state=narrow" : inner % 32 ? " state=unaligned" : " state=aligned";
      }
    }
    if (v->definingOp && constLike(*v->definingOp)) {
      std::string layout = layoutOf(*v->definingOp);
      if (!layout.empty()) {
        p.key += " weight=" + layout;
        p.risky = true;
      }
    }
  }
  if (stateOp)
    p.risky = true;
  // Updates and gathers at an index computed at run time.
  for (std::string_view param : {"begin", "end", "indices"}) {
    const OpInput *in = op.input(param);
    if (!in)
      continue;
    for (const Binding &b : in->bindings)
      if (b.isValue() && runtimeValue(b.value)) {
        p.key += " index=runtime";
        p.risky = true;
        if (op.type == "slice_update" || op.type.rfind("scatter", 0) == 0) {
          const Value *x = op.input("x") && !op.input("x")->bindings.empty()
                               ? op.input("x")->bindings.front().value
                               : nullptr;
          if (x && x->isBlockInput())
            p.key += " into=input";
          else if (x && x->definingOp && opHasTrait(x->definingOp->type, OpTrait::StateRead))
            p.key += " into=state";
        }
        goto indexed;
      }
  }
indexed:
  for (const auto &v : op.outputs) {
    for (const Dim &d : v->type.shape())
      if (d.isStatic() && d.size > 16384) {
        p.key += " wide";
        p.risky = true;
        return p;
      }
  }
  return p;
}

void Coverage::add(const Program &program) {
  for (const auto &fn : program.functions) {
    std::vector<const Block *> blocks{fn->body.get()};
    while (!blocks.empty()) {
      const Block *b = blocks.back();
      blocks.pop_back();
      for (const auto &op : b->ops) {
        if (!constLike(*op))
          keys.insert(opPattern(*op).key);
        for (const auto &inner : op->blocks)
          blocks.push_back(inner.get());
      }
    }
  }
}

const Coverage &builtinCoverage() {
  static const Coverage c = [] {
    Coverage out;
    static constexpr const char *kKeys[] = {
#define COVERED(Key) Key,
#include "ane/Coverage.def"
#undef COVERED
        nullptr};
    for (const char *k : kKeys)
      if (k)
        out.keys.insert(k);
    return out;
  }();
  return c;
}

std::string coverageTable(const Coverage &c) {
  std::string out =
      "//===- Coverage.def - Op patterns with working evidence ----------*- C++ -*-===//\n"
      "//\n"
      "// Generated from the working cases of the evidence corpus by\n"
      "//   anefit rules --format coverage --evidence tests/fixtures/evidence\n"
      "// (src/ane/Coverage.h says what a pattern is); do not edit by hand.\n"
      "//\n"
      "//===----------------------------------------------------------------------===//\n\n";
  for (const std::string &k : c.keys) {
    std::string escaped;
    for (char ch : k)
      escaped += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    out += "COVERED(\"" + escaped + "\")\n";
  }
  return out;
}

} // namespace anefit::ane
