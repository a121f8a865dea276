//===- DepthwiseTaps.cpp - Single-output depthwise convs as tap products --===//
//
// A depthwise conv (groups == input channels == output channels) whose input
// window is exactly its kernel, so it yields one position per channel (a
// short causal conv in single-step decode: the state's last K - 1 columns
// and the new one), is y = sum over taps of x[tap] * w[tap], plus the bias.
// It becomes, per tap, a slice of the input column and a multiply by that
// tap's (1, C, 1...) weights, summed by adds in the conv's own order, the
// last op keeping the conv's result name: in the interpreter's fp32 mode the
// same float operations as its conv kernel, so bit-equal. Wide depthwise
// convs are placed off the ANE (ANE-CONV-003) or fail its compiler
// palettized (ANE-QUANT-002); elementwise multiplies and adds are not.
//
//===----------------------------------------------------------------------===//
#include "support/DType.h"
#include "transforms/Builders.h"
#include "transforms/PassImpl.h"
#include "transforms/WeightData.h"

namespace anefit {
namespace {

class DepthwiseTapsPass : public Pass {
public:
  explicit DepthwiseTapsPass(const PassOptions &) {}
  std::string_view name() const override { return "depthwise-taps"; }
  void run(Model &model, PassResult &result) override;

private:
  std::string rewrite(Operation &op, PatternRewriter &rw);
  std::shared_ptr<OwnedBlobs> store_ = newWeightStore("depthwise-taps");
};

std::optional<int64_t> scalarParam(const Operation &op, std::string_view name) {
  const Constant *c = op.constInput(name);
  auto v = c ? c->asScalar() : std::nullopt;
  if (!v)
    return std::nullopt;
  return static_cast<int64_t>(*v);
}

bool allEqual(const Operation &op, std::string_view name, int64_t want) {
  const Constant *c = op.constInput(name);
  if (!c)
    return true; // absent: the default (pad 0, dilation 1)
  for (int64_t v : c->asInts())
    if (v != want)
      return false;
  return true;
}

/// A conv that is depthwise and yields one position per channel; "" if so.
std::string notSingleTap(const Operation &op) {
  Value *x = op.inputValue("x");
  Value *w = op.inputValue("weight");
  auto xs = x ? x->type.staticShape() : std::nullopt;
  auto ws = w ? w->type.staticShape() : std::nullopt;
  auto ys = op.outputs.empty() ? std::nullopt : op.output()->type.staticShape();
  auto groups = scalarParam(op, "groups");
  if (!xs || !ws || !ys || xs->size() < 3 || ws->size() != xs->size() || !groups)
    return "shapes or groups are not static";
  int64_t c = (*xs)[1];
  if (*groups != c || (*ws)[0] != c || (*ws)[1] != 1)
    return "not depthwise";
  for (size_t d = 2; d < xs->size(); ++d)
    if ((*ys)[d] != 1 || (*xs)[d] != (*ws)[d])
      return "its input window is not exactly its kernel (not a single-step decode)";
  const Constant *padType = op.constInput("pad_type");
  std::string pt = padType && padType->asString() ? *padType->asString() : "valid";
  if (!(pt == "valid" || (pt == "custom" && allEqual(op, "pad", 0))))
    return "it pads its input";
  if (!allEqual(op, "dilations", 1))
    return "it is dilated";
  if (!w->definingOp)
    return "its weight is a runtime input";
  return "";
}

std::string DepthwiseTapsPass::rewrite(Operation &op, PatternRewriter &rw) {
  Value *x = op.inputValue("x");
  Value *w = op.inputValue("weight");
  std::string why;
  std::optional<DenseWeight> dense = denseWeight(*w->definingOp, &why);
  if (!dense)
    return "its weight cannot be read: " + why;
  DType dt = x->type.dtype();
  if (!isFloat(dt))
    return "its input is not float";
  if (op.input("bias") && !op.constInput("bias"))
    return "its bias is not constant";
  std::vector<int64_t> xs = *x->type.staticShape();
  int64_t channels = xs[1], rank = static_cast<int64_t>(xs.size());
  int64_t taps = 1;
  for (int64_t d = 2; d < rank; ++d)
    taps *= xs[static_cast<size_t>(d)];
  // One (1, C, 1...) weight per tap, in the order the conv sums them
  // (row-major over the kernel axes).
  std::vector<int64_t> tapShape(static_cast<size_t>(rank), 1);
  tapShape[1] = channels;
  std::vector<int64_t> one(static_cast<size_t>(rank), 1);
  one[0] = xs[0];
  one[1] = channels;
  Type tapType = Type::tensor(dt, one);
  Value *sum = nullptr;
  for (int64_t t = 0; t < taps; ++t) {
    std::vector<float> wt(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c)
      wt[static_cast<size_t>(c)] = dense->values[static_cast<size_t>(c * taps + t)];
    std::string tag = op.name + "_tap" + std::to_string(t);
    // The tap's input column: index t of the kernel axes, row-major.
    std::vector<int64_t> begin(static_cast<size_t>(rank), 0), end = xs;
    for (int64_t d = rank - 1, rest = t; d >= 2; --d) {
      int64_t k = xs[static_cast<size_t>(d)];
      begin[static_cast<size_t>(d)] = rest % k;
      end[static_cast<size_t>(d)] = rest % k + 1;
      rest /= k;
    }
    Value *col = createSlice(rw, op, tag + "_x", x, begin, end);
    Value *wv = rw.createConst(
        op, tag + "_weight",
        *makeWeightConstant(store_, Type::tensor(dt, tapShape), packElements(wt, dt)));
    Value *prod = rw.create(op, "mul", tag, {{"x", {col}}, {"y", {wv}}}, {tapType})->output();
    sum =
        sum ? rw.create(op, "add", tag + "_sum", {{"x", {sum}}, {"y", {prod}}}, {tapType})->output()
            : prod;
  }
  if (op.input("bias")) {
    std::vector<float> b;
    for (double v : op.constInput("bias")->asDoubles())
      b.push_back(static_cast<float>(v));
    Value *bv = rw.createConst(
        op, op.name + "_taps_bias",
        *makeWeightConstant(store_, Type::tensor(dt, tapShape), packElements(b, dt)));
    sum = rw.create(op, "add", op.name + "_taps_add", {{"x", {sum}}, {"y", {bv}}}, {tapType})
              ->output();
  }
  rw.replaceOpKeepingNames(op, sum);
  return "";
}

void DepthwiseTapsPass::run(Model &model, PassResult &result) {
  for (auto &fn : model.program->functions) {
    UseMap uses(*fn);
    PatternRewriter rw(*fn, uses);
    std::vector<Operation *> convs;
    for (auto &op : fn->body->ops)
      if (op->type == "conv" && notSingleTap(*op).empty())
        convs.push_back(op.get());
    size_t done = 0;
    for (Operation *op : convs) {
      std::string name = op->name;
      std::string why = rewrite(*op, rw);
      if (!why.empty())
        result.diagnostics.push_back(
            {Diagnostic::Severity::Warning, fn->name, name, "depthwise conv left as is: " + why});
      else
        ++done;
    }
    if (done)
      result.changes.push_back("depthwise-taps: " + fn->name + ": " + std::to_string(done) +
                               " single-step depthwise conv" + (done == 1 ? "" : "s") +
                               " -> a multiply per tap and adds");
  }
}

} // namespace

std::unique_ptr<Pass> createDepthwiseTapsPass(const PassOptions &options) {
  return std::make_unique<DepthwiseTapsPass>(options);
}

} // namespace anefit
