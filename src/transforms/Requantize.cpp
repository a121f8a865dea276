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
//   auto  per weight the smallest of those whose error stays within
//         max-error, fp16 where none does; then, while the model's stored
//         weights exceed the budget (ANE-PROG-001's iPhone limit, or
//         `budget`), the weight whose next smaller form costs the least
//         error steps down to it.
// (RequantizeForms.def.) All but fp16 are lossy: the pass says so in
// PassResult::lossy, and reports each weight's error against the dense
// weights it replaced. With weights=all, dense float consts that layers
// read as their weight (weightInputOf) are rewritten the same way, a tied
// embedding (the LM head's weight, which gathers also read) among them.
//
// With a calibration (PassContext, fix --text), each element counts by the
// energy of the input channel it multiplies: the palettes are fitted by
// weighted k-means and the errors auto compares are those of the layer's
// output (the diagonal approximation of Calibration.h), not the weight's.
// Error feedback fits indices to the calibration's rows; where the
// calibration holds rows the fit never saw (ChannelEnergy::heldOut), auto
// compares the output errors on those.
//
//===----------------------------------------------------------------------===//
#include "transforms/Requantize.h"
#include "ane/Limits.h"
#include "ops/Weights.h"
#include "runtime/Convert.h"
#include "runtime/Tensor.h"
#include "runtime/ThreadPool.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/Units.h"
#include "transforms/Calibration.h"
#include "transforms/PassImpl.h"
#include "transforms/UseMap.h"
#include "transforms/WeightData.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

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

/// A channel the calibration never excited still weighs this share of the
/// mean energy, so the palettes and scales keep covering its weights (ours).
constexpr double kEnergyFloor = 1e-3;

/// The weight of each element of `w` in its layer's output error: the
/// energy E[x_c^2] of the input channel it multiplies (ChannelEnergy),
/// plus kEnergyFloor of the mean. Empty (every element alike) without a
/// calibration that fits the weight's shape.
std::vector<float> elementWeights(const DenseWeight &w, const ChannelEnergy *ce) {
  if (!ce || ce->axis < 0 || static_cast<size_t>(ce->axis) >= w.shape.size())
    return {};
  auto axis = static_cast<size_t>(ce->axis);
  int64_t size = w.shape[axis];
  if (static_cast<int64_t>(ce->energy.size()) != size || size == 0)
    return {};
  double mean = 0;
  for (double e : ce->energy)
    mean += e;
  mean /= static_cast<double>(size);
  if (!(mean > 0) || !std::isfinite(mean))
    return {};
  int64_t stride = 1;
  for (size_t a = axis + 1; a < w.shape.size(); ++a)
    stride *= w.shape[a];
  std::vector<float> out(w.values.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(
        ce->energy[static_cast<size_t>((static_cast<int64_t>(i) / stride) % size)] +
        kEnergyFloor * mean);
  return out;
}

/// A rewrite's error against the dense weights it replaces: relative RMS
/// over the weights, and over the layer's output (each element's squared
/// error weighted by its input channel's energy; the weight error when
/// there is no calibration).
struct Errors {
  double weight = 0, output = 0;
  /// The output error on held-out rows (ChannelEnergy::heldOut), measured
  /// where feedback fitted the indices to the calibration's; -1 otherwise.
  double heldOut = -1;
  /// The error auto compares: on held-out rows where measured.
  double decisive() const { return heldOut >= 0 ? heldOut : output; }
};

double relative(double err2, double norm2) {
  return norm2 > 0 ? std::sqrt(err2 / norm2) : (err2 > 0 ? INFINITY : 0);
}

Errors measureErrors(const std::vector<float> &dense, const std::vector<float> &back,
                     const std::vector<float> &ew) {
  double e2 = 0, n2 = 0, we2 = 0, wn2 = 0;
  for (size_t i = 0; i < dense.size(); ++i) {
    double d = static_cast<double>(back[i]) - dense[i];
    double v = static_cast<double>(dense[i]) * dense[i];
    e2 += d * d;
    n2 += v;
    if (!ew.empty()) {
      we2 += ew[i] * d * d;
      wn2 += ew[i] * v;
    }
  }
  Errors out;
  out.weight = relative(e2, n2);
  out.output = ew.empty() ? out.weight : relative(we2, wn2);
  return out;
}

/// One weight rewritten to per-channel integers.
struct PerChannel {
  std::vector<float> q;      ///< integer values, as floats
  std::vector<float> scales; ///< one per row, rounded to the scale dtype
  std::vector<float> back;   ///< q * scale as the model reads it
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
  out.back.resize(w.values.size());
  out.scales.resize(static_cast<size_t>(rows));
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
    float *back = out.back.data() + r * cols;
    float inv = 1.0f / s;
    for (int64_t c = 0; c < cols; ++c) {
      float x = wr[c] * inv;
      // Round half away from zero, clamped to the integer range.
      float q = x >= 0 ? std::floor(x + 0.5f) : -std::floor(-x + 0.5f);
      qr[c] = std::clamp(q, qmin, qmax);
      back[c] = qr[c] * s;
    }
    // What the interpreter and the device read back: q * s, at the weight's
    // dtype.
    if (w.dtype == DType::F16)
      runtime::roundToHalfN(back, cols);
  }
  return out;
}

/// One weight rewritten to palettes: each group of `groupRows` rows (output
/// channels) shares `entries` values; every element is an index into its
/// group's palette.
struct Palettized {
  std::vector<uint8_t> indices; ///< packed LSB-first, `bits` per index
  std::vector<float> lut;       ///< groups x entries, rounded to the weight's dtype
  std::vector<float> back;      ///< each element's palette value
  int64_t groupRows = 1;
  bool finite = true;
  size_t nonFinite = 0; ///< values that are inf or NaN
  /// With error feedback: sum over rows of e^T H e (the layer's squared
  /// output error, from the feedback's own sums); -1 otherwise.
  double output2 = -1;
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

} // namespace

