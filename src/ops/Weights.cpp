//===- Weights.cpp - Count a program's weights from their types -----------===//
//
// Stored sizes come from the constants themselves (const values, and the
// constants bound to constexpr_* ops or bound directly as weight-file blobs);
// dense sizes from the values compute ops consume. Only types are read.
// Which ops are constants and which decompress a weight is the op table's
// trait ConstLike (Ops.def).
//
//===----------------------------------------------------------------------===//
#include "ops/Weights.h"

#include "ops/OpRegistry.h"
#include "support/DType.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace anefit {

std::string_view weightSchemeName(WeightScheme s) {
  static constexpr std::array<std::string_view, kWeightSchemes> kNames = {
      "dense", "palettized", "sparse", "blockwise", "per-channel", "cast"};
  return kNames[static_cast<size_t>(s)];
}

namespace {

/// A constant or a weight decompressed at load time (Ops.def: ConstLike).
bool isConstLike(const Operation &op) { return opHasTrait(op.type, OpTrait::ConstLike); }

/// A const-like op that decompresses a weight (constexpr_*).
bool isConstexpr(const Operation &op) { return decompressesWeights(op.type); }

/// The type bound to `param`: an input, or an attribute (constexpr ops
/// before iOS18 hold their parameters as attributes).
const Type *paramType(const Operation &op, std::string_view param) {
  if (const Type *t = op.inputType(param))
    return t;
  const Constant *c = op.attribute(param);
  return c ? &c->type : nullptr;
}

/// A scale with a dim strictly between 1 and the data's dim quantizes that
/// axis in blocks; otherwise the scales are per channel (or per tensor).
bool hasBlockScales(const Operation &op) {
  const Type *data = paramType(op, "data");
  const Type *scale = paramType(op, "scale");
  auto ds = data ? data->staticShape() : std::nullopt;
  auto ss = scale ? scale->staticShape() : std::nullopt;
  if (!ds || !ss || ds->size() != ss->size())
    return false;
  for (size_t i = 0; i < ds->size(); ++i)
    if ((*ss)[i] != 1 && (*ss)[i] != (*ds)[i])
      return true;
  return false;
}

} // namespace

WeightScheme weightSchemeOf(const Operation &op) {
  const std::string &t = op.type;
  if (t == "constexpr_lut_to_dense")
    return WeightScheme::Palettized;
  if (t == "constexpr_sparse_to_dense" || t == "constexpr_lut_to_sparse" ||
      t == "constexpr_sparse_blockwise_shift_scale")
    return WeightScheme::Sparse;
  if (t == "constexpr_blockwise_shift_scale")
    return hasBlockScales(op) ? WeightScheme::Blockwise : WeightScheme::PerChannel;
  if (t == "constexpr_affine_dequantize")
    return WeightScheme::PerChannel;
  if (t == "constexpr_cast")
    return WeightScheme::Cast;
  return WeightScheme::Dense;
}

namespace {

/// Elements of a tensor type with a static shape; nullopt otherwise.
std::optional<uint64_t> tensorElements(const Type &t) {
  if (!t.isTensor() || t.dtype() == DType::String)
    return std::nullopt;
  auto n = t.numElements();
  if (!n || *n < 0)
    return std::nullopt;
  return static_cast<uint64_t>(*n);
}

class Counter {
public:
  explicit Counter(WeightCount &out) : out(out) {}

  void function(const Function &fn) {
    std::vector<const Operation *> ops;
    walk(*fn.body, [&](const Operation &op) { ops.push_back(&op); });
    run(ops);
  }

  /// Counts `ops` (in program order); consumers outside `ops` are not seen.
  void run(const std::vector<const Operation *> &ops) {
    // Consumers of every value, to find what a const feeds.
    for (const Operation *op : ops)
      for (const Value *v : op->operandValues())
        users[v].push_back(op);
    for (const Operation *op : ops)
      visit(*op);
  }

private:
  WeightCount &out;
  std::unordered_map<const Value *, std::vector<const Operation *>> users;
  std::set<std::pair<std::string, uint64_t>> blobs;
  std::unordered_set<const void *> seenStored, seenDense;

