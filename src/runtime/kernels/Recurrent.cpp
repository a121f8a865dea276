//===- Recurrent.cpp - Kernels of the recurrent layers lstm, gru, rnn -----===//
//
// The layers coremltools emits for torch.nn.LSTM and torch.nn.RNN converted
// from TorchScript (and gru, from Keras/TensorFlow or the MIL builder): x is
// (s, b, I), sequence first; the states are
// (b, DIRECTIONS*H) with the forward direction's H values first; weights are
// stacked per gate in the order the op defines (lstm: input, forget, output,
// cell; gru: reset, output, update) and `bias` is the sum of the input and
// recurrent biases (gru of iOS18 may keep them apart: input_bias and bias). Each step is
// two products over the batch (input and recurrent) added onto the bias, then
// the gates element by element. A "reverse" layer writes its sequence output in
// the order it steps (its first output is the last position's), as Core ML
// does; the backward half of a bidirectional lstm is aligned with the input
// positions, as torch.nn.LSTM's is.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/KernelUtil.h"

#include "runtime/kernels/Blas.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

namespace anefit::runtime {
namespace {

enum class Act { Sigmoid, Tanh, Relu, Linear, HardSigmoid };

/// The activation named by string parameter `param`.
Act activationArg(KernelContext &ctx, std::string_view param) {
  std::string name = ctx.strArg(param);
  if (name == "sigmoid")
    return Act::Sigmoid;
  if (name == "tanh")
    return Act::Tanh;
  if (name == "relu")
    return Act::Relu;
  if (name == "linear")
    return Act::Linear;
  if (name == "hard_sigmoid")
    return Act::HardSigmoid;
  ctx.fail(std::string(param) + " '" + name +
           "' is not supported (expected sigmoid, tanh, relu, linear or hard_sigmoid)");
}

/// Applies `act` to n values in place.
void apply(Act act, float *v, int64_t n) {
  switch (act) {
  case Act::Sigmoid:
    for (int64_t i = 0; i < n; ++i)
      v[i] = 1.0f / (1.0f + std::exp(-v[i]));
    return;
  case Act::Tanh:
    for (int64_t i = 0; i < n; ++i)
      v[i] = std::tanh(v[i]);
    return;
  case Act::Relu:
    for (int64_t i = 0; i < n; ++i)
      v[i] = std::max(v[i], 0.0f);
    return;
  case Act::Linear:
    return;
  case Act::HardSigmoid:
    for (int64_t i = 0; i < n; ++i)
      v[i] = std::clamp(0.2f * v[i] + 0.5f, 0.0f, 1.0f);
    return;
  }
}

/// The weights of one direction, as fp32 rows.
struct DirectionWeights {
  const float *wih = nullptr;      ///< (gates*H, I)
  const float *whh = nullptr;      ///< (gates*H, H)
  const float *bias = nullptr;     ///< gates*H, or null for zeros
  const float *peephole = nullptr; ///< 3*H (lstm), or null for zeros
  bool reverse = false;
};

/// The shapes every recurrent op shares, checked against its parameters.
struct RecurrentShape {
  int64_t steps = 0, batch = 0, input = 0, hidden = 0, directions = 1, gates = 1;
};

/// The values of `t` (parameter `p`), which must be floating point.
const float *floatsOf(KernelContext &ctx, const Tensor &t, std::string_view p) {
  if (t.dtype() != DType::F32)
    ctx.fail(std::string(p) + " must be fp16 or fp32, found " + std::string(dtypeName(t.dtype())));
  return t.data<float>();
}

int toInt(KernelContext &ctx, int64_t v) {
  if (v > INT_MAX)
    ctx.fail("dimension " + std::to_string(v) + " is too large for the interpreter");
  return static_cast<int>(v);
}

/// The `n` values of the optional parameter `p`, or null without it.
const float *optionalVector(KernelContext &ctx, const std::string &p, int64_t n) {
  if (!ctx.has(p))
    return nullptr;
  const Tensor &t = ctx.in(p);
  if (t.numElements() != n)
    ctx.fail(p + " must have " + std::to_string(n) + " values, found " +
             std::to_string(t.numElements()));
  return floatsOf(ctx, t, p);
}

/// Reads x, the weights of direction `suffix` ("" or "_back") and their
/// shapes; fails with what was expected and found.
DirectionWeights weightsOf(KernelContext &ctx, const RecurrentShape &rs, const std::string &suffix,
                           bool hasPeephole) {
  DirectionWeights w;
  int64_t g = rs.gates * rs.hidden;
  auto matrix = [&](const std::string &p, int64_t cols) {
    const Tensor &t = ctx.in(p);
    if (t.rank() != 2 || t.dim(0) != g || t.dim(1) != cols)
      ctx.fail(p + " must have shape (" + std::to_string(g) + ", " + std::to_string(cols) + ")");
    return floatsOf(ctx, t, p);
  };
  w.wih = matrix("weight_ih" + suffix, rs.input);
  w.whh = matrix("weight_hh" + suffix, rs.hidden);
  w.bias = optionalVector(ctx, "bias" + suffix, g);
  if (hasPeephole)
    w.peephole = optionalVector(ctx, "peephole" + suffix, 3 * rs.hidden);
  return w;
}

RecurrentShape shapeOf(KernelContext &ctx, int64_t gates, int64_t directions) {
  const Tensor &x = ctx.in("x");
  if (x.rank() != 3)
    ctx.fail("x must have rank 3 (sequence, batch, input)");
  const Tensor &whh = ctx.in("weight_hh");
  if (whh.rank() != 2)
    ctx.fail("weight_hh must have rank 2");
  RecurrentShape rs;
  rs.steps = x.dim(0);
  rs.batch = x.dim(1);
  rs.input = x.dim(2);
  rs.hidden = whh.dim(1);
  rs.gates = gates;
  rs.directions = directions;
  return rs;
}

/// A (batch, DIRECTIONS*H) initial state, checked.
const float *stateArg(KernelContext &ctx, std::string_view p, const RecurrentShape &rs) {
  const Tensor &t = ctx.in(p);
  if (t.rank() != 2 || t.dim(0) != rs.batch || t.dim(1) != rs.directions * rs.hidden)
    ctx.fail(std::string(p) + " must have shape (" + std::to_string(rs.batch) + ", " +
             std::to_string(rs.directions * rs.hidden) + ")");
  return floatsOf(ctx, t, p);
}

/// out (rows x n) += a (rows x k) . m^T, for m (n x k), all row-major.
void addProduct(KernelContext &ctx, int64_t rows, const float *a, int64_t k, const float *m,
                int64_t n, float *out) {
  if (rows > 0 && n > 0 && k > 0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, toInt(ctx, rows), toInt(ctx, n),
                toInt(ctx, k), 1.0f, a, toInt(ctx, k), m, toInt(ctx, k), 1.0f, out, toInt(ctx, n));
}

/// out (rows x n) = init (one row of n, or zeros) + a (rows x k) . m^T.
void affine(KernelContext &ctx, int64_t rows, const float *a, int64_t k, const float *m, int64_t n,
            const float *init, float *out) {
  for (int64_t b = 0; b < rows; ++b) {
    if (init)
      std::memcpy(out + b * n, init, static_cast<size_t>(n) * sizeof(float));
    else
      std::fill(out + b * n, out + (b + 1) * n, 0.0f);
  }
  addProduct(ctx, rows, a, k, m, n, out);
}

/// gates (batch, G*H) = bias + x_t . weight_ih^T + h . weight_hh^T.
void project(KernelContext &ctx, const RecurrentShape &rs, const DirectionWeights &w,
             const float *xt, const float *h, float *gates) {
  int64_t g = rs.gates * rs.hidden;
  affine(ctx, rs.batch, xt, rs.input, w.wih, g, w.bias, gates);
  addProduct(ctx, rs.batch, h, rs.hidden, w.whh, g, gates);
}

/// Writes output 0 ((s or 1, batch, DIRECTIONS*H): every step's hidden state,
/// or the final one) from `seq` and `finalH`.
void setSequenceOutput(KernelContext &ctx, const RecurrentShape &rs, bool outputSequence,
                       Tensor seq, const Tensor &finalH) {
  if (outputSequence) {
    ctx.setOutput(0, std::move(seq));
    return;
  }
  Tensor last = Tensor::empty(DType::F32, {1, rs.batch, rs.directions * rs.hidden});
  if (finalH.numElements() > 0)
    std::memcpy(last.mutableData<float>(), finalH.data<float>(), finalH.numBytes());
  ctx.setOutput(0, std::move(last));
}

/// "forward" or "reverse" (true) from the direction of a one-direction layer.
bool reverseArg(KernelContext &ctx) {
  std::string direction = ctx.strArg("direction");
  if (direction != "forward" && direction != "reverse")
    ctx.fail("direction '" + direction + "' is not one of forward, reverse");
  return direction == "reverse";
}

/// Room for every step's hidden state of a one-direction layer, or none.
Tensor sequenceOf(const RecurrentShape &rs, bool outputSequence) {
  return Tensor::empty(DType::F32, {outputSequence ? rs.steps : 0, rs.batch, rs.hidden});
}

/// Keeps step k's hidden state `h` in `seq` when it holds every step.
void keepStep(Tensor &seq, int64_t k, const std::vector<float> &h) {
  if (seq.numElements() > 0 && !h.empty())
    std::memcpy(seq.mutableData<float>() + k * static_cast<int64_t>(h.size()), h.data(),
                h.size() * sizeof(float));
}

/// Outputs of a one-direction layer: the sequence or the last state, then the
/// last state `h`.
void setOneDirectionOutputs(KernelContext &ctx, const RecurrentShape &rs, bool outputSequence,
                            Tensor seq, const std::vector<float> &h) {
  Tensor finalH = Tensor::empty(DType::F32, {rs.batch, rs.hidden});
  if (!h.empty())
    std::memcpy(finalH.mutableData<float>(), h.data(), h.size() * sizeof(float));
  setSequenceOutput(ctx, rs, outputSequence, std::move(seq), finalH);
  if (ctx.numOutputs() > 1)
    ctx.setOutput(1, std::move(finalH));
}

} // namespace

void lstmOp(KernelContext &ctx) {
  std::string direction = ctx.strArg("direction");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    ctx.fail("direction '" + direction + "' is not one of forward, reverse, bidirectional");
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  RecurrentShape rs = shapeOf(ctx, 4, dirs);
  int64_t hsz = rs.hidden, dh = dirs * hsz;
  std::vector<DirectionWeights> w{weightsOf(ctx, rs, "", true)};
  w[0].reverse = direction == "reverse";
  if (dirs == 2) {
    if (!ctx.has("weight_ih_back") || !ctx.has("weight_hh_back"))
      ctx.fail("a bidirectional lstm needs weight_ih_back and weight_hh_back");
    w.push_back(weightsOf(ctx, rs, "_back", true));
    w[1].reverse = true;
  }
  Act recurrentAct = activationArg(ctx, "recurrent_activation");
  Act cellAct = activationArg(ctx, "cell_activation");
  Act outAct = activationArg(ctx, "activation");
  bool clip = ctx.has("clip");
  float clipAt = clip ? ctx.floatArg("clip") : 0.0f;
  bool outputSequence = ctx.boolArg("output_sequence");
  const float *h0 = stateArg(ctx, "initial_h", rs);
  const float *c0 = stateArg(ctx, "initial_c", rs);
  const float *x = floatsOf(ctx, ctx.in("x"), "x");

  Tensor seq = Tensor::empty(DType::F32, {outputSequence ? rs.steps : 0, rs.batch, dh});
  Tensor finalH = Tensor::empty(DType::F32, {rs.batch, dh});
  Tensor finalC = Tensor::empty(DType::F32, {rs.batch, dh});
  std::vector<float> h(static_cast<size_t>(rs.batch * hsz)), c(h.size()),
      gates(static_cast<size_t>(rs.batch * 4 * hsz));
  for (int64_t d = 0; d < dirs; ++d) {
    const DirectionWeights &wd = w[static_cast<size_t>(d)];
    for (int64_t b = 0; b < rs.batch; ++b)
      for (int64_t j = 0; j < hsz; ++j) {
        h[b * hsz + j] = h0[b * dh + d * hsz + j];
        c[b * hsz + j] = c0[b * dh + d * hsz + j];
      }
    for (int64_t k = 0; k < rs.steps; ++k) {
      int64_t t = wd.reverse ? rs.steps - 1 - k : k;
      project(ctx, rs, wd, x + t * rs.batch * rs.input, h.data(), gates.data());
      for (int64_t b = 0; b < rs.batch; ++b) {
        float *gi = gates.data() + b * 4 * hsz, *gf = gi + hsz, *go = gf + hsz, *gz = go + hsz;
        float *cb = c.data() + b * hsz, *hb = h.data() + b * hsz;
        if (wd.peephole)
          for (int64_t j = 0; j < hsz; ++j) {
            gi[j] += wd.peephole[j] * cb[j];
            gf[j] += wd.peephole[hsz + j] * cb[j];
          }
        apply(recurrentAct, gi, 2 * hsz); // input and forget gates
        apply(cellAct, gz, hsz);
        for (int64_t j = 0; j < hsz; ++j) {
          cb[j] = gf[j] * cb[j] + gi[j] * gz[j];
          if (clip)
            cb[j] = std::clamp(cb[j], -clipAt, clipAt);
        }
        if (wd.peephole)
          for (int64_t j = 0; j < hsz; ++j)
            go[j] += wd.peephole[2 * hsz + j] * cb[j];
        apply(recurrentAct, go, hsz);
        for (int64_t j = 0; j < hsz; ++j)
          hb[j] = cb[j];
        apply(outAct, hb, hsz);
        for (int64_t j = 0; j < hsz; ++j)
          hb[j] *= go[j];
        int64_t slot = dirs == 1 ? k : t;
        if (outputSequence)
          std::memcpy(seq.mutableData<float>() + (slot * rs.batch + b) * dh + d * hsz, hb,
                      static_cast<size_t>(hsz) * sizeof(float));
      }
    }
    for (int64_t b = 0; b < rs.batch; ++b)
      for (int64_t j = 0; j < hsz; ++j) {
        finalH.mutableData<float>()[b * dh + d * hsz + j] = h[b * hsz + j];
        finalC.mutableData<float>()[b * dh + d * hsz + j] = c[b * hsz + j];
      }
  }
  setSequenceOutput(ctx, rs, outputSequence, std::move(seq), finalH);
  if (ctx.numOutputs() > 1)
    ctx.setOutput(1, finalH);
  if (ctx.numOutputs() > 2)
    ctx.setOutput(2, std::move(finalC));
}

void rnnOp(KernelContext &ctx) {
  bool reverse = reverseArg(ctx);
  RecurrentShape rs = shapeOf(ctx, 1, 1);
  DirectionWeights w = weightsOf(ctx, rs, "", false);
  w.reverse = reverse;
  Act act = activationArg(ctx, "activation");
  bool outputSequence = ctx.boolArg("output_sequence");
  const float *h0 = stateArg(ctx, "initial_h", rs);
  const float *x = floatsOf(ctx, ctx.in("x"), "x");

  Tensor seq = sequenceOf(rs, outputSequence);
  std::vector<float> h(h0, h0 + rs.batch * rs.hidden), next(h.size());
  for (int64_t k = 0; k < rs.steps; ++k) {
    int64_t t = w.reverse ? rs.steps - 1 - k : k;
    project(ctx, rs, w, x + t * rs.batch * rs.input, h.data(), next.data());
    apply(act, next.data(), static_cast<int64_t>(next.size()));
    h.swap(next);
    keepStep(seq, k, h);
  }
  setOneDirectionOutputs(ctx, rs, outputSequence, std::move(seq), h);
}

void gruOp(KernelContext &ctx) {
  bool reverse = reverseArg(ctx);
  RecurrentShape rs = shapeOf(ctx, 3, 1);
  int64_t hsz = rs.hidden, g = 3 * hsz;
  DirectionWeights w = weightsOf(ctx, rs, "", false);
  w.reverse = reverse;
  const float *inputBias = optionalVector(ctx, "input_bias", g);
  // reset_after (iOS18): the reset gate scales the output gate's recurrent
  // product, its bias included (torch.nn.GRU's form); else it scales h first.
  bool resetAfter = ctx.has("reset_after") && ctx.boolArg("reset_after");
  Act recurrentAct = activationArg(ctx, "recurrent_activation");
  Act act = activationArg(ctx, "activation");
  bool outputSequence = ctx.boolArg("output_sequence");
  const float *h0 = stateArg(ctx, "initial_h", rs);
  const float *x = floatsOf(ctx, ctx.in("x"), "x");

  Tensor seq = sequenceOf(rs, outputSequence);
  std::vector<float> h(h0, h0 + rs.batch * hsz), xg(static_cast<size_t>(rs.batch * g)),
      hg(xg.size()), rh(h.size()), ro(h.size());
  for (int64_t k = 0; k < rs.steps; ++k) {
    int64_t t = w.reverse ? rs.steps - 1 - k : k;
    affine(ctx, rs.batch, x + t * rs.batch * rs.input, rs.input, w.wih, g, inputBias, xg.data());
    affine(ctx, rs.batch, h.data(), hsz, w.whh, g, w.bias, hg.data());
    for (int64_t b = 0; b < rs.batch; ++b) {
      float *xr = xg.data() + b * g, *xo = xr + hsz, *xz = xo + hsz;
      const float *hr = hg.data() + b * g, *ho = hr + hsz, *hz = ho + hsz;
      for (int64_t j = 0; j < hsz; ++j) {
        xr[j] += hr[j];
        xz[j] += hz[j];
      }
      apply(recurrentAct, xr, hsz);
      apply(recurrentAct, xz, hsz);
      for (int64_t j = 0; j < hsz; ++j) {
        if (resetAfter)
          xo[j] += xr[j] * ho[j];
        else
          rh[b * hsz + j] = xr[j] * h[b * hsz + j];
      }
    }
    if (!resetAfter) { // the output gate's recurrent side: R_o . (r * h) + b_o
      affine(ctx, rs.batch, rh.data(), hsz, w.whh + hsz * hsz, hsz, w.bias ? w.bias + hsz : nullptr,
             ro.data());
      for (int64_t b = 0; b < rs.batch; ++b)
        for (int64_t j = 0; j < hsz; ++j)
          xg[b * g + hsz + j] += ro[b * hsz + j];
    }
    for (int64_t b = 0; b < rs.batch; ++b) {
      float *xo = xg.data() + b * g + hsz, *z = xo + hsz, *hb = h.data() + b * hsz;
      apply(act, xo, hsz);
      for (int64_t j = 0; j < hsz; ++j)
        hb[j] = (1.0f - z[j]) * xo[j] + z[j] * hb[j];
    }
    keepStep(seq, k, h);
  }
  setOneDirectionOutputs(ctx, rs, outputSequence, std::move(seq), h);
}

} // namespace anefit::runtime
