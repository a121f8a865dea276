//===- Requantize.cpp - Per-block weights into forms the ANE runs ---------===//
//
// Every constexpr_blockwise_shift_scale whose scales cover blocks of an axis
// (ANE-QUANT-001) is rewritten, weight by weight, to one of:
//   fp16  a const of the dense weights as the device decompresses them
//         (exact; four times the bytes of int4);
//   c8w   int8 with one symmetric scale per output channel (axis 0);
//   c4w   int4 the same way;
//   lut4  4-bit palettes: per group of output channels, 16 values fitted to
//         the weights by k-means (iOS18 per-grouped-channel
//         constexpr_lut_to_dense, the compression the evidence puts on the
//         ANE);
//   lut6, lut8  the same with 64 or 256 values;
//   auto  c8w where the weight's relative RMS error stays within
//         max-weight-error, fp16 elsewhere.
// (RequantizeForms.def.) All but fp16 are lossy: the pass says so in
// PassResult::lossy, and reports each weight's error against the dense
// weights it replaced.
//
//===----------------------------------------------------------------------===//
#include "transforms/Requantize.h"
#include "ops/Weights.h"
#include "runtime/Convert.h"
#include "runtime/ThreadPool.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/Units.h"
#include "transforms/PassImpl.h"
#include "transforms/WeightData.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