std::vector<float> fitPalette(const float *v, const float *weight, int64_t n, int entries) {
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
  auto wt_of = [&](int64_t i) { return weight ? static_cast<double>(weight[i]) : 1.0; };
  float lo = *std::min_element(v, v + n), hi = *std::max_element(v, v + n);
  c.assign(static_cast<size_t>(entries), lo);
  constexpr int kBins = 4096;
  std::vector<double> mass(kBins), sum(kBins);
  double toBin = kBins / (static_cast<double>(hi) - lo);
  for (int64_t i = 0; i < n; ++i) {
    int b = std::min(kBins - 1, static_cast<int>((static_cast<double>(v[i]) - lo) * toBin));
    double wi = wt_of(i);
    mass[static_cast<size_t>(b)] += wi;
    sum[static_cast<size_t>(b)] += wi * v[i];
  }
  // The histogram's non-empty bins, as points weighted by their mass.
  std::vector<double> pt, wt;
  for (int b = 0; b < kBins; ++b)
    if (mass[static_cast<size_t>(b)] > 0) {
      pt.push_back(sum[static_cast<size_t>(b)] / mass[static_cast<size_t>(b)]);
      wt.push_back(mass[static_cast<size_t>(b)]);
    }
  // Starts where squared error wants them: at the quantiles of the cube
  // root of the (weighted) density, which puts more values in the tails
  // than the density's own quantiles (the high-resolution optimum of a
  // quantizer of squared error).
  std::vector<double> cube(wt.size());
  double total = 0;
  for (size_t p = 0; p < wt.size(); ++p)
    total += cube[p] = std::cbrt(wt[p]);
  std::vector<double> cd(static_cast<size_t>(entries));
  double seen = 0;
  size_t p = 0;
  for (int k = 0; k < entries; ++k) {
    double target = (k + 0.5) * total / entries;
    while (p + 1 < pt.size() && seen + cube[p] < target)
      seen += cube[p++];
    cd[static_cast<size_t>(k)] = pt[p];
  }
  std::vector<double> accSum(cd.size()), accMass(cd.size());
  for (int iter = 0; iter < 100; ++iter) {
    std::fill(accSum.begin(), accSum.end(), 0.0);
    std::fill(accMass.begin(), accMass.end(), 0.0);
    size_t k = 0;
    for (size_t i = 0; i < pt.size(); ++i) {
      // Points and centroids are both sorted: the nearest only moves right.
      while (k + 1 < cd.size() && pt[i] > 0.5 * (cd[k] + cd[k + 1]))
        ++k;
      accSum[k] += pt[i] * wt[i];
      accMass[k] += wt[i];
    }
    double moved = 0;
    for (size_t j = 0; j < cd.size(); ++j)
      if (accMass[j] > 0) {
        double m = accSum[j] / accMass[j];
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
    std::fill(accMass.begin(), accMass.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      auto j = static_cast<size_t>(nearest(mid.data(), entries, v[i]));
      double wi = wt_of(i);
      accSum[j] += wi * v[i];
      accMass[j] += wi;
    }
    for (size_t j = 0; j < c.size(); ++j)
      if (accMass[j] > 0)
        c[j] = static_cast<float>(accSum[j] / accMass[j]);
    std::sort(c.begin(), c.end());
  }
  return c;
}

std::shared_ptr<const FeedbackFactor> feedbackFactor(const std::vector<double> &h, int64_t channels,
                                                     double damp) {
  const auto c = static_cast<size_t>(channels);
  if (channels <= 0 || h.size() != c * c)
    return nullptr;
  for (double v : h)
    if (!std::isfinite(v))
      return nullptr; // inputs that overflowed: no factor (nearest values)
  double mean = 0;
  for (size_t i = 0; i < c; ++i)
    mean += h[i * c + i];
  mean /= static_cast<double>(c);
  if (!(mean > 0) || !std::isfinite(mean))
    return nullptr;
  auto f = std::make_shared<FeedbackFactor>();
  f->channels = channels;
  f->order.resize(c);
  std::iota(f->order.begin(), f->order.end(), int64_t{0});
  std::stable_sort(f->order.begin(), f->order.end(), [&](int64_t a, int64_t b) {
    return h[static_cast<size_t>(a) * (c + 1)] > h[static_cast<size_t>(b) * (c + 1)];
  });
  // With H' = H + damp I in that order and R the reversal of the order,
  // R H' R = L L^T (Cholesky) gives H' = V V^T with V = R L R upper, so
  // H'^-1 = U^T U with U = V^-1 = R L^-1 R: one factorization and one
  // triangular inverse.
  std::vector<double> l(c * c), inv(c * c);
  for (double d = damp * mean; std::isfinite(d); d *= 10) {
    f->damp = d;
    for (size_t i = 0; i < c; ++i)
      for (size_t j = 0; j < c; ++j)
        l[i * c + j] = h[static_cast<size_t>(f->order[c - 1 - i]) * c +
                         static_cast<size_t>(f->order[c - 1 - j])] +
                       (i == j ? d : 0.0);
    bool ok = true;
    for (size_t j = 0; j < c && ok; ++j) {
      double *lj = l.data() + j * c;
      double s = lj[j];
      for (size_t k = 0; k < j; ++k)
        s -= lj[k] * lj[k];
      if (!(s > 0)) {
        ok = false;
        break;
      }
      lj[j] = std::sqrt(s);
      double invd = 1.0 / lj[j];
      for (size_t i = j + 1; i < c; ++i) {
        double *li = l.data() + i * c;
        double t = li[j];
        for (size_t k = 0; k < j; ++k)
          t -= li[k] * lj[k];
        li[j] = t * invd;
      }
    }
    if (!ok)
      continue;
    // L^-1 row by row: row i = (e_i - sum_{k<i} L[i,k] row k) / L[i,i].
    std::fill(inv.begin(), inv.end(), 0.0);
    for (size_t i = 0; i < c; ++i) {
      double *ri = inv.data() + i * c;
      const double *li = l.data() + i * c;
      for (size_t k = 0; k < i; ++k) {
        double a = li[k];
        const double *rk = inv.data() + k * c;
        for (size_t j = 0; j <= k; ++j)
          ri[j] -= a * rk[j];
      }
      ri[i] += 1.0;
      double invd = 1.0 / li[i];
      for (size_t j = 0; j <= i; ++j)
        ri[j] *= invd;
    }
    f->u.assign(c * c, 0.0f);
    for (size_t i = 0; i < c; ++i)
      for (size_t j = i; j < c; ++j)
        f->u[i * c + j] = static_cast<float>(inv[(c - 1 - i) * c + (c - 1 - j)]);
    return f;
  }
  return nullptr;
}

double assignWithFeedback(const float *w, int64_t rows, int64_t cols, const float *palette,
                          int entries, const FeedbackFactor &f, int *indices, float *values) {
  double total = 0;
  std::vector<float> c(palette, palette + entries), mid;
  midpoints(c, mid);
  const auto n = static_cast<size_t>(cols);
  // The rows together, in rounding order, so each row of U is read once.
  std::vector<float> x(static_cast<size_t>(rows) * n);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < n; ++k)
      x[static_cast<size_t>(r) * n + k] = w[r * cols + f.order[k]];
  for (size_t k = 0; k < n; ++k) {
    const float *uk = f.u.data() + k * n;
    float inv = 1.0f / uk[k];
    auto col = static_cast<size_t>(f.order[k]);
    for (int64_t r = 0; r < rows; ++r) {
      float *xr = x.data() + static_cast<size_t>(r) * n;
      int idx = nearest(mid.data(), entries, xr[k]);
      float err = (xr[k] - c[static_cast<size_t>(idx)]) * inv;
      total += static_cast<double>(err) * err;
      for (size_t j = k + 1; j < n; ++j)
        xr[j] -= err * uk[j];
      indices[static_cast<size_t>(r) * n + col] = idx;
      values[static_cast<size_t>(r) * n + col] = c[static_cast<size_t>(idx)];
    }
  }
  return total;
}

double outputError2(const std::vector<double> &h, const float *a, const float *b, int64_t rows,
                    int64_t cols) {
  const auto n = static_cast<size_t>(cols);
  // Blocks of rows: y = H d for each row of the block as sums of H's rows
  // (each read once a block, vectorizable), then d . y.
  constexpr int64_t kBlock = 16;
  std::vector<double> d(static_cast<size_t>(kBlock) * n), y(d.size());
  double total = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    auto m = static_cast<size_t>(std::min(kBlock, rows - r0));
    for (size_t k = 0; k < m * n; ++k)
      d[k] = static_cast<double>(a[static_cast<size_t>(r0) * n + k]) -
             b[static_cast<size_t>(r0) * n + k];
    std::fill(y.begin(), y.end(), 0.0);
    for (size_t i = 0; i < n; ++i) {
      const double *hi = h.data() + i * n;
      for (size_t r = 0; r < m; ++r) {
        double di = d[r * n + i];
        if (di == 0)
          continue;
        double *yr = y.data() + r * n;
        for (size_t j = 0; j < n; ++j)
          yr[j] += di * hi[j];
      }
    }
    for (size_t k = 0; k < m * n; ++k)
      total += d[k] * y[k];
  }
  return total;
}

