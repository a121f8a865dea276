//===- VerifierTest.cpp - Structural verifier errors text cannot express ---===//
//
// The parser refuses uses of undefined values, so uses before definition,
// uses across sibling blocks and undefined block outputs are built here
// directly in the IR.
//
//===----------------------------------------------------------------------===//
#include "ir/Verifier.h"
#include "ir/AsmParser.h"

#include <gtest/gtest.h>

using namespace anefit;

namespace {

Type vec2() { return Type::tensor(DType::F32, std::vector<int64_t>{2}); }

bool hasMessage(const Diagnostics &ds, const std::string &text) {
  for (const Diagnostic &d : ds)
    if (d.str().find(text) != std::string::npos)
      return true;
  return false;
}

std::string all(const Diagnostics &ds) {
  std::string s;
  for (const Diagnostic &d : ds)
    s += d.str() + "\n";
  return s;
}

struct Fixture {
  Program program;
  Function *f;
  Value *x;
  Fixture() {
    f = program.addFunction("main");
    f->opset = "CoreML8";
    x = f->addInput("x", vec2());
  }
  Operation *op(Block &b, const std::string &type, const std::string &name, Value *in) {
    auto o = std::make_unique<Operation>(type, name);
    if (in)
      o->setInput("x", Binding::of(in));
    o->addOutput(name, vec2());
    return b.append(std::move(o));
  }
};

} // namespace

TEST(Verifier, CleanProgramHasNoDiagnostics) {
  Fixture t;
  Operation *a = t.op(*t.f->body, "relu", "a", t.x);
  t.f->body->outputs.push_back(a->output());
  EXPECT_TRUE(verifyProgram(t.program).empty()) << all(verifyProgram(t.program));
}

TEST(Verifier, UseBeforeDefinition) {
  Fixture t;
  Operation *a = t.op(*t.f->body, "relu", "a", t.x);
  Operation *b = t.op(*t.f->body, "relu", "b", t.x);
  a->setInput("x", Binding::of(b->output()));
  t.f->body->outputs.push_back(b->output());
  Diagnostics ds = verifyProgram(t.program);
  EXPECT_TRUE(hasMessage(ds, "error: main: op 'a': parameter 'x' uses '%b' before its definition "
                             "or outside its scope"))
      << all(ds);
}

TEST(Verifier, UseFromSiblingBlockAndOtherFunction) {
  Fixture t;
  Operation *c = t.op(*t.f->body, "cond", "c", nullptr);
  c->setInput("pred", Binding::of(std::make_shared<const Constant>(Constant::scalarBool(true))));
  Block *yes = c->addBlock();
  Block *no = c->addBlock();
  Operation *inYes = t.op(*yes, "relu", "in_yes", t.x);
  yes->outputs.push_back(inYes->output());
  Operation *inNo = t.op(*no, "relu", "in_no", inYes->output());
  no->outputs.push_back(inYes->output());
  (void)inNo;
  // A value of another function.
  Function *g = t.program.addFunction("g");
  g->opset = "CoreML8";
  Value *gx = g->addInput("gx", vec2());
  t.op(*t.f->body, "relu", "d", gx);
  t.f->body->outputs.push_back(c->output());
  Diagnostics ds = verifyProgram(t.program);
  EXPECT_TRUE(hasMessage(ds, "op 'in_no': parameter 'x' uses '%in_yes' before its definition"))
      << all(ds);
  EXPECT_TRUE(hasMessage(ds, "error: main: block output '%in_yes' is not defined in the block or "
                             "around it"))
      << all(ds);
  EXPECT_TRUE(hasMessage(ds, "op 'd': parameter 'x' uses '%gx'")) << all(ds);
}

TEST(Verifier, BrokenBindingsAndOutputs) {
  Fixture t;
  Operation *a = t.op(*t.f->body, "relu", "a", t.x);
  a->inputs.push_back(OpInput{"x", {Binding{}}});
  t.f->body->outputs.push_back(nullptr);
  auto k = std::make_unique<Operation>("const", "k");
  k->addOutput("k1", vec2());
  k->addOutput("k2", vec2());
  t.f->body->append(std::move(k));
  t.program.addFunction("main")->opset = "CoreML8";
  Diagnostics ds = verifyProgram(t.program);
  EXPECT_TRUE(hasMessage(ds, "op 'a': parameter 'x' appears more than once")) << all(ds);
  EXPECT_TRUE(hasMessage(ds, "op 'a': parameter 'x' has an empty binding")) << all(ds);
  EXPECT_TRUE(hasMessage(ds, "error: main: a block output is missing")) << all(ds);
  EXPECT_TRUE(hasMessage(ds, "op 'k': const op has 2 results; expected 1")) << all(ds);
  EXPECT_TRUE(hasMessage(ds, "function 'main' is defined more than once")) << all(ds);
}

TEST(Verifier, ModelWithoutProgram) {
  Model m;
  Diagnostics ds = verifyModel(m);
  EXPECT_TRUE(hasMessage(ds, "error: the model has no ML program")) << all(ds);
}

TEST(Verifier, SynthesizedDescriptionVerifies) {
  auto m = parseModelText(R"(main[CoreML8](%x: (1, is0, fp16)(Tensor),
              %n: (fp32)(Scalar),
              %k: (1, 8, fp16)(State)) {
  block0() {
    %y: (1, is0, fp16)(Tensor) = relu(x=%x, name="y")
  } -> (%y, %n)
}
)",
                          "t.mil", nullptr);
  Diagnostics ds = verifyModel(*m);
  EXPECT_TRUE(ds.empty()) << all(ds);
}
