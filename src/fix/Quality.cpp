//===- Quality.cpp - A language model measured on real text ---------------===//
#include "fix/Quality.h"

#include "io/Tokenizer.h"
#include "runtime/ModelRun.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/FileSystem.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace anefit {
namespace {

/// A text longer than this is not a quality run's text (ours).
constexpr uint64_t kMaxTextBytes = uint64_t(64) << 20;

bool contains(const std::string &name, std::string_view part) {
  return name.find(part) != std::string::npos;
}

/// The integer input an embedding reads: the indices of a gather over a
/// constant table, through casts and reshapes; nullptr if none.
const Value *embeddingInput(const Function &fn, const std::vector<const Value *> &candidates) {
  for (const auto &op : fn.body->ops) {
    if (op->type != "gather" || !op->constInput("x"))
      continue;
    const Value *v = op->inputValue("indices");
    for (int hops = 0; v && v->definingOp && hops < 4; ++hops) {
      const std::string &t = v->definingOp->type;
      if (t != "cast" && t != "reshape" && t != "squeeze" && t != "expand_dims")
        break;
      v = v->definingOp->inputValue("x");
    }
    if (std::find(candidates.begin(), candidates.end(), v) != candidates.end())
      return v;
  }
  return nullptr;
}

/// A tensor of `in`'s shape (symbolic dims 1) holding `value` everywhere.
runtime::Tensor filled(const Value &in, int64_t value) {
  runtime::Shape shape;
  for (const Dim &d : in.type.shape())
    shape.push_back(d.isStatic() ? d.size : 1);
  runtime::Tensor t = runtime::Tensor::zeros(DType::I32, shape);
  std::fill_n(t.mutableData<int32_t>(), t.numElements(), static_cast<int32_t>(value));
  return t.convertTo(in.type.dtype());
}

/// The logits as declared: the widest float output of static width;
/// nullptr if none.
const Value *declaredLogits(const Function &fn) {
  const Value *logits = nullptr;
  for (const Value *v : fn.body->outputs)
    if (v->type.isTensor() && isFloat(v->type.dtype()) && v->type.rank() >= 1 &&
        v->type.shape().back().isStatic() &&
        (!logits || v->type.shape().back().size > logits->type.shape().back().size))
      logits = v;
  return logits;
}

/// The logits a step gave: its widest float output; nullptr if none.
const runtime::NamedTensor *stepLogits(const runtime::StepRecord &rec) {
  const runtime::NamedTensor *logits = nullptr;
  for (const runtime::NamedTensor &t : rec.outputs)
    if (isFloat(t.tensor.dtype()) && t.tensor.rank() >= 1 &&
        (!logits ||
         t.tensor.dim(t.tensor.rank() - 1) > logits->tensor.dim(logits->tensor.rank() - 1)))
      logits = &t;
  return logits;
}

/// A tokenizer wider than the program's logits belongs to another model.
void requireVocabulary(const std::string &file, const std::string &logits, int64_t tokenizerVocab,
                       int64_t vocab) {
  if (tokenizerVocab > vocab)
    failExpected(file, "output '" + logits + "'",
                 "logits as wide as the tokenizer's " + std::to_string(tokenizerVocab) + " tokens",
                 std::to_string(vocab) + " (a tokenizer of another model?)");
}

} // namespace

