//===- Quality.h - A language model measured on real text -------*- C++ -*-===//
//
// Random inputs prove that two programs compute the same thing; they do not
// say whether either answers well. This steps a decode program through a
// real text, one token a step at positions 0, 1, 2, ... (teacher forcing),
// and scores the logits of each step against the next token: perplexity,
// the share of steps whose top-1 is that token, and, when several
// precisions run, how often their top-1s agree with the first's. fp32 is
// what the model means; fp16 rounds every op as the ANE computes.
//
// The program is an LLM decode step as export_llm and coremltools write it:
// an integer token input (name holding "token" or "input_ids", or the
// integer input an embedding gather reads), an integer position input (name
// holding "pos"), caches carried by the host contract (ExecuTorch's buffer
// write-back, a state map) or kept as Core ML states, and logits as its
// widest float output.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"
#include "runtime/Interpreter.h"
#include "runtime/ModelRun.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace anefit {

/// Tokens of a text a quality run reads by default (`run --perplexity`,
/// `fix --text`; ours: enough for a stable perplexity, a few minutes at most
/// on a 135M model in the interpreter).
inline constexpr int64_t kDefaultMaxTextTokens = 300;

struct QualityOptions {
  /// The function to step (empty: the model's default).
  std::string function;
  /// The text's token ids; the first predicts the second, and so on.
  std::vector<int64_t> tokens;
  /// Tokens per window (0: the whole text in one run): the text is read in
  /// consecutive windows of this many tokens, each from position 0 with
  /// fresh caches (a text longer than the program's context), the last
  /// token of a window predicting nothing. A last window of one token is
  /// left out.
  int64_t window = 0;
  /// The vocabulary of the tokenizer that made them: a program whose
  /// logits are narrower is refused.
  int64_t tokenizerVocab = 0;
  /// One run per precision, in order; agreement is counted against the first.
  std::vector<runtime::Precision> precisions = {runtime::Precision::FP32, runtime::Precision::FP16};
  int threads = 0;
  /// RunOptions::exactProducts of every run (`run --perplexity
  /// --exact-products`).
  bool exactProducts = false;
  /// Called after each step of each run with (run, steps done, steps).
  std::function<void(size_t, int64_t, int64_t)> progress;
  /// Set as every run's RunOptions::opResults (fix records its calibration
  /// in the run that measures the original); may be empty.
  std::function<void(const Operation &, const std::vector<const runtime::Tensor *> &,
                     const std::vector<const runtime::Tensor *> &)>
      opResults;
};

struct QualityRun {
  runtime::Precision precision = runtime::Precision::FP32;
  /// Mean negative log-likelihood of the next token (nats) and exp of it.
  double nll = 0;
  double perplexity = 0;
  /// Steps whose top-1 logit is the next token.
  size_t top1Correct = 0;
  /// Steps whose top-1 equals the first run's top-1.
  size_t agreeWithFirst = 0;
  /// Steps whose logits held an inf or NaN (their NLL is infinite).
  size_t nonFiniteSteps = 0;
  /// Each step's top-1 token (to count agreement with another model's run).
  std::vector<int64_t> top1;
};

struct QualityResult {
  std::string function;
  std::string tokenInput, positionInput, logitsOutput;
  int64_t vocab = 0;
  /// Tokens predicted: tokens - 1 in one window, one fewer per window more.
  int64_t predicted = 0;
  /// Windows the text was read in (QualityOptions::window).
  int64_t windows = 1;
  std::vector<QualityRun> runs;
};

/// A text's tokens as the per-step inputs of an LLM decode function: step k
/// gives token k at position k (the caches follow the host contract).
struct TeacherForcing {
  std::string function;
  std::string tokenInput, positionInput;
  int64_t steps = 0; ///< tokens - 1
  runtime::RunInputs inputs;
};