  /// Counts `c` as stored once (blobs by file and offset, others by identity).
  void stored(const Constant &c, const Type &type, WeightScheme scheme, const void *identity) {
    if (!c.isTensorLike())
      return;
    if (c.kind == Constant::Kind::Blob) {
      if (!blobs.insert({c.blob.fileName, c.blob.offset}).second)
        return;
    } else if (!seenStored.insert(identity).second) {
      return;
    }
    auto n = tensorElements(type);
    if (!n)
      return;
    uint64_t bytes = storageBytes(type.dtype(), *n);
    out.storedElements += *n;
    out.storedBytes += bytes;
    WeightTally &d = out.byDType[std::string(dtypeName(type.dtype()))];
    d.elements += *n;
    d.bytes += bytes;
    WeightTally &s = out.byScheme[static_cast<size_t>(scheme)];
    s.elements += *n;
    s.bytes += bytes;
  }

  /// Counts a weight value a compute op reads, once.
  void dense(const Type &type, const void *identity) {
    if (!seenDense.insert(identity).second)
      return;
    if (auto n = tensorElements(type)) {
      out.denseElements += *n;
      out.denseBytes += storageBytes(type.dtype(), *n);
    }
  }

  void visit(const Operation &op) {
    if (isConstLike(op) && !isConstexpr(op)) {
      const Constant *val = op.attribute("val");
      if (!val || op.outputs.empty())
        return;
      const Value *result = op.output();
      WeightScheme scheme = WeightScheme::Dense;
      auto it = users.find(result);
      if (it != users.end())
        for (const Operation *u : it->second)
          if (isConstexpr(*u)) {
            scheme = weightSchemeOf(*u);
            break;
          }
      stored(*val, result->type, scheme, &op);
      return;
    }
    bool constexprOp = isConstexpr(op);
    WeightScheme scheme = constexprOp ? weightSchemeOf(op) : WeightScheme::Dense;
    for (const OpInput &in : op.inputs)
      for (const Binding &b : in.bindings) {
        if (b.isValue()) {
          const Operation *def = b.value->definingOp;
          if (!constexprOp && def && isConstLike(*def))
            dense(b.value->type, b.value);
          continue;
        }
        // Immediate constants bound to compute ops are parameters (pads,
        // axes); weight-file blobs and constexpr payloads are weights.
        if (b.constant && (constexprOp || b.constant->kind == Constant::Kind::Blob)) {
          stored(*b.constant, b.constant->type, scheme, b.constant.get());
          if (!constexprOp)
            dense(b.constant->type, b.constant.get());
        }
      }
    if (constexprOp)
      for (const auto &[key, c] : op.attributes)
        if (c)
          stored(*c, c->type, scheme, c.get());
  }
};

/// Adds the const-like producers of `op`'s operands to `out`, transitively.
void addProducers(const Operation &op, std::vector<const Operation *> &out,
                  std::unordered_set<const Operation *> &seen) {
  for (const Value *v : op.operandValues()) {
    const Operation *def = v->definingOp;
    if (def && isConstLike(*def) && seen.insert(def).second) {
      addProducers(*def, out, seen);
      out.push_back(def);
    }
  }
}

} // namespace

WeightCount countWeightsOf(std::span<const Operation *const> ops) {
  std::vector<const Operation *> closure;
  std::unordered_set<const Operation *> seen;
  for (const Operation *op : ops)
    if (op && !isConstLike(*op)) {
      addProducers(*op, closure, seen);
      if (seen.insert(op).second)
        closure.push_back(op);
    }
  WeightCount out;
  Counter(out).run(closure);
  return out;
}

WeightCount countWeights(const Program &program, const Function *only) {
  WeightCount out;
  Counter counter(out);
  for (const auto &fn : program.functions)
    if (!only || fn.get() == only)
      counter.function(*fn);
  return out;
}

} // namespace anefit