void readTextTokens(QualityOptions &options, const std::string &textPath,
                    const std::string &tokenizerPath, int64_t maxTokens) {
  if (maxTokens < 2)
    failExpected("", "max tokens", "at least 2", std::to_string(maxTokens));
  Tokenizer tokenizer = Tokenizer::read(tokenizerPath);
  InputOptions in;
  in.maxBytes = kMaxTextBytes;
  std::vector<uint8_t> bytes = readFileBytes(textPath, in);
  options.tokens = tokenizer.encode(
      std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  size_t n = options.tokens.size();
  if (n < 2)
    failExpected(textPath, "", "a text of at least 2 tokens",
                 std::to_string(n) + " token" + (n == 1 ? "" : "s"));
  if (static_cast<int64_t>(n) > maxTokens)
    options.tokens.resize(static_cast<size_t>(maxTokens));
  options.tokenizerVocab = tokenizer.vocabSize();
}

TeacherForcing teacherForcedInputs(const Model &model, const std::string &function,
                                   const std::vector<int64_t> &tokens, int64_t tokenizerVocab) {
  const std::string &file = model.sourcePath;
  if (tokens.size() < 2)
    failExpected(file, "text", "at least 2 tokens (one to predict from, one to predict)",
                 std::to_string(tokens.size()) + " token" + (tokens.size() == 1 ? "" : "s"));
  if (!model.program)
    failExpected(file, "model", "an ML Program", "a model without one");
  const Function *fn =
      function.empty() ? model.defaultFunction() : model.program->findFunction(function);
  if (!fn)
    failExpected(file, "--function", "a function of the model", "'" + function + "'");
  // The logits' width as declared, so a tokenizer of another model is
  // refused before anything runs.
  if (const Value *logits = declaredLogits(*fn))
    requireVocabulary(file, logits->name, tokenizerVocab, logits->type.shape().back().size);

  // The token and position inputs: integer inputs the host does not carry.
  std::vector<std::string> carried;
  for (const runtime::Carry &c : runtime::hostCarries(model, *fn))
    carried.push_back(c.input);
  std::vector<const Value *> ints;
  for (const auto &in : fn->inputs)
    if (in->type.isTensor() && isInteger(in->type.dtype()) &&
        std::find(carried.begin(), carried.end(), in->name) == carried.end())
      ints.push_back(in.get());
  const Value *token = nullptr, *position = nullptr;
  for (const Value *v : ints)
    if (contains(v->name, "token") || contains(v->name, "input_ids"))
      token = token ? token : v;
  if (!token)
    token = embeddingInput(*fn, ints);
  for (const Value *v : ints)
    if (v != token && contains(v->name, "pos"))
      position = position ? position : v;
  if (!token)
    failExpected(file, "function '" + fn->name + "'",
                 "an LLM decode step: an integer token input (named like 'tokens' or "
                 "'input_ids', or read by an embedding gather)",
                 "none");
  int64_t tokensPerStep = 1;
  for (const Dim &d : token->type.shape())
    tokensPerStep *= d.isStatic() ? d.size : 1;
  if (tokensPerStep != 1)
    failExpected(file, "input '" + token->name + "'",
                 "one token a step (a decode function; pick it with --function)",
                 token->type.shapeStr());
  for (const auto &in : fn->inputs)
    if (in->type.isTensor() && in.get() != token && in.get() != position &&
        std::find(carried.begin(), carried.end(), in->name) == carried.end())
      failExpected(file, "input '" + in->name + "'", "only a token, a position and carried caches",
                   "an input text cannot fill");

  TeacherForcing out;
  out.function = fn->name;
  out.tokenInput = token->name;
  out.positionInput = position ? position->name : "";
  out.steps = static_cast<int64_t>(tokens.size()) - 1;
  for (int64_t k = 0; k < out.steps; ++k) {
    runtime::TensorMap step;
    step.emplace(token->name, filled(*token, tokens[static_cast<size_t>(k)]));
    if (position)
      step.emplace(position->name, filled(*position, k));
    out.inputs.perStep.emplace(k, std::move(step));
  }
  return out;
}

namespace {

/// The windows of QualityOptions::window over `tokens`: [begin, end) pairs.
std::vector<std::pair<size_t, size_t>> tokenWindows(size_t tokens, int64_t window) {
  size_t w = window > 0 ? static_cast<size_t>(window) : tokens;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t b = 0; b < tokens; b += w)
    if (size_t e = std::min(tokens, b + w); e - b >= 2 || out.empty())
      out.emplace_back(b, e);
  return out;
}

} // namespace