namespace {

/// The palette values that minimize sum over rows of e^T H e, e each row's
/// difference from `w`, with each element's index held (least squares:
/// sum_r A_r^T H A_r c = sum_r A_r^T H w_r, A_r the rows' one-hot index
/// matrices). Values no element uses stay as they were. False when the
/// system is singular.
bool refitPalette(const std::vector<double> &h, double damp, const float *w, const int *idx,
                  int64_t rows, int64_t cols, std::vector<float> &palette) {
  const auto n = static_cast<size_t>(cols);
  const size_t k = palette.size();
  // s_r = A_r^T (H + damp I), k x n per row, for a block of rows at a time
  // (each row of H read once a block; at most kBlockBytes of them).
  constexpr size_t kBlockBytes = size_t{8} << 20;
  auto block = static_cast<int64_t>(std::max<size_t>(1, kBlockBytes / (k * n * sizeof(double))));
  std::vector<double> m(k * k, 0.0), rhs(k, 0.0),
      s(static_cast<size_t>(std::min(block, rows)) * k * n);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    auto nb = static_cast<size_t>(std::min(block, rows - r0));
    std::fill(s.begin(), s.end(), 0.0);
    for (size_t i = 0; i < n; ++i) {
      const double *hi = h.data() + i * n;
      for (size_t b = 0; b < nb; ++b) {
        const int *ir = idx + (static_cast<size_t>(r0) + b) * n;
        double *sa = s.data() + (b * k + static_cast<size_t>(ir[i])) * n;
        for (size_t j = 0; j < n; ++j)
          sa[j] += hi[j];
        sa[i] += damp; // H + damp I, the objective the feedback minimizes
      }
    }
    for (size_t b = 0; b < nb; ++b) {
      const int *ir = idx + (static_cast<size_t>(r0) + b) * n;
      const float *wr = w + (static_cast<size_t>(r0) + b) * n;
      for (size_t a = 0; a < k; ++a) {
        const double *sa = s.data() + (b * k + a) * n;
        double *ma = m.data() + a * k;
        double t = 0;
        for (size_t j = 0; j < n; ++j) {
          ma[static_cast<size_t>(ir[j])] += sa[j];
          t += sa[j] * wr[j];
        }
        rhs[a] += t;
      }
    }
  }
  double trace = 0;
  for (size_t a = 0; a < k; ++a)
    trace += m[a * k + a];
  if (!(trace > 0))
    return false;
  for (size_t a = 0; a < k; ++a) {
    if (m[a * k + a] > 0)
      continue;
    for (size_t b = 0; b < k; ++b)
      m[a * k + b] = m[b * k + a] = 0;
    m[a * k + a] = 1;
    rhs[a] = palette[a];
  }
  // Gaussian elimination with partial pivoting (k <= 256).
  for (size_t col = 0; col < k; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < k; ++r)
      if (std::fabs(m[r * k + col]) > std::fabs(m[piv * k + col]))
        piv = r;
    if (!(std::fabs(m[piv * k + col]) > 1e-12 * trace))
      return false;
    if (piv != col) {
      for (size_t j = 0; j < k; ++j)
        std::swap(m[col * k + j], m[piv * k + j]);
      std::swap(rhs[col], rhs[piv]);
    }
    for (size_t r = col + 1; r < k; ++r) {
      double f = m[r * k + col] / m[col * k + col];
      if (f == 0)
        continue;
      for (size_t j = col; j < k; ++j)
        m[r * k + j] -= f * m[col * k + j];
      rhs[r] -= f * rhs[col];
    }
  }
  std::vector<double> c(k);
  for (size_t a = k; a-- > 0;) {
    double t = rhs[a];
    for (size_t j = a + 1; j < k; ++j)
      t -= m[a * k + j] * c[j];
    c[a] = t / m[a * k + a];
    if (!std::isfinite(c[a]))
      return false;
  }
  for (size_t a = 0; a < k; ++a)
    palette[a] = static_cast<float>(c[a]);
  return true;
}

/// Error feedback for one weight: its linear's H and the factor of it.
struct FeedbackInput {
  const std::vector<double> *h = nullptr;
  const FeedbackFactor *factor = nullptr;
  bool refit = false;
};

