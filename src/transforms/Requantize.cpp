//===- Requantize.cpp - Per-block weights into forms the ANE runs ---------===//
//
// Every constexpr_blockwise_shift_scale whose scales cover blocks of an axis
// (ANE-QUANT-001) is rewritten, weight by weight, to one of:
//   fp16  a const of the dense weights as the device decompresses them
//         (exact; four times the bytes of int4);
//   c8w   int8 with one symmetric scale per output channel (axis 0);
//   c4w   int4 the same way;
//   auto  c8w where the weight's relative RMS error stays within
//         max-weight-error, fp16 elsewhere.
// c8w and c4w are lossy: the pass says so in PassResult::lossy, and reports
// each weight's error against the dense weights it replaced.
//
//===----------------------------------------------------------------------===//
#include "ops/Weights.h"
#include "runtime/Convert.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/Units.h"
#include "transforms/PassImpl.h"
#include "transforms/WeightData.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace anefit {
namespace {

enum class Target { Fp16, C8w, C4w, Auto };

Target parseTarget(const std::string &s) {
  if (s == "fp16")
    return Target::Fp16;
  if (s == "c8w")
    return Target::C8w;
  if (s == "c4w")
    return Target::C4w;
  if (s == "auto")
    return Target::Auto;
  throw InputError("requantize: option 'to': expected fp16, c8w, c4w or auto, found '" + s + "'");
}

/// One weight rewritten to per-channel integers.
struct PerChannel {
  std::vector<float> q;      ///< integer values, as floats
  std::vector<float> scales; ///< one per row, rounded to the scale dtype
  double relError = 0;       ///< ||dequantized - dense|| / ||dense||
  bool finite = true;        ///< false: the weight holds inf or NaN (not quantized)
};

/// Symmetric per-row quantization of `w` to `bits`-bit signed integers, with
/// scales held in `scaleType` (fp16 rounding applied before quantizing, so
/// the error is the one the model will have).
PerChannel quantizeRows(const DenseWeight &w, int bits, DType scaleType) {
  PerChannel out;
  int64_t rows = w.shape.empty() ? 1 : w.shape[0];
  int64_t cols = rows ? static_cast<int64_t>(w.values.size()) / rows : 0;
  float qmax = static_cast<float>((1 << (bits - 1)) - 1), qmin = -qmax - 1;
  out.q.resize(w.values.size());
  out.scales.resize(static_cast<size_t>(rows));
  double err2 = 0, norm2 = 0;
  std::vector<float> back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float *wr = w.values.data() + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c)
      amax = std::max(amax, std::fabs(wr[c]));
    if (!std::isfinite(amax)) {
      // No scale holds inf or NaN: the weight stays dense (exact).
      out.finite = false;
      return out;
    }
    float s = amax > 0 ? amax / qmax : 1.0f;
    if (scaleType == DType::F16) {
      s = halfToFloat(floatToHalf(s));
      if (s == 0)
        s = halfToFloat(1); // the smallest fp16 subnormal
    }
    out.scales[static_cast<size_t>(r)] = s;
    float *qr = out.q.data() + r * cols;
    float inv = 1.0f / s;
    for (int64_t c = 0; c < cols; ++c) {
      float x = wr[c] * inv;
      // Round half away from zero, clamped to the integer range.
      float q = x >= 0 ? std::floor(x + 0.5f) : -std::floor(-x + 0.5f);
      qr[c] = std::clamp(q, qmin, qmax);
      back[static_cast<size_t>(c)] = qr[c] * s;
    }
    // What the interpreter and the device read back: q * s, at the weight's
    // dtype.
    if (w.dtype == DType::F16)
      runtime::roundToHalfN(back.data(), cols);
    for (int64_t c = 0; c < cols; ++c) {
      double d = static_cast<double>(back[static_cast<size_t>(c)]) - wr[c];
      err2 += d * d;
      norm2 += static_cast<double>(wr[c]) * wr[c];
    }
  }
  out.relError = norm2 > 0 ? std::sqrt(err2 / norm2) : (err2 > 0 ? INFINITY : 0);
  return out;
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * v);
  return buf;
}

class RequantizePass : public Pass {
public:
  explicit RequantizePass(const PassOptions &options) : target_(parseTarget(options.string("to"))) {
    std::string e = options.string("max-weight-error");
    char *end = nullptr;
    maxError_ = std::strtod(e.c_str(), &end);
    if (e.empty() || *end || !(maxError_ >= 0))
      throw InputError("requantize: option 'max-weight-error': expected a non-negative number, "
                       "found '" +
                       e + "'");
  }
  std::string_view name() const override { return "requantize"; }
  void run(Model &model, PassResult &result) override;

private:
  /// What one weight became (shared by every op that decodes the same data).
  struct Done {
    Target to;
    ConstantRef dense;        ///< Fp16
    ConstantRef data, scales; ///< C8w / C4w
    double relError = 0;
    uint64_t bytesBefore = 0, bytesAfter = 0;
  };
  Done rewrite(const Operation &op, const DenseWeight &w);