namespace anefit {
namespace {

enum class Target {
#define REQUANTIZE_FORM(Enum, Name, Lossy, Help) Enum,
#include "transforms/RequantizeForms.def"
};

constexpr RequantizeForm kForms[] = {
#define REQUANTIZE_FORM(Enum, Name, Lossy, Help) {Name, Lossy, Help},
#include "transforms/RequantizeForms.def"
};

Target parseTarget(const std::string &s) {
  for (size_t i = 0; i < std::size(kForms); ++i)
    if (kForms[i].name == s)
      return static_cast<Target>(i);
  throw InputError("requantize: option 'to': expected " + requantizeFormNames() + ", found '" + s +
                   "'");
}

/// Index bits of a palettized form; 0 for the others.
int paletteBits(Target t) {
  switch (t) {
  case Target::Lut4:
    return 4;
  case Target::Lut6:
    return 6;
  case Target::Lut8:
    return 8;
  default:
    return 0;
  }
}

bool isPalette(Target t) { return paletteBits(t) != 0; }

/// One weight rewritten to per-channel integers.
struct PerChannel {
  std::vector<float> q;      ///< integer values, as floats
  std::vector<float> scales; ///< one per row, rounded to the scale dtype
  double relError = 0;       ///< ||dequantized - dense|| / ||dense||
  bool finite = true;        ///< false: the weight holds inf or NaN (not quantized)
  size_t nonFinite = 0;      ///< how many of its values are inf or NaN
};

/// The values of `w` that are inf or NaN: no scale or palette holds them.
size_t countNonFinite(const DenseWeight &w) {
  size_t n = 0;
  for (float x : w.values)
    n += !std::isfinite(x);
  return n;
}

/// Symmetric per-row quantization of `w` to `bits`-bit signed integers, with
/// scales held in `scaleType` (fp16 rounding applied before quantizing, so
/// the error is the one the model will have).
PerChannel quantizeRows(const DenseWeight &w, int bits, DType scaleType) {
  PerChannel out;
  // Every value, not the row's largest |value|: std::max drops a NaN.
  if ((out.nonFinite = countNonFinite(w))) {
    out.finite = false; // the weight stays dense (exact)
    return out;
  }
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

/// One weight rewritten to palettes: each group of `groupRows` rows (output
/// channels) shares `entries` values; every element is an index into its
/// group's palette.
struct Palettized {
  std::vector<uint8_t> indices; ///< packed LSB-first, `bits` per index
  std::vector<float> lut;       ///< groups x entries, rounded to the weight's dtype
  int64_t groupRows = 1;
  double relError = 0;
  bool finite = true;
  size_t nonFinite = 0; ///< values that are inf or NaN
};

/// The index of the value of sorted `centroids` nearest to `v`, given the
/// midpoints between neighbours (entries - 1 of them, entries a power of 2).
inline int nearest(const float *mid, int entries, float v) {
  int idx = 0;
  for (int step = entries / 2; step >= 1; step /= 2)
    if (v > mid[idx + step - 1])
      idx += step;
  return idx;
}

void midpoints(const std::vector<float> &c, std::vector<float> &mid) {
  mid.resize(c.size() - 1);
  for (size_t j = 0; j + 1 < c.size(); ++j)
    mid[j] = 0.5f * (c[j] + c[j + 1]);
}

/// `entries` values for the n values of `v` that keep the squared error
/// small (1-D k-means, Lloyd's algorithm): started at the quantiles and run
/// to convergence on a 4096-bin histogram of the values, then refined by two
/// exact iterations over the values themselves. Sorted on return.
std::vector<float> fitPalette(const float *v, int64_t n, int entries) {
  // At most `entries` distinct values (a weight already on a small grid):
  // the palette is those values, and the rewrite is exact.
  std::vector<float> c;
  for (int64_t i = 0; i < n && c.size() <= static_cast<size_t>(entries); ++i)
    if (std::find(c.begin(), c.end(), v[i]) == c.end())
      c.push_back(v[i]);
  if (c.size() <= static_cast<size_t>(entries)) {
    std::sort(c.begin(), c.end());
    c.resize(static_cast<size_t>(entries), c.empty() ? 0.0f : c.back());
    return c;
  }
  float lo = *std::min_element(v, v + n), hi = *std::max_element(v, v + n);
  c.assign(static_cast<size_t>(entries), lo);
  constexpr int kBins = 4096;
  std::vector<double> count(kBins), sum(kBins);
  double toBin = kBins / (static_cast<double>(hi) - lo);
  for (int64_t i = 0; i < n; ++i) {
    int b = std::min(kBins - 1, static_cast<int>((static_cast<double>(v[i]) - lo) * toBin));
    count[static_cast<size_t>(b)] += 1;
    sum[static_cast<size_t>(b)] += v[i];
  }
  // The histogram's non-empty bins, as points weighted by their counts.
  std::vector<double> pt, wt;
  for (int b = 0; b < kBins; ++b)
    if (count[static_cast<size_t>(b)] > 0) {
      pt.push_back(sum[static_cast<size_t>(b)] / count[static_cast<size_t>(b)]);
      wt.push_back(count[static_cast<size_t>(b)]);
    }
  // Quantile starts: the point holding the (k + 1/2)/entries-th value.
  std::vector<double> cd(static_cast<size_t>(entries));
  double seen = 0;
  size_t p = 0;
  for (int k = 0; k < entries; ++k) {
    double target = (k + 0.5) * static_cast<double>(n) / entries;
    while (p + 1 < pt.size() && seen + wt[p] < target)
      seen += wt[p++];
    cd[static_cast<size_t>(k)] = pt[p];
  }
  std::vector<double> accSum(cd.size()), accCount(cd.size());
  for (int iter = 0; iter < 100; ++iter) {
    std::fill(accSum.begin(), accSum.end(), 0.0);
    std::fill(accCount.begin(), accCount.end(), 0.0);
    size_t k = 0;
    for (size_t i = 0; i < pt.size(); ++i) {
      // Points and centroids are both sorted: the nearest only moves right.
      while (k + 1 < cd.size() && pt[i] > 0.5 * (cd[k] + cd[k + 1]))
        ++k;
      accSum[k] += pt[i] * wt[i];
      accCount[k] += wt[i];
    }
    double moved = 0;
    for (size_t j = 0; j < cd.size(); ++j)
      if (accCount[j] > 0) {
        double m = accSum[j] / accCount[j];
        moved = std::max(moved, std::fabs(m - cd[j]));
        cd[j] = m;
      }
    std::sort(cd.begin(), cd.end());
    if (moved <= 1e-7 * (static_cast<double>(hi) - lo))
      break;
  }
  for (size_t j = 0; j < cd.size(); ++j)
    c[j] = static_cast<float>(cd[j]);
  std::vector<float> mid;
  for (int iter = 0; iter < 2; ++iter) {
    midpoints(c, mid);
    std::fill(accSum.begin(), accSum.end(), 0.0);
    std::fill(accCount.begin(), accCount.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      auto j = static_cast<size_t>(nearest(mid.data(), entries, v[i]));
      accSum[j] += v[i];
      accCount[j] += 1;
    }
    for (size_t j = 0; j < c.size(); ++j)
      if (accCount[j] > 0)
        c[j] = static_cast<float>(accSum[j] / accCount[j]);
    std::sort(c.begin(), c.end());
  }
  return c;
}

/// Palettization of `w` with 2^bits values per group of `group` rows (the
/// largest divisor of the row count not above `group`). Palette values are
/// rounded to the weight's dtype before the indices are chosen, so the
/// error is the one the model will have. Groups are fitted in parallel on
/// the interpreter's threads.
Palettized palettizeRows(const DenseWeight &w, int bits, int64_t group) {
  Palettized out;
  int64_t rows = w.shape.empty() ? 1 : w.shape[0];
  int64_t cols = rows ? static_cast<int64_t>(w.values.size()) / rows : 0;
  if ((out.nonFinite = countNonFinite(w))) {
    out.finite = false; // no palette holds inf or NaN: the weight stays dense
    return out;
  }
  int64_t g = std::clamp<int64_t>(group, 1, std::max<int64_t>(rows, 1));
  while (rows % g)
    --g;
  out.groupRows = g;
  int entries = 1 << bits;
  int64_t n = static_cast<int64_t>(w.values.size()), groups = rows / g, m = g * cols;
  out.indices.assign(static_cast<size_t>((n * bits + 7) / 8), 0);
  out.lut.resize(static_cast<size_t>(groups * entries));
  std::vector<double> err2(static_cast<size_t>(groups)), norm2(static_cast<size_t>(groups));
  auto fit = [&](int64_t first, int64_t last) {
    std::vector<float> mid;
    for (int64_t k = first; k < last; ++k) {
      const float *v = w.values.data() + k * m;
      std::vector<float> c = fitPalette(v, m, entries);
      if (w.dtype == DType::F16)
        runtime::roundToHalfN(c.data(), static_cast<int64_t>(c.size()));
      std::sort(c.begin(), c.end());
      midpoints(c, mid);
      double e2 = 0, n2 = 0;
      for (int64_t i = 0; i < m; ++i) {
        int idx = nearest(mid.data(), entries, v[i]);
        // Index e's bits start at bit e * bits (LSB-first) and may run
        // into the next byte.
        uint64_t bit = static_cast<uint64_t>(k * m + i) * static_cast<uint64_t>(bits);
        unsigned shifted = static_cast<unsigned>(idx) << (bit % 8);
        out.indices[bit / 8] |= static_cast<uint8_t>(shifted);
        if (shifted >> 8)
          out.indices[bit / 8 + 1] |= static_cast<uint8_t>(shifted >> 8);
        double d = static_cast<double>(c[static_cast<size_t>(idx)]) - v[i];
        e2 += d * d;
        n2 += static_cast<double>(v[i]) * v[i];
      }
      std::copy(c.begin(), c.end(), out.lut.begin() + k * entries);
      err2[static_cast<size_t>(k)] = e2;
      norm2[static_cast<size_t>(k)] = n2;
    }
  };
  // Groups whose indices do not end on a byte share one: those run on
  // one thread.
  if ((m * bits) % 8) {
    fit(0, groups);
  } else {
    runtime::ThreadScope threads(0);
    runtime::parallelFor(groups, 1, fit);
  }
  double e2 = std::accumulate(err2.begin(), err2.end(), 0.0);
  double n2 = std::accumulate(norm2.begin(), norm2.end(), 0.0);
  out.relError = n2 > 0 ? std::sqrt(e2 / n2) : (e2 > 0 ? INFINITY : 0);
  return out;
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * v);
  return buf;
}

class RequantizePass : public Pass {
public:
  explicit RequantizePass(const PassOptions &options)
      : target_(parseTarget(options.string("to"))), group_(options.integer("group")) {
    if (group_ < 1)
      throw InputError("requantize: option 'group': expected a positive row count, found " +
                       std::to_string(group_));
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
    ConstantRef indices, lut; ///< Lut4 / Lut6 / Lut8
    double relError = 0;
    uint64_t bytesBefore = 0, bytesAfter = 0;
    size_t nonFinite = 0; ///< values that are inf or NaN (the weight stays dense)
  };
  Done rewrite(const Operation &op, const DenseWeight &w);
  /// What the lossy weights became, for the pass's summary line.
  std::string formText() const {
    switch (target_) {
    case Target::C4w:
      return "per-channel int4";
    case Target::Lut4:
    case Target::Lut6:
    case Target::Lut8:
      return std::to_string(paletteBits(target_)) +
             "-bit palettized (a palette per group of up to " + std::to_string(group_) +
             " output channel" + (group_ == 1 ? "" : "s") + ")";
    default:
      return "per-channel int8";
    }
  }