/// Palettization of `w` with 2^bits values per group of `group` rows (the
/// largest divisor of the row count not above `group`), each palette fitted
/// with the elements weighted by `ew` (elementWeights; empty: alike).
/// Palette values are rounded to the weight's dtype before the indices are
/// chosen, so the error is the one the model will have. Groups are fitted in
/// parallel on the interpreter's threads.
Palettized palettizeRows(const DenseWeight &w, int bits, int64_t group,
                         const std::vector<float> &ew, const FeedbackInput &fb = {}) {
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
  out.back.resize(static_cast<size_t>(n));
  std::vector<double> groupError2(fb.factor ? static_cast<size_t>(groups) : 0);
  auto fit = [&](int64_t first, int64_t last) {
    std::vector<float> mid, fbVal;
    std::vector<int> fbIdx;
    double fbError2 = 0;
    for (int64_t k = first; k < last; ++k) {
      const float *v = w.values.data() + k * m;
      std::vector<float> c = fitPalette(v, ew.empty() ? nullptr : ew.data() + k * m, m, entries);
      auto toDtype = [&](std::vector<float> &p) {
        if (w.dtype == DType::F16)
          runtime::roundToHalfN(p.data(), static_cast<int64_t>(p.size()));
        std::sort(p.begin(), p.end());
      };
      toDtype(c);
      midpoints(c, mid);
      if (fb.factor) {
        // Indices by error feedback; then, with refit, the palette refitted
        // to them by least squares and the indices chosen again, kept if
        // the layer's output error is lower.
        fbIdx.resize(static_cast<size_t>(m));
        fbVal.resize(static_cast<size_t>(m));
        fbError2 = assignWithFeedback(v, g, cols, c.data(), entries, *fb.factor, fbIdx.data(),
                                      fbVal.data());
        if (fb.refit) {
          std::vector<float> c2 = c;
          if (refitPalette(*fb.h, fb.factor->damp, v, fbIdx.data(), g, cols, c2)) {
            toDtype(c2);
            std::vector<int> idx2(static_cast<size_t>(m));
            std::vector<float> val2(static_cast<size_t>(m));
            double e2 = assignWithFeedback(v, g, cols, c2.data(), entries, *fb.factor, idx2.data(),
                                           val2.data());
            if (e2 < fbError2) {
              fbError2 = e2;
              c = std::move(c2);
              fbIdx = std::move(idx2);
              fbVal = std::move(val2);
            }
          }
        }
      }
      if (fb.factor) {
        // sum e^T H e = sum e^T (H + damp I) e - damp |e|^2.
        double d2 = 0;
        for (int64_t i = 0; i < m; ++i) {
          double d = static_cast<double>(v[i]) - fbVal[static_cast<size_t>(i)];
          d2 += d * d;
        }
        groupError2[static_cast<size_t>(k)] = fbError2 - fb.factor->damp * d2;
      }
      for (int64_t i = 0; i < m; ++i) {
        int idx = fb.factor ? fbIdx[static_cast<size_t>(i)] : nearest(mid.data(), entries, v[i]);
        // Index e's bits start at bit e * bits (LSB-first) and may run
        // into the next byte.
        uint64_t bit = static_cast<uint64_t>(k * m + i) * static_cast<uint64_t>(bits);
        unsigned shifted = static_cast<unsigned>(idx) << (bit % 8);
        out.indices[bit / 8] |= static_cast<uint8_t>(shifted);
        if (shifted >> 8)
          out.indices[bit / 8 + 1] |= static_cast<uint8_t>(shifted >> 8);
        out.back[static_cast<size_t>(k * m + i)] = c[static_cast<size_t>(idx)];
      }
      std::copy(c.begin(), c.end(), out.lut.begin() + k * entries);
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
  if (fb.factor) {
    out.output2 = 0;
    for (double e : groupError2)
      out.output2 += e;
  }
  return out;
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * v);
  return buf;
}

/// The forms auto chooses among, besides keeping the weight in fp16: it
/// takes the smallest whose output error is within max-error.
constexpr Target kAutoForms[] = {Target::Lut4, Target::C4w, Target::Lut6, Target::C8w,
                                 Target::Lut8};

/// Bytes of a weight of `n` elements in `rows` rows stored as `form`, its
/// palettes or scales `valueBytes` each (the weight's dtype for palettes,
/// the scale's for scales).
uint64_t formBytes(Target form, uint64_t n, int64_t rows, int64_t group, uint64_t valueBytes,
                   uint64_t scaleBytes) {
  if (isPalette(form)) {
    int64_t g = std::clamp<int64_t>(group, 1, std::max<int64_t>(rows, 1));
    while (rows % g)
      --g;
    int bits = paletteBits(form);
    return (n * static_cast<uint64_t>(bits) + 7) / 8 +
           static_cast<uint64_t>(rows / g) * (uint64_t{1} << bits) * valueBytes;
  }
  switch (form) {
  case Target::C4w:
    return (n + 1) / 2 + static_cast<uint64_t>(rows) * scaleBytes;
  case Target::C8w:
    return n + static_cast<uint64_t>(rows) * scaleBytes;
  default:
    return n * valueBytes;
  }
}

/// Bytes a weight's op stores, from its types: a dense const's values, or a
/// per-block weight's data, scales and offsets.
uint64_t storedBytesOf(const Operation &op, bool dense) {
  uint64_t bytes = 0;
  if (dense) {
    const Type &t = op.output()->type;
    if (auto n = t.numElements())
      bytes = static_cast<uint64_t>(*n) * dtypeBits(t.dtype()) / 8;
    return bytes;
  }
  for (std::string_view p : {"data", "scale", "offset"})
    if (const Type *t = op.inputType(p))
      if (auto n = t->numElements())
        bytes += (static_cast<uint64_t>(*n) * dtypeBits(t->dtype()) + 7) / 8;
  return bytes;
}

/// The fewest bits per weight `form` stores, before its palettes or scales
/// (auto: those of its smallest forms, 4); 0 for fp16, which keeps them.
int leastBits(Target form) {
  if (int bits = paletteBits(form))
    return bits;
  return form == Target::C8w ? 8 : form == Target::C4w || form == Target::Auto ? 4 : 0;
}

/// Keeps the forms worth stepping down to, smallest first: a form with as
/// many bytes or more and no less error than another (c4w beside lut4, of
/// the same bytes) is never the better step.
void keepFrontier(std::vector<std::tuple<Target, uint64_t, double>> &forms) {
  std::stable_sort(forms.begin(), forms.end(),
                   [](const auto &a, const auto &b) { return std::get<1>(a) < std::get<1>(b); });
  std::vector<std::tuple<Target, uint64_t, double>> kept;
  for (const auto &f : forms) {
    if (!kept.empty() && std::get<2>(kept.back()) <= std::get<2>(f))
      continue; // more bytes for no less error
    if (!kept.empty() && std::get<1>(kept.back()) == std::get<1>(f))
      kept.pop_back(); // as many bytes for more error
    kept.push_back(f);
  }
  forms = std::move(kept);
}

class RequantizePass : public Pass {
public:
  explicit RequantizePass(const PassOptions &options)
      : target_(parseTarget(options.string("to"))), group_(options.integer("group")),
        calibration_(options.context().calibration) {
    if (group_ < 1)
      throw InputError("requantize: option 'group': expected a positive row count, found " +
                       std::to_string(group_));
    std::string e = options.string("max-error");
    char *end = nullptr;
    maxError_ = std::strtod(e.c_str(), &end);
    if (e.empty() || *end || !(maxError_ >= 0))
      throw InputError("requantize: option 'max-error': expected a non-negative number, "
                       "found '" +
                       e + "'");
    std::string which = options.string("weights");
    if (which != "per-block" && which != "all")
      throw InputError("requantize: option 'weights': expected per-block or all, found '" + which +
                       "'");
    allWeights_ = which == "all";
    feedback_ = options.flag("feedback");
    refit_ = options.flag("refit");
    feedbackWidth_ = options.integer("feedback-max-inputs");
    if (feedbackWidth_ < 1)
      throw InputError("requantize: option 'feedback-max-inputs': expected a positive count, "
                       "found " +
                       std::to_string(feedbackWidth_));
    std::string dp = options.string("damp");
    for (size_t at = 0; at <= dp.size();) {
      size_t end = std::min(dp.find(',', at), dp.size());
      std::string one = dp.substr(at, end - at);
      char *dend = nullptr;
      double v = std::strtod(one.c_str(), &dend);
      if (one.empty() || *dend || !(v > 0) || !std::isfinite(v))
        throw InputError("requantize: option 'damp': expected positive numbers separated by "
                         "commas, found '" +
                         dp + "'");
      damps_.push_back(v);
      at = end + 1;
    }
    std::string b = options.string("budget");
    if (!b.empty()) {
      std::optional<uint64_t> bytes = runtime::MemoryBudget::parseLimit(b);
      if (!bytes || !*bytes)
        throw InputError("requantize: option 'budget': expected a size such as 1G, 500M or "
                         "123456789, found '" +
                         b + "'");
      budget_ = *bytes;
      budgetGiven_ = true;
    }
  }
  std::string_view name() const override { return "requantize"; }
  void run(Model &model, PassResult &result) override;

private:
  /// What one weight became (shared by every op that decodes the same data).
  /// A constant to write once the form is taken.
  struct Pending {
    std::optional<Type> type;
    std::vector<uint8_t> bytes;
    ConstantRef ref;
  };
  struct Done {
    Target to = Target::Fp16;
    bool keep = false;    ///< a dense weight left as it is
    Pending dense;        ///< Fp16
    Pending data, scales; ///< C8w / C4w
    Pending indices, lut; ///< Lut4 / Lut6 / Lut8
    Errors error;
    uint64_t bytesBefore = 0, bytesAfter = 0;
    size_t nonFinite = 0; ///< values that are inf or NaN (the weight stays dense)
    /// Its linear's H was at hand (feedback): palette indices chosen by
    /// error feedback, the output error measured with the whole H.
    bool fed = false;
    /// The damping of the H its palette indices were fed through; -1 if none.
    double damp = -1;
  };
  /// One weight to rewrite: the first op that makes it, and what it became.
  struct Item {
    Operation *op = nullptr;
    std::string function;
    bool denseSource = false; ///< a const (requantize weights=all), not per-block
    uint64_t elements = 0;
    const ChannelEnergy *energy = nullptr;
    Done done;
    /// auto: the forms measured before the one taken, smallest first
    /// (form, bytes, output error), all above max-error.
    std::vector<std::tuple<Target, uint64_t, double>> smaller;
  };
  /// `item`'s weight as `to`; a palette fed through each of damps_[first,
  /// last) in turn, the lowest held-out error kept (ties: the earlier).
  Done rewrite(const Item &item, const DenseWeight &w, const std::vector<float> &ew, Target to,
               size_t first = 0, size_t last = SIZE_MAX);
  /// The constant of `p`, made in the pass's store the first time.
  ConstantRef constantOf(Pending &p) {
    if (!p.ref) {
      p.ref = makeWeightConstant(store_, *p.type, std::move(p.bytes));
      p.bytes = {};
    }
    return p.ref;
  }
  /// Rewrites item.op's weight to `to` (auto: the smallest within max-error).
  void choose(Item &item, Target to, PassResult &result);
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

  /// Error feedback for `item`'s weight `w`: its linear's H and the factor
  /// (the last one kept: the layers reading one activation come together);
  /// null factor when off or not calibrated with a second moment.
  FeedbackInput feedbackFor(const Item &item, const DenseWeight &w, size_t damp = 0);
  /// The held-out moment of `item`'s linear, its H in heldH_ (the last one
  /// kept, as feedbackFor keeps its); null when there is none.
  const InputMoment *heldOutFor(const Item &item, const DenseWeight &w);

  Target target_;
  int64_t group_;
  bool feedback_ = false, refit_ = false;
  /// H's dampings (option damp): the first, or with held-out rows each in
  /// turn, the lowest output error there kept.
  std::vector<double> damps_;
  /// Linears with more inputs than this get no feedback (its factor's work
  /// grows as the cube of the inputs); wider ones met, counted.
  int64_t feedbackWidth_ = 2304;
  std::set<const Operation *> tooWide_;
  /// Linears fed from fewer input rows than inputs: (rows, inputs).
  std::map<const Operation *, std::pair<int64_t, int64_t>> underSampled_;
  const InputMoment *cachedMoment_ = nullptr;
  std::vector<double> cachedH_;
  /// By damping, made when first asked for (null: H could not be factored).
  std::vector<std::optional<std::shared_ptr<const FeedbackFactor>>> cachedFactors_;
  std::map<const Operation *, double> norms_; ///< sum_r w_r^T H w_r by weight
  const InputMoment *heldMoment_ = nullptr;
  std::vector<double> heldH_;
  std::map<const Operation *, double> heldNorms_; ///< norms_ over the held-out H
  const WeightCalibration *calibration_;
  double maxError_ = 0;
  bool allWeights_ = false;
  uint64_t budget_ = ane::kPhoneModelWeightBytes;
  bool budgetGiven_ = false;
  std::shared_ptr<OwnedBlobs> store_ = newWeightStore("requantized");
};

/// outputError2 over the rows of `a` and `b` on the interpreter's threads
/// (each block of rows' sum kept apart and added in order: the same on any
/// thread count).
double rowsError2(const std::vector<double> &h, const std::vector<float> &a,
                  const std::vector<float> &b, int64_t rows, int64_t cols) {
  constexpr int64_t kRows = 16;
  int64_t blocks = (rows + kRows - 1) / kRows;
  std::vector<double> per(static_cast<size_t>(blocks));
  runtime::ThreadScope threads(0);
  runtime::parallelFor(blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      per[static_cast<size_t>(k)] =
          outputError2(h, a.data() + k * kRows * cols, b.data() + k * kRows * cols,
                       std::min(kRows, rows - k * kRows), cols);
  });
  double total = 0;
  for (double e : per)
    total += e;
  return total;
}