  Target target_;
  double maxError_;
  std::shared_ptr<OwnedBlobs> store_ = newWeightStore("requantized");
};

RequantizePass::Done RequantizePass::rewrite(const Operation &op, const DenseWeight &w) {
  Done d;
  for (std::string_view p : {"data", "scale", "offset"})
    if (const Type *t = op.inputType(p))
      if (auto n = t->numElements())
        d.bytesBefore += (static_cast<uint64_t>(*n) * dtypeBits(t->dtype()) + 7) / 8;
  Target to = target_;
  const Type *scaleType = op.inputType("scale");
  DType sdt = scaleType && isFloat(scaleType->dtype()) ? scaleType->dtype() : DType::F16;
  std::optional<PerChannel> pc;
  if (to != Target::Fp16) {
    pc = quantizeRows(w, to == Target::C4w ? 4 : 8, sdt);
    if (!pc->finite)
      to = Target::Fp16;
    else if (to == Target::Auto)
      to = pc->relError <= maxError_ ? Target::C8w : Target::Fp16;
  }
  d.to = to;
  if (to == Target::Fp16) {
    std::vector<uint8_t> bytes = packElements(w.values, w.dtype);
    d.bytesAfter = bytes.size();
    d.dense = makeWeightConstant(store_, Type::tensor(w.dtype, w.shape), std::move(bytes));
    return d;
  }
  DType qt = to == Target::C4w ? DType::I4 : DType::I8;
  std::vector<uint8_t> qb = packElements(pc->q, qt);
  std::vector<int64_t> sshape(w.shape.size(), 1);
  sshape[0] = w.shape[0];
  std::vector<uint8_t> sb = packElements(pc->scales, sdt);
  d.bytesAfter = qb.size() + sb.size();
  d.data = makeWeightConstant(store_, Type::tensor(qt, w.shape), std::move(qb));
  d.scales = makeWeightConstant(store_, Type::tensor(sdt, sshape), std::move(sb));
  d.relError = pc->relError;
  return d;
}

/// Identity of a weight's stored data, so a weight bound by several
/// functions is rewritten once.
std::pair<const void *, uint64_t> dataKey(const Operation &op) {
  const Constant *c = paramConstant(op, "data");
  if (c && c->kind == Constant::Kind::Blob && c->blob.store)
    return {c->blob.store.get(), c->blob.offset};
  return {c, 0};
}

void RequantizePass::run(Model &model, PassResult &result) {
  std::map<std::pair<const void *, uint64_t>, Done> done;
  for (auto &fn : model.program->functions) {
    size_t n = 0, toFp16 = 0;
    uint64_t before = 0, after = 0;
    double worst = 0, sum = 0;
    std::string worstName;
    size_t measured = 0;
    walk(*fn->body, [&](Operation &op) {
      if (op.type != "constexpr_blockwise_shift_scale" ||
          weightSchemeOf(op) != WeightScheme::Blockwise)
        return;
      auto key = dataKey(op);
      auto it = done.find(key);
      if (it == done.end()) {
        std::string why;
        std::optional<DenseWeight> w = denseWeight(op, &why);
        if (!w || w->shape.empty()) {
          result.diagnostics.push_back(
              {Diagnostic::Severity::Warning, fn->name, op.name,
               "per-block weight left as is: " + (why.empty() ? std::string("no shape") : why)});
          return;
        }
        it = done.emplace(key, rewrite(op, *w)).first;
      }
      const Done &d = it->second;
      ++n;
      before += d.bytesBefore;
      after += d.bytesAfter;
      if (d.to == Target::Fp16) {
        ++toFp16;
        result.exactInFp16 = true;
        op.type = "const";
        op.inputs.clear();
        op.attributes.clear();
        op.attributes["val"] = d.dense;
        return;
      }
      result.lossy = true;
      ++measured;
      sum += d.relError;
      if (d.relError >= worst) {
        worst = d.relError;
        worstName = op.name;
      }
      op.inputs.clear();
      op.attributes.clear();
      op.setInput("data", Binding::of(d.data));
      op.setInput("scale", Binding::of(d.scales));
    });
    if (!n)
      continue;
    std::string line = "requantize: " + fn->name + ": " + std::to_string(n) + " per-block weight" +
                       (n == 1 ? "" : "s") + " -> ";
    size_t pcCount = n - toFp16;
    if (pcCount)
      line +=
          std::to_string(pcCount) + " per-channel " + (target_ == Target::C4w ? "int4" : "int8");
    if (pcCount && toFp16)
      line += ", ";
    if (toFp16)
      line += std::to_string(toFp16) + " fp16 (exact)";
    line += "; weights " + humanBytes(before) + " -> " + humanBytes(after);
    if (measured)
      line += "; weight error (relative RMS) mean " + percent(sum / measured) + ", max " +
              percent(worst) + " ('" + worstName + "')";
    result.changes.push_back(line);
  }
}

} // namespace

std::unique_ptr<Pass> createRequantizePass(const PassOptions &options) {
  return std::make_unique<RequantizePass>(options);
}

} // namespace anefit