QualityResult measureQuality(const Model &model, const QualityOptions &options) {
  const std::string &file = model.sourcePath;
  if (options.window == 1)
    failExpected(file, "window", "at least 2 tokens (one to predict from, one to predict)",
                 "1 token");
  std::vector<std::pair<size_t, size_t>> windows =
      tokenWindows(options.tokens.size(), options.window);
  // Each window's inputs, checked before anything runs.
  std::vector<TeacherForcing> forced;
  QualityResult result;
  for (auto [b, e] : windows) {
    forced.push_back(teacherForcedInputs(
        model, options.function,
        std::vector<int64_t>(options.tokens.begin() + static_cast<std::ptrdiff_t>(b),
                             options.tokens.begin() + static_cast<std::ptrdiff_t>(e)),
        options.tokenizerVocab));
    result.predicted += forced.back().steps;
  }
  const TeacherForcing &first = forced.front();
  result.function = first.function;
  result.tokenInput = first.tokenInput;
  result.positionInput = first.positionInput;
  result.windows = static_cast<int64_t>(windows.size());

  std::vector<std::vector<int64_t>> top1s;
  for (size_t r = 0; r < options.precisions.size(); ++r) {
    QualityRun q;
    q.precision = options.precisions[r];
    std::vector<int64_t> top1;
    double nll = 0;
    int64_t done = 0;
    for (size_t wi = 0; wi < windows.size(); ++wi) {
      const TeacherForcing &tf = forced[wi];
      size_t base = windows[wi].first;
      runtime::ModelRunOptions o;
      o.function = tf.function;
      o.inputs = tf.inputs;
      o.steps = tf.steps;
      o.run.precision = options.precisions[r];
      o.run.threads = options.threads;
      o.run.exactProducts = options.exactProducts;
      o.run.source = file;
      o.run.opResults = options.opResults;
      runtime::ModelRun run(model, std::move(o));
      for (int64_t k = 0; k < tf.steps; ++k, ++done) {
        runtime::StepRecord rec;
        try {
          rec = run.next();
        } catch (const InputError &e) {
          if (k == 0)
            throw;
          // Past the program's context a cache index leaves its range.
          throw InputError(std::string(e.what()) + " (at position " + std::to_string(k) +
                           " of the text" +
                           (windows.size() > 1 ? " in window " + std::to_string(wi + 1) : "") +
                           "; is it longer than the program's context? --max-tokens sets how "
                           "many tokens are used, --window how many one run reads)");
        }
        const runtime::NamedTensor *logits = stepLogits(rec);
        if (!logits)
          failExpected(file, "function '" + tf.function + "'", "logits (a float output)", "none");
        int64_t vocab = logits->tensor.dim(logits->tensor.rank() - 1);
        if (done == 0 && r == 0) {
          result.logitsOutput = logits->name;
          result.vocab = vocab;
          requireVocabulary(file, logits->name, options.tokenizerVocab, vocab);
          for (int64_t id : options.tokens)
            if (id < 0 || id >= vocab)
              failExpected(file, "output '" + logits->name + "'",
                           "a logit for every token of the text",
                           "none for token " + std::to_string(id));
        }
        // The last row: the logits after this step's token.
        std::vector<float> all = logits->tensor.toFloats();
        const float *row = all.data() + (all.size() - static_cast<size_t>(vocab));
        int64_t next = options.tokens[base + static_cast<size_t>(k) + 1];
        double peak = -INFINITY;
        int64_t arg = 0;
        bool finite = true;
        for (int64_t i = 0; i < vocab; ++i) {
          finite = finite && std::isfinite(row[i]);
          if (row[i] > peak) {
            peak = row[i];
            arg = i;
          }
        }
        if (!finite) {
          ++q.nonFiniteSteps;
          nll = INFINITY;
        } else {
          double sum = 0;
          for (int64_t i = 0; i < vocab; ++i)
            sum += std::exp(static_cast<double>(row[i]) - peak);
          nll += std::log(sum) + peak - row[next];
        }
        q.top1Correct += arg == next;
        top1.push_back(arg);
        if (options.progress)
          options.progress(r, done + 1, result.predicted);
      }
    }
    q.top1 = top1;
    q.nll = nll / static_cast<double>(result.predicted);
    q.perplexity = std::exp(q.nll);
    if (!top1s.empty())
      for (size_t k = 0; k < top1.size(); ++k)
        q.agreeWithFirst += top1[k] == top1s.front()[k];
    else
      q.agreeWithFirst = top1.size();
    top1s.push_back(std::move(top1));
    result.runs.push_back(q);
  }
  return result;
}