FeedbackInput RequantizePass::feedbackFor(const Item &item, const DenseWeight &w, size_t damp) {
  FeedbackInput out;
  const ChannelEnergy *e = item.energy;
  // Not on a seeded draw: a few random rows would fit the palettes to
  // themselves.
  if (!feedback_ || !calibration_ || calibration_->random || !e || !e->moment || e->axis != 1 ||
      w.shape.size() != 2 || e->moment->channels != w.shape[1])
    return out;
  if (e->moment->channels > feedbackWidth_) {
    tooWide_.insert(item.op);
    return out;
  }
  if (cachedMoment_ != e->moment.get()) {
    cachedMoment_ = e->moment.get();
    cachedH_ = e->moment->matrix();
    cachedFactors_.assign(damps_.size(), std::nullopt);
  }
  std::optional<std::shared_ptr<const FeedbackFactor>> &factor = cachedFactors_[damp];
  if (!factor)
    factor = feedbackFactor(cachedH_, e->moment->channels, damps_[damp]);
  if (!*factor)
    return out;
  if (e->moment->rows < e->moment->channels)
    underSampled_[item.op] = {e->moment->rows, e->moment->channels};
  out.h = &cachedH_;
  out.factor = factor->get();
  out.refit = refit_;
  return out;
}

const InputMoment *RequantizePass::heldOutFor(const Item &item, const DenseWeight &w) {
  const ChannelEnergy *e = item.energy;
  if (!e || !e->heldOut || e->heldOut->rows == 0 || w.shape.size() != 2 ||
      e->heldOut->channels != w.shape[1])
    return nullptr;
  if (heldMoment_ != e->heldOut.get()) {
    heldMoment_ = e->heldOut.get();
    heldH_ = e->heldOut->matrix();
  }
  return heldMoment_;
}

