//===- InfrastructureTest.cpp - Use map, pattern driver, DCE, pipelines ---===//
//
// The parts of the pass infrastructure that IR text cannot exercise directly:
// use bookkeeping, the worklist driver's revisiting, pipeline parsing errors.
//
//===----------------------------------------------------------------------===//
#include "TestPrograms.h"

#include "TestSupport.h"
#include "transforms/Pass.h"
#include "transforms/PatternRewriter.h"
#include "transforms/Patterns.h"
#include "transforms/UseMap.h"

#include "support/Error.h"

#include <gtest/gtest.h>

using namespace anefit;
using namespace anefit::test;

namespace {

TEST(UseMap, FindsOperandAndBlockOutputUses) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f32({2}));
  Value *a = b.op("relu", "a", {{"x", {x}}}, f32({2}));
  Value *s = b.op("add", "s", {{"x", {a}}, {"y", {a}}}, f32({2}));
  b.output(s);
  b.output(a);

  UseMap uses(b.fn);
  EXPECT_EQ(uses.uses(a).size(), 3u); // two bindings of add, one block output
  EXPECT_EQ(uses.users(a).size(), 1u);
  EXPECT_EQ(uses.uses(s).size(), 1u); // the first block output

  uses.replaceAllUsesWith(a, x);
  EXPECT_FALSE(uses.hasUses(a));
  EXPECT_EQ(uses.uses(x).size(), 4u); // relu's own operand + the three moved uses
  EXPECT_EQ(s->definingOp->inputValue("x"), x);
  EXPECT_EQ(s->definingOp->inputValue("y"), x);
  EXPECT_EQ(b.fn.body->outputs[1], x);
}

TEST(UseMap, SeesUsesInsideNestedBlocks) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f32({2}));
  Value *c = b.constant("c", Constant::scalarBool(true));
  Operation *cond = b.raw("cond", "cond_0", {{"pred", {c}}});
  Block *then = cond->addBlock();
  auto inner = std::make_unique<Operation>("relu", "inner");
  inner->setInput("x", Binding::of(x));
  Value *iv = inner->addOutput("inner", f32({2}));
  then->append(std::move(inner));
  then->outputs.push_back(iv);
  Value *r = cond->addOutput("r", f32({2}));
  b.output(r);

  UseMap uses(b.fn);
  ASSERT_EQ(uses.uses(x).size(), 1u);
  EXPECT_EQ(uses.uses(x)[0].user->name, "inner");
  ASSERT_EQ(uses.uses(iv).size(), 1u);
  EXPECT_TRUE(uses.uses(iv)[0].isBlockOutput());

  Value *y = b.input("y", f32({2}));
  uses.replaceAllUsesWith(x, y);
  EXPECT_EQ(then->ops[0]->inputValue("x"), y);
}

/// neg(neg(v)) -> v: each rewrite exposes the next pair to the driver only
/// through revisiting users, never through a rescan.
struct DoubleNegation : RewritePattern {
  DoubleNegation() : RewritePattern("neg") {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    Value *x = op.inputValue("x");
    if (!x || !x->definingOp || x->definingOp->type != "neg")
      return false;
    rw.replaceOp(op, {x->definingOp->inputValue("x")});
    return true;
  }
};

TEST(GreedyDriver, RewritesToFixpointAndErasesDeadOps) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *v = b.input("x", f32({3}));
  for (int i = 0; i < 6; ++i)
    v = b.op("neg", "n" + std::to_string(i), {{"x", {v}}}, f32({3}));
  Value *out = b.op("relu", "out", {{"x", {v}}}, f32({3}));
  b.output(out);

  PatternList patterns;
  patterns.push_back(std::make_unique<DoubleNegation>());
  GreedyResult r = applyPatternsGreedily(b.fn, patterns);
  EXPECT_TRUE(r.converged);
  EXPECT_EQ(r.rewrites, 3u);
  EXPECT_EQ(countOps(b.fn, "neg"), 0);
  ASSERT_EQ(b.fn.body->ops.size(), 1u);
  EXPECT_EQ(b.fn.body->ops[0]->inputValue("x"), b.fn.inputs[0].get());
}