  Target target_;
  int64_t group_;
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
  if (isPalette(to)) {
    int bits = paletteBits(to);
    Palettized pal = palettizeRows(w, bits, group_);
    if (pal.finite) {
      d.to = to;
      std::vector<int64_t> lshape(w.shape.size() + 2, 1);
      lshape[0] = w.shape[0] / pal.groupRows;
      lshape[w.shape.size()] = int64_t{1} << bits;
      std::vector<uint8_t> lb = packElements(pal.lut, w.dtype);
      d.bytesAfter = pal.indices.size() + lb.size();
      d.indices = makeWeightConstant(store_,
                                     Type::tensor(bits == 4   ? DType::U4
                                                  : bits == 6 ? DType::U6
                                                              : DType::U8,
                                                  w.shape),
                                     std::move(pal.indices));
      d.lut = makeWeightConstant(store_, Type::tensor(w.dtype, lshape), std::move(lb));
      d.relError = pal.relError;
      return d;
    }
    d.nonFinite = pal.nonFinite;
    to = Target::Fp16;
  }
  std::optional<PerChannel> pc;
  if (to != Target::Fp16) {
    pc = quantizeRows(w, to == Target::C4w ? 4 : 8, sdt);
    if (!pc->finite) {
      d.nonFinite = pc->nonFinite;
      to = Target::Fp16;
    } else if (to == Target::Auto)
      to = pc->relError <= maxError_ ? Target::C8w : Target::Fp16;
  }
  d.to = to;
  if (to == Target::Fp16) {
    if (!d.nonFinite)
      d.nonFinite = countNonFinite(w);
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
    size_t measured = 0, nonFinite = 0;
    std::string nonFiniteName;
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
      if (d.nonFinite) {
        // Named, never dropped: the values stay what they were.
        if (!nonFinite)
          nonFiniteName = op.name;
        nonFinite += d.nonFinite;
        result.diagnostics.push_back({Diagnostic::Severity::Warning, fn->name, op.name,
                                      "per-block weight holds " + std::to_string(d.nonFinite) +
                                          " non-finite value" + (d.nonFinite == 1 ? "" : "s") +
                                          " (inf or NaN), kept as they are in a dense weight"});
      }
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
      if (isPalette(d.to)) {
        op.type = "constexpr_lut_to_dense";
        op.setInput("indices", Binding::of(d.indices));
        op.setInput("lut", Binding::of(d.lut));
        return;
      }
      op.setInput("data", Binding::of(d.data));
      op.setInput("scale", Binding::of(d.scales));
    });
    if (!n)
      continue;
    std::string line = "requantize: " + fn->name + ": " + std::to_string(n) + " per-block weight" +
                       (n == 1 ? "" : "s") + " -> ";
    size_t pcCount = n - toFp16;
    if (pcCount)
      line += std::to_string(pcCount) + " " + formText();
    if (pcCount && toFp16)
      line += ", ";
    if (toFp16)
      line += std::to_string(toFp16) + " fp16 (exact)";
    line += "; weights " + humanBytes(before) + " -> " + humanBytes(after);
    if (nonFinite)
      line += "; " + std::to_string(nonFinite) + " non-finite value" + (nonFinite == 1 ? "" : "s") +
              " kept (first in '" + nonFiniteName + "')";
    if (measured)
      line += "; weight error (relative RMS) mean " + percent(sum / measured) + ", max " +
              percent(worst) + " ('" + worstName + "')";
    result.changes.push_back(line);
  }
}

} // namespace

std::span<const RequantizeForm> requantizeForms() { return kForms; }

const RequantizeForm *findRequantizeForm(std::string_view name) {
  for (const RequantizeForm &f : kForms)
    if (f.name == name)
      return &f;
  return nullptr;
}

std::string requantizeFormNames(std::string_view sep, std::string_view last) {
  std::string out;
  for (size_t i = 0; i < std::size(kForms); ++i)
    out += std::string(i == 0                       ? ""
                       : i + 1 == std::size(kForms) ? last
                                                    : sep) +
           std::string(kForms[i].name);
  return out;
}

std::unique_ptr<Pass> createRequantizePass(const PassOptions &options) {
  return std::make_unique<RequantizePass>(options);
}

} // namespace anefit