RequantizePass::Done RequantizePass::rewrite(const Item &item, const DenseWeight &w,
                                             const std::vector<float> &ew, Target to, size_t first,
                                             size_t last) {
  Done d;
  const Operation &op = *item.op;
  d.bytesBefore = storedBytesOf(op, item.denseSource);
  // Scales in the per-block weight's scale dtype; a dense weight's own.
  const Type *scaleType = item.denseSource ? nullptr : op.inputType("scale");
  DType sdt = item.denseSource                           ? w.dtype
              : scaleType && isFloat(scaleType->dtype()) ? scaleType->dtype()
                                                         : DType::F16;
  // With error feedback the layer's output error is measured with the whole
  // H (its cross terms are what feedback uses), for every form alike.
  FeedbackInput fb = feedbackFor(item, w);
  d.fed = fb.factor != nullptr;
  // sum_r w_r^T H w_r of the weight, computed once per weight and H.
  auto normOver = [&](std::map<const Operation *, double> &norms, const std::vector<double> &h) {
    auto [it, fresh] = norms.try_emplace(item.op, 0.0);
    if (fresh) {
      std::vector<float> zero(w.values.size(), 0.0f);
      it->second = rowsError2(h, w.values, zero, w.shape[0], w.shape[1]);
    }
    return it->second;
  };
  auto errors = [&](const std::vector<float> &back, double output2) {
    Errors e = measureErrors(w.values, back, ew);
    if (fb.factor) {
      if (output2 < 0)
        output2 = rowsError2(*fb.h, w.values, back, w.shape[0], w.shape[1]);
      e.output = relative(std::max(output2, 0.0), normOver(norms_, *fb.h));
      if (heldOutFor(item, w))
        e.heldOut =
            relative(std::max(rowsError2(heldH_, w.values, back, w.shape[0], w.shape[1]), 0.0),
                     normOver(heldNorms_, heldH_));
    }
    return e;
  };
  if (isPalette(to)) {
    int bits = paletteBits(to);
    // The first damping's fit (the pass's first where that one's H could not
    // be factored).
    size_t from = first;
    FeedbackInput fit = first ? feedbackFor(item, w, first) : fb;
    if (!fit.factor) {
      fit = fb;
      from = 0;
    }
    Palettized pal = palettizeRows(w, bits, group_, ew, fit);
    Errors err;
    if (pal.finite) {
      err = errors(pal.back, pal.output2);
      d.damp = fit.factor ? damps_[from] : -1;
    }
    // With held-out rows, each damping in turn: the one whose indices keep
    // the output error lowest on rows the fit never saw.
    for (size_t k = first + 1;
         pal.finite && fb.factor && err.heldOut >= 0 && k < std::min(last, damps_.size()); ++k) {
      FeedbackInput other = feedbackFor(item, w, k);
      if (!other.factor)
        continue;
      Palettized p = palettizeRows(w, bits, group_, ew, other);
      if (!p.finite)
        continue;
      Errors e = errors(p.back, p.output2);
      if (e.heldOut < err.heldOut) {
        pal = std::move(p);
        err = e;
        d.damp = damps_[k];
      }
    }
    if (pal.finite) {
      d.to = to;
      std::vector<int64_t> lshape(w.shape.size() + 2, 1);
      lshape[0] = w.shape[0] / pal.groupRows;
      lshape[w.shape.size()] = int64_t{1} << bits;
      std::vector<uint8_t> lb = packElements(pal.lut, w.dtype);
      d.bytesAfter = pal.indices.size() + lb.size();
      d.error = err;
      d.indices = {Type::tensor(bits == 4   ? DType::U4
                                : bits == 6 ? DType::U6
                                            : DType::U8,
                                w.shape),
                   std::move(pal.indices), nullptr};
      d.lut = {Type::tensor(w.dtype, lshape), std::move(lb), nullptr};
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
    }
  }
  d.to = to;
  if (to == Target::Fp16) {
    if (!d.nonFinite)
      d.nonFinite = countNonFinite(w);
    if (item.denseSource) {
      d.keep = true; // already dense: nothing to write
      d.bytesAfter = d.bytesBefore;
      return d;
    }
    std::vector<uint8_t> bytes = packElements(w.values, w.dtype);
    d.bytesAfter = bytes.size();
    d.dense = {Type::tensor(w.dtype, w.shape), std::move(bytes), nullptr};
    return d;
  }
  DType qt = to == Target::C4w ? DType::I4 : DType::I8;
  std::vector<uint8_t> qb = packElements(pc->q, qt);
  std::vector<int64_t> sshape(w.shape.size(), 1);
  sshape[0] = w.shape[0];
  std::vector<uint8_t> sb = packElements(pc->scales, sdt);
  d.bytesAfter = qb.size() + sb.size();
  d.error = errors(pc->back, -1);
  d.data = {Type::tensor(qt, w.shape), std::move(qb), nullptr};
  d.scales = {Type::tensor(sdt, sshape), std::move(sb), nullptr};
  return d;
}

void RequantizePass::choose(Item &item, Target to, PassResult &result) {
  std::string why;
  std::optional<DenseWeight> w = denseWeight(*item.op, &why);
  if (!w || w->shape.empty()) {
    result.diagnostics.push_back(
        {Diagnostic::Severity::Warning, item.function, item.op->name,
         "weight left as is: " + (why.empty() ? std::string("no shape") : why)});
    item.op = nullptr;
    return;
  }
  item.elements = w->values.size();
  std::vector<float> ew = elementWeights(*w, item.energy);
  if (to != Target::Auto) {
    item.done = rewrite(item, *w, ew, to);
    return;
  }
  // The forms smallest first; the first within max-error is taken.
  int64_t rows = w->shape[0];
  uint64_t valueBytes = dtypeBits(w->dtype) / 8;
  std::vector<std::pair<uint64_t, Target>> order;
  for (Target f : kAutoForms)
    order.emplace_back(formBytes(f, item.elements, rows, group_, valueBytes, 2), f);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  item.smaller.clear();
  // Forms measured with the first damping; the one taken with the others
  // too (a palette's error can only fall).
  for (const auto &[bytes, f] : order) {
    Done d = rewrite(item, *w, ew, f, 0, 1);
    if (d.nonFinite) { // no form holds inf or NaN: the weight stays dense
      item.done = std::move(d);
      item.smaller.clear();
      return;
    }
    if (d.error.decisive() <= maxError_) {
      if (d.damp > 0 && damps_.size() > 1 && d.error.heldOut >= 0) {
        Done rest = rewrite(item, *w, ew, f, 1);
        if (rest.error.heldOut >= 0 && rest.error.heldOut < d.error.heldOut)
          d = std::move(rest);
      }
      item.done = std::move(d);
      keepFrontier(item.smaller);
      return;
    }
    item.smaller.emplace_back(f, d.bytesAfter, d.error.decisive());
  }
  item.done = rewrite(item, *w, ew, Target::Fp16);
  keepFrontier(item.smaller);
}

/// Identity of a weight's stored data, so a weight bound by several
/// functions is rewritten once.
std::pair<const void *, uint64_t> dataKey(const Operation &op) {
  const Constant *c = op.type == "const" ? op.attribute("val") : paramConstant(op, "data");
  if (c && c->kind == Constant::Kind::Blob && c->blob.store)
    return {c->blob.store.get(), c->blob.offset};
  return {c ? static_cast<const void *>(c) : static_cast<const void *>(&op), 0};
}

/// A const of a float dtype and rank 2 or more that some linear, conv or
/// matmul reads as its weight (weightInputOf), and that nothing else reads
/// but gathers, as the table they look rows up in: a tied embedding, whose
/// rows are the LM head's (SmolLM2-135M). A table only gathers
/// read (an untied embedding, RoPE's cos/sin) is not a layer weight.
bool isLayerWeight(const Operation &op, const UseMap &uses) {
  if (op.type != "const" || op.outputs.size() != 1)
    return false;
  const Value *v = op.output();
  if (!v->type.isTensor() || !isFloat(v->type.dtype()) || v->type.shape().size() < 2)
    return false;
  const std::vector<Use> &all = uses.uses(v);
  if (all.empty())
    return false;
  bool layer = false;
  for (const Use &u : all) {
    if (u.isBlockOutput())
      return false;
    const std::string &param = u.user->inputs[u.input].name;
    if (u.user->type == "gather" && param == "x")
      continue;
    std::optional<WeightInput> wi = weightInputOf(*u.user);
    if (!wi || param != wi->weight)
      return false;
    layer = true;
  }
  return layer;
}

std::string bitsText(uint64_t bytes, uint64_t elements) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f",
                elements ? 8.0 * static_cast<double>(bytes) / static_cast<double>(elements) : 0.0);
  return buf;
}

/// How the output errors of `measured` weights were measured, `fed` of
/// them with their linear's whole H.
std::string outputErrorText(size_t fed, size_t measured) {
  if (!fed)
    return "weighted by input channel energy";
  if (fed == measured)
    return "over the inputs' second moment";
  return "over the inputs' second moment for " + std::to_string(fed) +
         ", weighted by input channel energy for the others";
}

std::string formName(Target t) { return std::string(kForms[static_cast<size_t>(t)].name); }

