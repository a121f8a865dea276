//===- OwnTextTest.cpp - The model's own text, written at fp32 ------------===//
//
// Without a text, fix calibrates an LLM on tokens it writes itself. The
// committed export_llm program (random weights, vocabulary 256, context 32)
// writes them: the same for a seed on every run, others for another seed,
// every id within its logits, the sequences cut at its context; and a
// program that is not a decode step is refused as teacher forcing refuses it,
// and logits no token can be drawn from in one line.
//
//===----------------------------------------------------------------------===//
#include "fix/Quality.h"

#include "TestSupport.h"
#include "io/ModelIO.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

using namespace anefit;
using anefit::test::errorOf;

namespace {

std::unique_ptr<Model> exportLlm() {
  return loadModel(std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/lfm2_export_llm_fp16.pte");
}

} // namespace

TEST(OwnText, IsTheSameForASeedAndCutAtTheProgramsContext) {
  auto model = exportLlm();
  OwnTextOptions o;
  o.tokens = 100;
  o.window = 64;
  size_t ops = 0;
  o.opResults = [&](const Operation &, const std::vector<const runtime::Tensor *> &,
                    const std::vector<const runtime::Tensor *> &) { ++ops; };
  std::pair<int64_t, int64_t> last;
  o.progress = [&](int64_t done, int64_t total) { last = {done, total}; };
  OwnText a = writeOwnText(*model, o);
  // The caches hold 32 positions: the step at position 32 fails, so every
  // sequence is 33 tokens (32 read, the last drawn).
  EXPECT_EQ(a.window, 33);
  EXPECT_NE(a.shortenedBy, "");
  EXPECT_EQ(a.vocab, 256);
  // 33 + 33 + 33 tokens, then one left over: a sequence of one reads nothing.
  ASSERT_EQ(a.tokens.size(), 99u);
  EXPECT_EQ(a.steps, 96);
  // Progress is counted against the sequences as cut, so it ends at its total.
  EXPECT_EQ(last, std::make_pair(int64_t{96}, int64_t{96}));
  EXPECT_GT(ops, 0u);
  for (int64_t id : a.tokens) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 256);
  }
  // Drawn, not greedy: the text is not one token repeated.
  EXPECT_GT(std::set<int64_t>(a.tokens.begin(), a.tokens.end()).size(), 10u);

  o.opResults = nullptr;
  OwnText again = writeOwnText(*model, o);
  EXPECT_EQ(again.tokens, a.tokens);
  o.seed = 1;
  OwnText other = writeOwnText(*model, o);
  EXPECT_NE(other.tokens, a.tokens);

  // A window within the context is kept; the last sequence takes what is left.
  o.window = 16;
  o.tokens = 40;
  OwnText short16 = writeOwnText(*model, o);
  EXPECT_EQ(short16.window, 16);
  EXPECT_EQ(short16.shortenedBy, "");
  EXPECT_EQ(short16.tokens.size(), 40u);
  EXPECT_EQ(short16.steps, 15 + 15 + 7);
}

TEST(OwnText, TheProgramWritesWhatItsLogitsFavour) {
  // Read back teacher-forced, the model's own text is far likelier to it
  // than uniform ids (perplexity well under the vocabulary's 256).
  auto model = exportLlm();
  OwnTextOptions o;
  o.tokens = 64;
  o.window = 32;
  OwnText text = writeOwnText(*model, o);
  QualityOptions q;
  q.tokens = text.tokens;
  q.window = text.window;
  q.precisions = {runtime::Precision::FP32};
  QualityResult r = measureQuality(*model, q);
  ASSERT_EQ(r.runs.size(), 1u);
  EXPECT_LT(r.runs[0].perplexity, 256.0 / 2);
}

TEST(OwnText, RefusesAProgramThatIsNotADecodeStep) {
  auto model = loadModelText(R"(main[CoreML7](%x: (1, 4, fp32)(Tensor)) {
  block0() {
    %y: (1, 4, fp32)(Tensor) = relu(x=%x, name="y")
  } -> (%y)
}
)",
                             "relu.mil", ".");
  EXPECT_NE(errorOf([&] { writeOwnText(*model, {}); }).find("an LLM decode step"),
            std::string::npos);
}

TEST(OwnText, RefusesLogitsThatAreNotFiniteInOneLine) {
  // Every row of the table holds a 0, and 1/0 is inf: no token can be drawn
  // from the first step's logits.
  auto model = loadModelText(
      R"(main[CoreML7](%tokens: (1, 1, int32)(Tensor), %input_pos: (1, int32)(Tensor)) {
  block0() {
    %table: (4, 4, fp32)(Tensor) = const(val=[[0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]]:(4, 4, fp32), name="table")
    %rows: (1, 1, 4, fp32)(Tensor) = gather(x=%table, indices=%tokens, axis=0, name="rows")
    %one: (fp32)(Tensor) = const(val=1.0, name="one")
    %logits: (1, 1, 4, fp32)(Tensor) = real_div(x=%one, y=%rows, name="logits")
  } -> (%logits)
}
)",
      "div.mil", ".");
  EXPECT_EQ(errorOf([&] { writeOwnText(*model, {}); }),
            "div.mil: output 'logits' at step 0: expected finite logits to draw the model's next "
            "token from, found inf or NaN");
}