namespace {

/// A uniform double in [0, 1) from the top 53 bits of one draw: the same on
/// every platform, as std::uniform_real_distribution is not.
double unitDraw(std::mt19937_64 &rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// A token drawn from the softmax of `row` over its `k` largest logits (ties
/// to the lower id).
int64_t drawTopK(const float *row, int64_t vocab, int k, std::mt19937_64 &rng) {
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  auto top = ids.begin() + std::min<int64_t>(k, vocab);
  std::partial_sort(ids.begin(), top, ids.end(), [&](int64_t a, int64_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  std::vector<double> weight;
  double peak = row[ids.front()], sum = 0;
  for (auto it = ids.begin(); it != top; ++it)
    sum += weight.emplace_back(std::exp(static_cast<double>(row[*it]) - peak));
  double u = unitDraw(rng) * sum;
  for (size_t i = 0; i < weight.size(); ++i)
    if ((u -= weight[i]) < 0)
      return ids[i];
  return ids[weight.size() - 1];
}

} // namespace

OwnText writeOwnText(const Model &model, const OwnTextOptions &options) {
  const std::string &file = model.sourcePath;
  if (options.window < 2)
    failExpected(file, "own text", "sequences of at least 2 tokens",
                 std::to_string(options.window));
  // The token and position inputs, checked before anything runs.
  TeacherForcing inputs = teacherForcedInputs(model, options.function, {0, 0});
  const Function *fn = model.program->findFunction(inputs.function);
  const Value *logitsDecl = declaredLogits(*fn);
  if (!logitsDecl)
    failExpected(file, "function '" + fn->name + "'", "logits of a declared width (a float output)",
                 "none");
  int64_t vocab = logitsDecl->type.shape().back().size;
  if (vocab < 1)
    failExpected(file, "output '" + logitsDecl->name + "'", "logits of at least one token", "0");
  const Value *token = nullptr, *position = nullptr;
  for (const auto &in : fn->inputs) {
    if (in->name == inputs.tokenInput)
      token = in.get();
    if (in->name == inputs.positionInput)
      position = in.get();
  }
  auto stepInputs = [&](int64_t id, int64_t at) {
    runtime::TensorMap m;
    m.emplace(token->name, filled(*token, id));
    if (position)
      m.emplace(position->name, filled(*position, at));
    return m;
  };

  std::mt19937_64 rng(options.seed);
  OwnText out;
  out.window = options.window;
  out.vocab = vocab;
  int64_t total = std::max<int64_t>(options.tokens, 2);
  // The steps `total` tokens take in sequences of `window` (for progress).
  auto stepsFor = [total](int64_t window) {
    int64_t steps = 0;
    for (int64_t left = total; left >= 2; left -= window)
      steps += std::min(left, window) - 1;
    return steps;
  };
  int64_t plannedSteps = stepsFor(out.window);
  while (static_cast<int64_t>(out.tokens.size()) + 2 <= total) {
    int64_t length = std::min(out.window, total - static_cast<int64_t>(out.tokens.size()));
    std::vector<int64_t> sequence{static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab))};
    runtime::ModelRunOptions o;
    o.function = fn->name;
    o.steps = length - 1;
    o.inputs.perStep.emplace(0, stepInputs(sequence.front(), 0));
    o.run.precision = runtime::Precision::FP32;
    o.run.threads = options.threads;
    o.run.source = file;
    o.run.opResults = options.opResults;
    runtime::ModelRun run(model, std::move(o));
    for (int64_t k = 0; k + 1 < length; ++k) {
      runtime::StepRecord rec;
      try {
        rec = run.next();
      } catch (const InputError &e) {
        // Past the program's context a cache index leaves its range: the
        // first sequence finds where, and every sequence is cut there.
        if (k == 0 || !out.tokens.empty())
          throw;
        out.window = k + 1;
        out.shortenedBy = e.what();
        plannedSteps = stepsFor(out.window);
        if (options.progress)
          options.progress(out.steps, plannedSteps);
        break;
      }
      const runtime::NamedTensor *logits = stepLogits(rec);
      if (!logits || logits->tensor.dim(logits->tensor.rank() - 1) != vocab)
        failExpected(file, "output '" + logitsDecl->name + "'",
                     "logits " + std::to_string(vocab) + " wide",
                     logits ? "another width" : "none");
      std::vector<float> all = logits->tensor.toFloats();
      const float *row = all.data() + (all.size() - static_cast<size_t>(vocab));
      if (!std::all_of(row, row + vocab, [](float v) { return std::isfinite(v); }))
        failExpected(file, "output '" + logits->name + "' at step " + std::to_string(k),
                     "finite logits to draw the model's next token from", "inf or NaN");
      sequence.push_back(drawTopK(row, vocab, kOwnTextTopK, rng));
      if (k + 2 < length)
        run.give(k + 1, stepInputs(sequence.back(), k + 1));
      ++out.steps;
      if (options.progress)
        options.progress(out.steps, plannedSteps);
    }
    out.tokens.insert(out.tokens.end(), sequence.begin(), sequence.end());
  }
  return out;
}

} // namespace anefit