/// Finds the token and position inputs of `function` (empty: the default)
/// and binds `tokens` to them. Throws InputError naming the model or place:
/// fewer than two tokens, no token input, more than one token a step, an
/// input that is neither and not carried, a `tokenizerVocab` wider than the
/// declared logits (0: not checked).
TeacherForcing teacherForcedInputs(const Model &model, const std::string &function,
                                   const std::vector<int64_t> &tokens, int64_t tokenizerVocab = 0);

/// Sets `options.tokens` and `options.tokenizerVocab` from the text file
/// `textPath` (at most 64 MB) as the tokenizer.json at `tokenizerPath` encodes
/// it, keeping the first `maxTokens`. Throws InputError for a bad tokenizer
/// or a text of fewer than two tokens.
void readTextTokens(QualityOptions &options, const std::string &textPath,
                    const std::string &tokenizerPath, int64_t maxTokens);

/// What the model writes itself when no text is given: fix calibrates
/// requantize on it. Ours: 19 sequences of 128 tokens, 2413 steps, so that
/// every linear error feedback fits (up to 2304 inputs) has more rows than
/// inputs (on SmolLM2-135M's 4w export, lut6 calibrated on 1024 tokens,
/// fewer rows than its 1536-wide w2 has inputs, lost 9.6-13.9 % perplexity
/// on three held-out texts, on 2048 tokens 1.1-9.1 %); each token drawn
/// from the 40 likeliest.
inline constexpr int64_t kDefaultOwnTextTokens = 19 * 128;
inline constexpr int64_t kOwnTextWindow = 128;
/// Tokens of the own text fix writes from a third seed for held-out rows
/// (ChannelEnergy::heldOut): four sequences.
inline constexpr int64_t kHeldOutTokens = 4 * kOwnTextWindow;
inline constexpr int kOwnTextTopK = 40;

struct OwnTextOptions {
  /// The function to step (empty: the model's default).
  std::string function;
  /// Tokens to write in all, in sequences of `window` (the last may be
  /// shorter).
  int64_t tokens = kDefaultOwnTextTokens;
  int64_t window = kOwnTextWindow;
  uint64_t seed = 0;
  int threads = 0;
  /// Called after each step with (steps done, steps).
  std::function<void(int64_t, int64_t)> progress;
  /// Set as the run's RunOptions::opResults (fix records its calibration
  /// while the model writes); may be empty.
  std::function<void(const Operation &, const std::vector<const runtime::Tensor *> &,
                     const std::vector<const runtime::Tensor *> &)>
      opResults;
};

struct OwnText {
  std::vector<int64_t> tokens;
  /// Tokens per sequence as written: OwnTextOptions::window, or fewer when
  /// the program's context is shorter (a step past it failed). Reading
  /// `tokens` in windows of this size (QualityOptions::window) steps the
  /// program through the same positions.
  int64_t window = 0;
  /// Steps run (each sequence's last token is drawn, not read).
  int64_t steps = 0;
  /// Why the sequences are shorter than asked: the error of the first step
  /// past the program's context; empty if they are not.
  std::string shortenedBy;
  int64_t vocab = 0;
};

/// Lets the model write its own text at fp32: sequences from position 0 with
/// fresh caches, each begun by a token drawn uniformly from the logits'
/// width, every next token drawn from the softmax of the step's logits over
/// its kOwnTextTopK largest (std::mt19937_64 from `seed`: the same tokens on
/// every platform). When no text is at hand these are still the activations
/// of the model reading what it reads well, which random token ids are not.
/// Throws InputError as teacherForcedInputs does for a program that is not
/// an LLM decode step, and for logits that are not finite.
OwnText writeOwnText(const Model &model, const OwnTextOptions &options);

/// Steps the model through `options.tokens` once per precision. Throws
/// InputError naming the model or the place: fewer than two tokens, a
/// program that is not a one-token decode step, a token id past its logits.
QualityResult measureQuality(const Model &model, const QualityOptions &options);

} // namespace anefit