void RequantizePass::run(Model &model, PassResult &result) {
  // The weights, each once, in program order.
  std::map<std::pair<const void *, uint64_t>, size_t> index;
  std::vector<Item> items;
  for (auto &fn : model.program->functions) {
    std::optional<UseMap> uses;
    if (allWeights_)
      uses.emplace(*fn);
    walk(*fn->body, [&](Operation &op) {
      bool perBlock = op.type == "constexpr_blockwise_shift_scale" &&
                      weightSchemeOf(op) == WeightScheme::Blockwise;
      bool dense = !perBlock && uses && isLayerWeight(op, *uses);
      if (!perBlock && !dense)
        return;
      auto key = dataKey(op);
      if (index.count(key))
        return;
      index.emplace(key, items.size());
      Item item;
      item.op = &op;
      item.function = fn->name;
      item.denseSource = dense;
      if (calibration_) {
        auto it = calibration_->weights.find(op.name);
        if (it != calibration_->weights.end())
          item.energy = &it->second;
      }
      items.push_back(std::move(item));
    });
  }
  // The program's weights as stored before the pass rewrites any.
  WeightCount weights = countWeights(*model.program);
  // A budget that no choice can meet is refused before any weight is read
  // or fitted (fitting a 0.5B model's weights takes half an hour): each at the
  // fewest bits its forms store, palettes and scales left out, with the
  // weights the pass leaves as they are.
  if ((target_ == Target::Auto || budgetGiven_) && leastBits(target_) > 0) {
    uint64_t before = 0, least = 0;
    for (const Item &item : items) {
      before += storedBytesOf(*item.op, item.denseSource);
      if (auto n = item.op->output()->type.numElements())
        least += (static_cast<uint64_t>(*n) * static_cast<uint64_t>(leastBits(target_)) + 7) / 8;
    }
    uint64_t others = weights.storedBytes > before ? weights.storedBytes - before : 0;
    if (others + least > budget_)
      throw InputError("requantize: option 'budget': expected weights within " +
                       humanBytes(budget_) + ", found at least " + humanBytes(others + least) +
                       " before fitting any: " + std::to_string(items.size()) + " weights at " +
                       std::to_string(leastBits(target_)) + " bits each (" +
                       (target_ == Target::Auto ? std::string("the fewest any form stores")
                                                : "what " + formName(target_) + " stores") +
                       ", palettes and scales left out) and " + humanBytes(others) +
                       " not requantized");
  }
  // The weights whose linears read one activation (q, k and v) one after
  // another, so its H is factored once (feedbackFor keeps the last).
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::map<const InputMoment *, size_t> firstOf;
  auto momentOf = [&](size_t i) -> const InputMoment * {
    return items[i].energy ? items[i].energy->moment.get() : nullptr;
  };
  for (size_t i : order)
    firstOf.try_emplace(momentOf(i), i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return firstOf[momentOf(a)] < firstOf[momentOf(b)]; });
  for (size_t i : order)
    choose(items[i], target_, result);

  // The budget: the weights left as they are plus the rewritten ones.
  uint64_t before = 0, after = 0;
  for (const Item &item : items)
    if (item.op) {
      before += item.done.bytesBefore;
      after += item.done.bytesAfter;
    }
  uint64_t others = weights.storedBytes > before ? weights.storedBytes - before : 0;
  size_t belowTarget = 0;
  if (target_ == Target::Auto && others + after > budget_) {
    // Over the budget: step down the weight whose next smaller form adds
    // the least squared output error per byte saved (every layer's relative
    // error counted alike), until the weights fit.
    auto cost = [](const Item &item) {
      const auto &[f, bytes, error] = item.smaller.back();
      double saved = static_cast<double>(item.done.bytesAfter) - static_cast<double>(bytes);
      double now = item.done.error.decisive();
      double added = error * error - now * now;
      return saved > 0 ? added / saved : INFINITY;
    };
    while (others + after > budget_) {
      Item *best = nullptr;
      for (Item &item : items)
        if (item.op && !item.smaller.empty() && (!best || cost(item) < cost(*best)))
          best = &item;
      if (!best)
        break;
      Target f = std::get<0>(best->smaller.back());
      best->smaller.pop_back();
      std::optional<DenseWeight> w = denseWeight(*best->op);
      after -= best->done.bytesAfter;
      best->done = rewrite(*best, *w, elementWeights(*w, best->energy), f);
      after += best->done.bytesAfter;
      ++belowTarget;
    }
  }
  if ((target_ == Target::Auto || budgetGiven_) && others + after > budget_)
    throw InputError("requantize: option 'budget': expected weights within " + humanBytes(budget_) +
                     ", found " + humanBytes(others + after) +
                     (target_ == Target::Auto ? " with every weight in its smallest form"
                                              : " with every weight in " + formName(target_)) +
                     " (" + humanBytes(others) + " of them not requantized)");

  // Each op takes what its weight became.
  size_t autoFed = 0, autoMeasured = 0, heldInAll = 0;
  for (auto &fn : model.program->functions) {
    size_t n = 0, toFp16 = 0, kept = 0, denseCount = 0;
    uint64_t fnBefore = 0, fnAfter = 0;
    double worst = 0, sum = 0, worstOut = 0, sumOut = 0, worstHeld = 0, sumHeld = 0;
    size_t held = 0;
    std::map<double, size_t> dampedBy; ///< fed palettes by H's damping
    std::string worstName, worstOutName, worstHeldName;
    size_t measured = 0, nonFinite = 0, fed = 0;
    std::string nonFiniteName;
    std::map<std::string, size_t> autoForms; // auto: weights per lossy form
    std::optional<UseMap> uses;
    if (allWeights_)
      uses.emplace(*fn);
    walk(*fn->body, [&](Operation &op) {
      bool perBlock = op.type == "constexpr_blockwise_shift_scale" &&
                      weightSchemeOf(op) == WeightScheme::Blockwise;
      if (!perBlock && !(uses && op.type == "const"))
        return;
      auto it = index.find(dataKey(op));
      if (it == index.end())
        return;
      Item &item = items[it->second];
      // A per-block weight's data is a const too: only the op that made
      // the item's weight takes it.
      if (!item.op || item.denseSource != (op.type == "const"))
        return;
      Done &d = item.done;
      ++n;
      denseCount += item.denseSource;
      if (d.nonFinite) {
        // Named, never dropped: the values stay what they were.
        if (!nonFinite)
          nonFiniteName = op.name;
        nonFinite += d.nonFinite;
        result.diagnostics.push_back(
            {Diagnostic::Severity::Warning, fn->name, op.name,
             std::string(item.denseSource ? "weight" : "per-block weight") + " holds " +
                 std::to_string(d.nonFinite) + " non-finite value" + (d.nonFinite == 1 ? "" : "s") +
                 " (inf or NaN), kept as they are in a dense weight"});
      }
      fnBefore += d.bytesBefore;
      fnAfter += d.bytesAfter;
      if (d.keep) {
        ++kept;
        return;
      }
      if (d.to == Target::Fp16) {
        ++toFp16;
        result.exactInFp16 = true;
        op.type = "const";
        op.inputs.clear();
        op.attributes.clear();
        op.attributes["val"] = constantOf(d.dense);
        return;
      }
      result.lossy = true;
      ++measured;
      fed += d.fed;
      if (d.damp > 0)
        ++dampedBy[d.damp];
      ++autoForms[formName(d.to)];
      sum += d.error.weight;
      sumOut += d.error.output;
      if (d.error.weight >= worst) {
        worst = d.error.weight;
        worstName = op.name;
      }
      if (d.error.output >= worstOut) {
        worstOut = d.error.output;
        worstOutName = op.name;
      }
      if (d.error.heldOut >= 0) {
        ++held;
        sumHeld += d.error.heldOut;
        if (d.error.heldOut >= worstHeld) {
          worstHeld = d.error.heldOut;
          worstHeldName = op.name;
        }
      }
      op.inputs.clear();
      op.attributes.clear();
      if (isPalette(d.to)) {
        op.type = "constexpr_lut_to_dense";
        op.setInput("indices", Binding::of(constantOf(d.indices)));
        op.setInput("lut", Binding::of(constantOf(d.lut)));
        return;
      }
      op.type = "constexpr_blockwise_shift_scale";
      op.setInput("data", Binding::of(constantOf(d.data)));
      op.setInput("scale", Binding::of(constantOf(d.scales)));
    });
    if (!n)
      continue;
    std::string what = denseCount == 0 ? " per-block weight" : " weight";
    std::string line =
        "requantize: " + fn->name + ": " + std::to_string(n) + what + (n == 1 ? "" : "s") +
        (denseCount && denseCount < n ? " (" + std::to_string(n - denseCount) + " per-block, " +
                                            std::to_string(denseCount) + " dense)"
                                      : std::string()) +
        " -> ";
    size_t pcCount = n - toFp16 - kept;
    std::vector<std::string> parts;
    if (pcCount && target_ != Target::Auto)
      parts.push_back(std::to_string(pcCount) + " " + formText());
    if (target_ == Target::Auto)
      for (const auto &[form, count] : autoForms)
        parts.push_back(std::to_string(count) + " " + form);
    if (toFp16)
      parts.push_back(std::to_string(toFp16) + " fp16 (exact)");
    if (kept)
      parts.push_back(std::to_string(kept) + " kept dense");
    for (size_t i = 0; i < parts.size(); ++i)
      line += (i ? ", " : "") + parts[i];
    line += "; weights " + humanBytes(fnBefore) + " -> " + humanBytes(fnAfter);
    if (nonFinite)
      line += "; " + std::to_string(nonFinite) + " non-finite value" + (nonFinite == 1 ? "" : "s") +
              " kept (first in '" + nonFiniteName + "')";
    if (measured) {
      line += "; weight error (relative RMS) mean " + percent(sum / measured) + ", max " +
              percent(worst) + " ('" + worstName + "')";
      if (calibration_)
        line += "; output error (relative RMS, " + outputErrorText(fed, measured) + ") mean " +
                percent(sumOut / measured) + ", max " + percent(worstOut) + " ('" + worstOutName +
                "')";
      if (held)
        line += "; on held-out rows (" + calibration_->heldOutSource + ") for " +
                std::to_string(held) + " of them: mean " + percent(sumHeld / held) + ", max " +
                percent(worstHeld) + " ('" + worstHeldName + "')";
      if (fed) {
        std::string damping;
        if (dampedBy.size() > 1) {
          std::string each, counts;
          for (const auto &[v, count] : dampedBy) {
            each += (each.empty() ? "" : " or ") + percent(v);
            counts += (counts.empty() ? "" : ", ") + percent(v) + " for " + std::to_string(count);
          }
          damping = each +
                    " of its mean diagonal, whichever kept the error on held-out rows "
                    "lower: " +
                    counts;
        } else {
          damping = percent(dampedBy.empty() ? damps_[0] : dampedBy.begin()->first) +
                    " of its mean diagonal";
        }
        line += "; indices by error feedback on " + std::to_string(fed) + " linear" +
                (fed == 1 ? "" : "s") + " (H dampened by " + damping +
                (refit_ ? ", palettes refitted" : "") + ")";
      }
    }
    result.changes.push_back(line);
    autoFed += fed;
    autoMeasured += measured;
    heldInAll += held;
  }

  if (!tooWide_.empty())
    result.changes.push_back(
        "requantize: " + std::to_string(tooWide_.size()) + " linear" +
        (tooWide_.size() == 1 ? "" : "s") + " with more than " + std::to_string(feedbackWidth_) +
        " inputs fitted without error feedback (its factor's work grows as the cube of the "
        "inputs; feedback-max-inputs)");
  if (!underSampled_.empty()) {
    int64_t rows = std::numeric_limits<int64_t>::max(), inputs = 0;
    for (const auto &[op, ri] : underSampled_) {
      rows = std::min(rows, ri.first);
      inputs = std::max(inputs, ri.second);
    }
    result.changes.push_back(
        "requantize: " + std::to_string(underSampled_.size()) + " linear" +
        (underSampled_.size() == 1 ? "" : "s") + " fed from fewer input rows (" +
        std::to_string(rows) + ") than inputs (up to " + std::to_string(inputs) +
        "): their H has no information along the rest and the feedback fits the rows it saw" +
        (heldInAll
             ? std::string("; the errors on held-out rows above are what that gives elsewhere")
             : std::string("; their output errors are measured on those rows")) +
        "; calibrate on more tokens (fix --max-tokens, --window)");
  }
  // The whole program's bits per weight: the weights the pass chose for and
  // those it left as they are (norms, tables only gathers read, ...).
  std::string whole = "model weights " + humanBytes(others + after) + ", " +
                      bitsText(others + after, weights.denseElements) +
                      " bits per weight over all its " + std::to_string(weights.denseElements) +
                      " weights";
  if (target_ != Target::Auto) {
    if (before)
      result.changes.push_back("requantize: " + whole);
    return;
  }
  // auto: what each weight became, the bits and the budget met.
  std::map<std::string, size_t> counts;
  uint64_t elements = 0, bytes = 0;
  for (const Item &item : items) {
    if (!item.op)
      continue;
    const Done &d = item.done;
    std::string form = d.keep ? "fp16 (kept)" : formName(d.to);
    ++counts[form];
    elements += item.elements;
    bytes += d.bytesAfter;
    std::string line = "requantize: auto: '" + item.op->name + "' -> " + form + " (" +
                       bitsText(d.bytesAfter, item.elements) + " bits per weight";
    if (d.to != Target::Fp16)
      line +=
          ", weight error " + percent(d.error.weight) +
          (calibration_ ? ", output error " + percent(d.error.output) : std::string()) +
          (d.error.heldOut >= 0 ? ", on held-out rows " + percent(d.error.heldOut) : std::string());
    else if (!d.nonFinite)
      line += ", no smaller form within " + percent(maxError_);
    result.changes.push_back(line + ")");
  }
  std::string mix;
  size_t chosen = 0;
  for (const auto &[form, count] : counts) {
    mix += (mix.empty() ? "" : ", ") + std::to_string(count) + " " + form;
    chosen += count;
  }
  std::string line = "requantize: auto: " + mix + "; " + bitsText(bytes, elements) +
                     " bits per weight over these " + std::to_string(chosen) +
                     "; output error within " + percent(maxError_) +
                     (calibration_ ? " (" + outputErrorText(autoFed, autoMeasured) + ")"
                                   : std::string(" (of the weights)"));
  if (heldInAll)
    line += ", on held-out rows for the " + std::to_string(heldInAll) + " fitted by feedback (" +
            calibration_->heldOutSource + ")";
  if (belowTarget)
    line += " but for " + std::to_string(belowTarget) + " step" + (belowTarget == 1 ? "" : "s") +
            " down to meet the budget";
  line += "; " + whole + ", within the budget " + humanBytes(budget_) +
          (budgetGiven_ ? std::string(" (budget)") : std::string(" (ANE-PROG-001's iPhone limit)"));
  result.changes.push_back(line);
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
