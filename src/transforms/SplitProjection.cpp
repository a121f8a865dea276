//===- SplitProjection.cpp - Wide projections in ANE-sized pieces ---------===//
//
// A linear whose output row exceeds the ANE's matmul kernel memory
// (ANE-CONV-006: an LLM's vocabulary projection) becomes linears over
// consecutive row ranges of its weight, each within that limit and the
// tensor extent every chip takes (ANE-SHAPE-002), joined by a
// concat along the last axis that keeps the original result's name. Each
// piece's weight is the same rows of the same stored form (a const, or a
// constexpr_blockwise_shift_scale with its scales and offsets cut at the
// same rows, or a constexpr_lut_to_dense with its palettes cut at the same
// row groups), so the result is exactly the original's.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "ane/Limits.h"
#include "support/DType.h"
#include "support/Error.h"
#include "transforms/Builders.h"
#include "transforms/PassImpl.h"
#include "transforms/WeightData.h"

#include <numeric>

namespace anefit {
namespace {

class SplitProjectionPass : public Pass {
public:
  explicit SplitProjectionPass(const PassOptions &options) {
    int64_t b = options.integer("max-bytes");
    if (b < 0)
      throw InputError("split-projection: option 'max-bytes': expected a non-negative count, "
                       "found " +
                       std::to_string(b));
    if (b > 0)
      maxBytes_ = static_cast<uint64_t>(b);
  }
  std::string_view name() const override { return "split-projection"; }
  void run(Model &model, PassResult &result) override;

private:
  /// Splits `op`; "" on success, else why it was left.
  std::string split(Operation &op, PatternRewriter &rw, size_t &pieces);
  uint64_t maxBytes_ = ane::kMatmulKernelMemoryBytes;
  std::shared_ptr<OwnedBlobs> store_ = newWeightStore("split-projection");
};

std::string SplitProjectionPass::split(Operation &op, PatternRewriter &rw, size_t &pieces) {
  Value *out = op.output();
  auto outShape = out->type.staticShape();
  Value *x = op.inputValue("x");
  Value *wv = op.inputValue("weight");
  Operation *wop = wv ? wv->definingOp : nullptr;
  if (!outShape || outShape->empty() || !x || !wop)
    return "its output shape is not static or its weight is not an op's result";
  int64_t n = outShape->back();
  uint64_t elem = static_cast<uint64_t>(dtypeBits(out->type.dtype())) / 8;
  // Each piece within the kernel memory and within the tensor extent every
  // chip takes (ANE-SHAPE-002, the conservative "any" row of Chips.def).
  uint64_t maxRows =
      std::min<uint64_t>(maxBytes_ / std::max<uint64_t>(elem, 1),
                         static_cast<uint64_t>(ane::chipInfo(ane::Chip::Any).axisLimit));
  auto ws = wv->type.staticShape();
  if (!ws || ws->size() != 2 || (*ws)[0] != n)
    return "its weight is not a static (out, in) matrix";

  // Rows per scale row of a quantized weight: pieces must not cut a block.
  int64_t align = maxRows >= 64 ? 64 : 1;
  const Constant *wconst = nullptr, *data = nullptr, *scale = nullptr, *offset = nullptr;
  int64_t scaleRows = 1;
  if (wop->type == "const") {
    wconst = wop->attribute("val");
    if (!wconst || !wconst->isTensorLike())
      return "its weight const holds no tensor";
  } else if (wop->type == "constexpr_blockwise_shift_scale" ||
             (wop->type == "constexpr_lut_to_dense" && wop->input("lut") &&
              !wop->input("vector_axis"))) {
    // The palette of an iOS18 lut, [row groups, 1, entries, 1], is cut at
    // row groups as a scale is at its rows.
    bool lut = wop->type == "constexpr_lut_to_dense";
    data = paramConstant(*wop, lut ? "indices" : "data");
    scale = paramConstant(*wop, lut ? "lut" : "scale");
    offset = lut ? nullptr : paramConstant(*wop, "offset");
    auto ss = scale ? scale->type.staticShape() : std::nullopt;
    if (!data || !ss || ss->empty() || ((*ss)[0] != 1 && n % (*ss)[0]) || (lut && ss->size() != 4))
      return "its weight's data or scale is not constant";
    scaleRows = (*ss)[0];
    if (scaleRows > 1)
      align = std::lcm(align, n / scaleRows);
  } else {
    return "weights made by '" + wop->type + "' are not split";
  }
  int64_t count = static_cast<int64_t>((static_cast<uint64_t>(n) + maxRows - 1) / maxRows);
  int64_t chunk = (n + count - 1) / count;
  chunk = (chunk + align - 1) / align * align;
  if (static_cast<uint64_t>(chunk) > maxRows)
    chunk = static_cast<int64_t>(maxRows) / align * align;
  if (chunk < 1)
    return "no piece size fits the kernel memory and the weight's blocks";

  const Constant *bias = op.constInput("bias");
  if (op.input("bias") && !bias)
    return "its bias is not constant";
  std::vector<Value *> parts;
  for (int64_t b = 0; b < n; b += chunk) {
    int64_t e = std::min(n, b + chunk);
    std::string tag = "_part" + std::to_string(parts.size());
    Value *w = nullptr;
    if (wconst) {
      auto c = sliceRows(store_, *wconst, b, e);
      if (!c)
        return "its weight rows are not whole bytes";
      w = rw.createConst(op, wop->name + tag, **c);
    } else {
      auto cut = [&](const Constant *c, bool perRow) -> std::optional<ConstantRef> {
        if (!perRow) // one scale for every row: shared as it is
          return std::make_shared<const Constant>(*c);
        int64_t per = n / scaleRows;
        return sliceRows(store_, *c, b / per, e / per);
      };
      auto d = sliceRows(store_, *data, b, e);
      auto s = cut(scale, scaleRows > 1);
      std::optional<ConstantRef> o;
      if (offset)
        o = cut(offset, scaleRows > 1);
      if (!d || !s || (offset && !o))
        return "its quantized rows are not whole bytes";
      Operation *q = rw.create(op, wop->type, wop->name + tag, {},
                               {Type::tensor(wv->type.dtype(), {e - b, (*ws)[1]})});
      bool lut = wop->type == "constexpr_lut_to_dense";
      q->setInput(lut ? "indices" : "data", Binding::of(*d));
      q->setInput(lut ? "lut" : "scale", Binding::of(*s));
      if (o)
        q->setInput("offset", Binding::of(*o));
      w = q->output();
    }
    std::vector<NewInput> inputs = {{"x", {x}}, {"weight", {w}}};
    std::vector<int64_t> shape = *outShape;
    shape.back() = e - b;
    Operation *piece = rw.create(op, "linear", op.name + tag, std::move(inputs),
                                 {Type::tensor(out->type.dtype(), shape)});
    if (bias) {
      auto bc = sliceRows(store_, *bias, b, e);
      if (!bc)
        return "its bias rows are not whole bytes";
      piece->setInput("bias", Binding::of(*bc));
    }
    parts.push_back(piece->output());
  }
  Value *cat =
      createConcat(rw, op, op.name + "_concat", parts, static_cast<int64_t>(outShape->size()) - 1);
  if (!cat)
    return "the pieces cannot be concatenated";
  // The concat takes the linear's names: consumers, function outputs and
  // ExecuTorch's debug-handle map keep referring to them.
  rw.replaceOpKeepingNames(op, cat);
  pieces = parts.size();
  return "";
}

void SplitProjectionPass::run(Model &model, PassResult &result) {
  for (auto &fn : model.program->functions) {
    UseMap uses(*fn);
    PatternRewriter rw(*fn, uses);
    std::vector<Operation *> wide;
    for (auto &op : fn->body->ops) {
      if (op->type != "linear" || op->outputs.empty())
        continue;
      auto s = op->output()->type.staticShape();
      uint64_t elem = static_cast<uint64_t>(dtypeBits(op->output()->type.dtype())) / 8;
      if (s && !s->empty() && static_cast<uint64_t>(s->back()) * elem > maxBytes_)
        wide.push_back(op.get());
    }
    for (Operation *op : wide) {
      std::string name = op->name;
      int64_t width = op->output()->type.staticShape()->back();
      size_t pieces = 0;
      std::string why = split(*op, rw, pieces);
      if (!why.empty()) {
        result.diagnostics.push_back(
            {Diagnostic::Severity::Warning, fn->name, name, "wide linear left as is: " + why});
        continue;
      }
      result.changes.push_back("split-projection: " + fn->name + ": linear '" + name +
                               "' (output " + std::to_string(width) + ") -> " +
                               std::to_string(pieces) + " linears joined by concat");
    }
  }
}

} // namespace

std::unique_ptr<Pass> createSplitProjectionPass(const PassOptions &options) {
  return std::make_unique<SplitProjectionPass>(options);
}

} // namespace anefit