TEST(GreedyDriver, StopsAtTheRewriteLimitWithoutFailing) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *v = b.input("x", f32({3}));
  for (int i = 0; i < 8; ++i)
    v = b.op("neg", "n" + std::to_string(i), {{"x", {v}}}, f32({3}));
  b.output(v);
  PatternList patterns;
  patterns.push_back(std::make_unique<DoubleNegation>());
  GreedyResult r = applyPatternsGreedily(b.fn, patterns, /*maxRewrites=*/1);
  EXPECT_FALSE(r.converged);
  EXPECT_EQ(r.rewrites, 1u);
}

TEST(DeadCodeElimination, RemovesDeadChainsKeepsEffects) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f32({2}));
  Value *st = b.state("s", f32({2}));
  Value *c = b.constant("c", Constant::fromF32({1, 2}, {2}));
  Value *dead1 = b.op("mul", "dead1", {{"x", {x}}, {"y", {c}}}, f32({2}));
  b.op("relu", "dead2", {{"x", {dead1}}}, f32({2}));
  Value *w = b.op("add", "w", {{"x", {x}}, {"y", {x}}}, f32({2}));
  b.write("write_0", st, w);
  b.output(x);

  PassManager pm;
  pm.addPipeline("dce");
  PassResult r = pm.run(*m);
  EXPECT_EQ(countOps(b.fn, "mul"), 0);
  EXPECT_EQ(countOps(b.fn, "relu"), 0);
  EXPECT_EQ(countOps(b.fn, "const"), 0);
  EXPECT_EQ(countOps(b.fn, "write_state"), 1);
  EXPECT_EQ(countOps(b.fn, "add"), 1);
  ASSERT_EQ(r.changes.size(), 1u);
  EXPECT_NE(r.changes[0].find("removed 3 unused ops"), std::string::npos);
}

TEST(Canonicalize, FoldsShapeArithmeticIntoConstants) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f16({1, 4, 3}));
  Value *sh = b.op("shape", "sh", {{"x", {x}}}, i32({3}));
  Value *idx = b.scalarInt("two", 2);
  Value *n =
      b.op("gather", "n", {{"x", {sh}}, {"indices", {idx}}, {"axis", {b.scalarInt("ax", 0)}}},
           Type::scalar(DType::I32));
  Value *one = b.scalarInt("one", 1);
  Value *last = b.op("sub", "last", {{"x", {n}}, {"y", {one}}}, Type::scalar(DType::I32));
  Value *zero = b.scalarInt("zero", 0);
  Value *begin =
      b.op("concat", "begin", {{"values", {zero, zero, last}}, {"axis", {b.scalarInt("cax", 0)}}},
           i32({3}));
  Value *u = b.input("u", f16({1, 4, 1}));
  Value *upd =
      b.op("slice_update", "upd",
           {{"x", {x}}, {"update", {u}}, {"begin", {begin}}, {"end", {b.ints("end", {1, 4, 3})}}},
           f16({1, 4, 3}));
  b.output(upd);

  PassManager pm;
  pm.addPipeline("canonicalize");
  pm.run(*m);
  EXPECT_EQ(countOps(b.fn, "shape"), 0);
  EXPECT_EQ(countOps(b.fn, "gather"), 0);
  EXPECT_EQ(countOps(b.fn, "sub"), 0);
  // The update now has static bounds covering the last column only.
  EXPECT_EQ(countOps(b.fn, "slice_update"), 0);
  EXPECT_EQ(countOps(b.fn, "concat"), 1);
  EXPECT_EQ(countOps(b.fn, "slice_by_index"), 1);
  ASSERT_EQ(b.fn.body->outputs.size(), 1u);
  EXPECT_EQ(b.fn.body->outputs[0]->name, "upd"); // output names survive
  EXPECT_EQ(b.fn.body->outputs[0]->type, f16({1, 4, 3}));
}

TEST(Canonicalize, SliceOfConcatReadsTheOperand) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f16({1, 4, 2}));
  Value *y = b.input("y", f16({1, 4, 1}));
  Value *c = b.concat("c", {x, y}, -1, f16({1, 4, 3}));
  Value *s = b.slice("s", c, {0, 0, 2}, {1, 4, 3}, f16({1, 4, 1}));
  Value *r = b.op("relu", "r", {{"x", {s}}}, f16({1, 4, 1}));
  b.output(r);
  PassManager pm;
  pm.addPipeline("canonicalize");
  pm.run(*m);
  EXPECT_EQ(countOps(b.fn, "concat"), 0);
  EXPECT_EQ(countOps(b.fn, "slice_by_index"), 0);
  EXPECT_EQ(r->definingOp->inputValue("x"), y);
}

TEST(Canonicalize, KeepsRuntimeBoundSliceUpdate) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f16({1, 8, 4}));
  Value *u = b.input("u", f16({1, 8, 1}));
  Value *pos = b.input("pos", i32({3}));
  Value *upd =
      b.op("slice_update", "upd", {{"x", {x}}, {"update", {u}}, {"begin", {pos}}, {"end", {pos}}},
           f16({1, 8, 4}));
  b.output(upd);
  PassManager pm;
  pm.addPipeline("canonicalize");
  pm.run(*m);
  EXPECT_EQ(countOps(b.fn, "slice_update"), 1);
}

TEST(Pipeline, ParsesNamesAndOptions) {
  auto els = parsePipeline(" state-to-io{keep-largest output-suffix=_next states=a,b*} , dce ");
  ASSERT_EQ(els.size(), 2u);
  EXPECT_EQ(els[0].name, "state-to-io");
  EXPECT_EQ(els[0].options.at("keep-largest"), "true");
  EXPECT_EQ(els[0].options.at("output-suffix"), "_next");
  EXPECT_EQ(els[0].options.at("states"), "a,b*");
  EXPECT_EQ(els[1].name, "dce");
  EXPECT_TRUE(parsePipeline("").empty());
}

TEST(Pipeline, RejectsBadTextWithThePlace) {
  EXPECT_EQ(errorOf([] { parsePipeline("dce,,canonicalize"); }),
            "pipeline: column 5: expected a pass name, found ','");
  EXPECT_EQ(errorOf([] { parsePipeline("dce{x"); }),
            "pipeline: column 6: expected an option name or '}', found end of text");
  EXPECT_EQ(errorOf([] { parsePipeline("dce canonicalize"); }),
            "pipeline: column 5: expected ',' or end of pipeline, found 'c'");
}

TEST(Pipeline, RejectsUnknownPassesAndOptions) {
  PassManager pm;
  EXPECT_EQ(errorOf([&] { pm.addPipeline("cse"); }),
            "pipeline: unknown pass 'cse'; passes: state-to-io, kv-write-static, decompose-sdpa, "
            "scale-norm, requantize, split-projection, depthwise-taps, canonicalize, dce");
  std::string e = errorOf([&] { pm.addPipeline("state-to-io{keep}"); });
  EXPECT_NE(e.find("state-to-io: unknown option 'keep'; options: states, keep-largest"),
            std::string::npos)
      << e;
  EXPECT_EQ(errorOf([&] { pm.addPipeline("state-to-io{keep-largest=yes}"); }),
            "pipeline: state-to-io{keep-largest}: expected true or false, found 'yes'");
  EXPECT_EQ(errorOf([&] { pm.addPipeline("state-to-io{keep-align=x1}"); }),
            "pipeline: state-to-io{keep-align}: expected an integer, found 'x1'");
  EXPECT_EQ(pm.size(), 0u);
}

/// Whatever the text, parsing and building a pipeline either works or throws
/// InputError: never another exception, never a crash.
TEST(Pipeline, OnlyInputErrorsForArbitraryText) {
  const char *texts[] = {"{",
                         "}",
                         ",",
                         "dce{",
                         "dce{=}",
                         "dce{a=b}",
                         "dce}}",
                         "a{b c d}",
                         "state-to-io{keep-align=-}",
                         "state-to-io{keep-align=99999999999}",
                         "state-to-io{states=}",
                         "state-to-io{keep-largest=}",
                         "\x01\x02",
                         "dce , ,",
                         "  ,dce"};
  for (const char *t : texts) {
    try {
      PassManager pm;
      pm.addPipeline(t);
    } catch (const InputError &) {
    } catch (const std::exception &e) {
      ADD_FAILURE() << "'" << t << "' threw " << e.what();
    }
  }
}

TEST(Pipeline, HelpListsEveryPassAndOption) {
  std::string help = passHelpText();
  for (const PassInfo &p : passRegistry()) {
    EXPECT_NE(help.find(std::string(p.cliName) + ": " + std::string(p.summary)), std::string::npos);
    for (const PassOptionInfo &o : p.options)
      EXPECT_NE(help.find(std::string(o.name) + " ("), std::string::npos);
  }
  EXPECT_NE(help.find("output-suffix (string, default _out)"), std::string::npos);
}

} // namespace
