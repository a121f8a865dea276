//===- AsmRoundTripTest.cpp - MIL text print/parse round trips ------------===//
//
// Printing, parsing and printing again must give the same text and the same
// IR: every type form, every dtype's immediate values, blob references,
// attributes, nested blocks and the model header.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

using namespace anefit;

namespace {

std::unique_ptr<Model> parse(const std::string &text) {
  return parseModelText(text, "test.mil", nullptr);
}

std::string printProg(const Program &p) {
  std::ostringstream os;
  printProgram(p, os);
  return os.str();
}

/// Parses `text` (in printed form) and checks that printing gives it back.
void expectStable(const std::string &text) {
  auto m = parse(text);
  std::string printed = printProg(*m->program);
  EXPECT_EQ(printed, text);
  // And once more through the model form with its header.
  std::string full = modelToString(*m);
  auto again = parse(full);
  EXPECT_EQ(modelToString(*again), full);
}

/// Builds `main` with one const op holding `c` and prints/parses it.
std::unique_ptr<Model> constRoundTrip(const Constant &c, std::string *textOut = nullptr) {
  Model m;
  m.program = std::make_unique<Program>();
  Function *f = m.program->addFunction("main");
  f->opset = "CoreML8";
  auto op = std::make_unique<Operation>("const", "c");
  op->addOutput("c", c.type);
  op->attributes["val"] = std::make_shared<Constant>(c);
  Value *out = f->body->append(std::move(op))->output();
  f->body->outputs.push_back(out);
  // Also as an immediate binding, which carries no type context.
  auto id = std::make_unique<Operation>("identity", "i");
  id->setInput("x", Binding::of(std::make_shared<const Constant>(c)));
  id->addOutput("i", c.type);
  f->body->append(std::move(id));
  std::string text = modelToString(m);
  if (textOut)
    *textOut = text;
  auto parsed = parse(text);
  EXPECT_EQ(modelToString(*parsed), text);
  return parsed;
}

const Constant &constOf(const Model &m) {
  return *m.program->functions[0]->body->ops[0]->attribute("val");
}
const Constant &immediateOf(const Model &m) {
  return *m.program->functions[0]->body->ops[1]->inputs[0].bindings[0].constant;
}

void expectSameConstant(const Constant &a, const Constant &b) {
  EXPECT_EQ(a.type, b.type) << a.type.str() << " vs " << b.type.str();
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.strings, b.strings);
  // The usual encoding of a dtype is not printed; it reads back as 0 (same meaning).
  if (a.protoEncoding != 0) {
    EXPECT_EQ(a.protoEncoding, b.protoEncoding);
  }
  EXPECT_EQ(a.docString, b.docString);
  EXPECT_EQ(a.blob.fileName, b.blob.fileName);
  EXPECT_EQ(a.blob.offset, b.blob.offset);
  ASSERT_EQ(a.elements.size(), b.elements.size());
  for (size_t i = 0; i < a.elements.size(); ++i)
    expectSameConstant(a.elements[i], b.elements[i]);
}

void checkConstant(const Constant &c) {
  std::string text;
  auto m = constRoundTrip(c, &text);
  SCOPED_TRACE(text);
  expectSameConstant(constOf(*m), c);
  expectSameConstant(immediateOf(*m), c);
}

Constant rawTensor(DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  Constant c;
  c.type = Type::tensor(t, shape);
  c.bytes = std::move(bytes);
  return c;
}

template <typename T> std::vector<uint8_t> bytesOf(std::vector<T> v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty())
    std::memcpy(out.data(), v.data(), out.size());
  return out;
}

} // namespace

TEST(AsmRoundTrip, CoremltoolsStyleProgramIsStable) {
  expectStable(R"(main[CoreML8](%x: (1, 4, fp16)(Tensor),
              %k_cache: (1, 8, fp16)(State),
              %s: (is0, 3, fp32)(Tensor)) {
  block0() {
    %w: (4, 4, fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=64), name="w")
    %read_state_0: (1, 8, fp16)(Tensor) = read_state(input=%k_cache, name="read_state_0")
    %slice_update_0: (1, 8, fp16)(Tensor) = slice_update(x=%read_state_0, update=%x, begin=[0, 0], end=[1, 4], name="slice_update_0")
    %upd: (1, 8, fp16)(Tensor) = coreml_update_state(state=%k_cache, value=%slice_update_0, name="upd")
    %c: (1, 12, fp16)(Tensor) = concat(values=(%upd, %x), axis=-1, interleave=False, name="c")
  } -> (%upd, %c)
}
)");
}

TEST(AsmRoundTrip, TypeForms) {
  expectStable(R"(main[CoreML7](%a: (fp32)(Scalar),
              %b: (3,int32)(Tensor),
              %c: (is0, ?, *, *s1, fp16)(Tensor),
              %d: (..., fp32)(Tensor),
              %e: (0, 2, bool)(Tensor),
              %f: List[4, (2,fp32)(Tensor)](List),
              %g: List[?, (string)(Scalar)](List),
              %h: Tuple[(fp32)(Scalar), (2, 2, int64)(Tensor)](Tuple),
              %i: Dict[(string)(Scalar), (fp32)(Scalar)](Dict),
              %j: State[List[n, (fp16)(Scalar)](List)](State),
              %k: ("odd dim",fp32)(Tensor)) {
  block0() {
  } -> (%a)
}
)");
}

TEST(AsmRoundTrip, NestedBlocks) {
  expectStable(R"(main[CoreML5](%x: (2,fp32)(Tensor),
              %p: (bool)(Scalar),
              %a: (fp32)(Scalar),
              %b: (fp32)(Scalar)) {
  block0() {
    %c: (2,fp32)(Tensor) = cond(pred=%p, name="c")
      c_true() {
        %add_0: (2,fp32)(Tensor) = add(x=%x, y=1.0, name="add_0")
      } -> (%add_0)
      c_false() {
        %sub_0: (2,fp32)(Tensor) = sub(x=%x, y=1.0, name="sub_0")
      } -> (%sub_0)
    %w_0: (fp32)(Scalar), %w_1: (fp32)(Scalar) = while_loop(loop_vars=(%a, %b), name="w")
      w_cond_block(%a_x0: (fp32)(Scalar), %b_x0: (fp32)(Scalar)) {
        %less_0: (bool)(Scalar) = less(x=%a_x0, y=%b_x0, name="less_0")
      } -> (%less_0)
      w_body_block(%a_x0: (fp32)(Scalar), %b_x0: (fp32)(Scalar)) {
        %add_1: (fp32)(Scalar) = add(x=%a_x0, y=%c, name="add_1")
      } -> (%add_1, %b_x0)
  } -> (%c, %w_0)
}
)");
}

TEST(AsmRoundTrip, AttributesProgramLineAndSpecializations) {
  expectStable(
      R"(program(version=2, doc="a \"doc\"\n")[buildInfo=DICT("coremltools-version": "9.0", "x": "y")]

main[CoreML7](%x: (4,fp32)(Tensor))[fattr=1] {
  block0()[battr="b"] {
    %q: (4,int8)(Tensor) = const(val=[1, -2, 3, 127], name="q")
    %d: (4,fp32)(Tensor) = constexpr_affine_dequantize(name="d")[axis=0, quantized_data=[1, 2, 3, 4]:uint8, scale=0.5, zero_point=0:uint8]
    write_state(input=%x, data=%d, name="ws")
    %n: (4,fp32)(Tensor) = noop("name"=%x, name="n")
  } -> (%d)
  block1[CoreML6]() {
  } -> (%x)
}

second[CoreML8]() {
  block2() {
    %t: (2,int32)(Tensor) = identity(x=TUPLE(1, [2.5, 3.0], "s"), y=LIST(1, 2), z=LIST():List[0, (int32)(Scalar)](List), name="t")
  } -> ()
}
)");
}

TEST(AsmRoundTrip, EveryDTypeImmediate) {
  checkConstant(Constant::fromF32(
      {1.0f, -0.0f, 0.1f, 3.4028235e38f, 1e-45f, std::numeric_limits<float>::infinity(),
       -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()},
      {2, 4}));
  checkConstant(
      Constant::fromF16Bits({0x3c00, 0x8000, 0x0001, 0x7bff, 0x7c00, 0xfc00, 0x3555}, {7}));
  checkConstant(Constant::fromI32({INT32_MIN, -1, 0, INT32_MAX}, {2, 2}));
  checkConstant(Constant::fromI64({INT64_MIN, -1, 0, INT64_MAX}, {4}));
  checkConstant(Constant::fromBool({true, false, true}, {3}));
  checkConstant(Constant::fromStrings(
      {"a", "q\"uote", "back\\slash", "new\nline", "\x01", "\xc3\xa9"}, {2, 3}));
  checkConstant(Constant::scalarString(""));
  checkConstant(Constant::scalarF32(2.5f));
  checkConstant(rawTensor(DType::F64, {3}, bytesOf<double>({0.1, -1e300, 5e-324})));
  checkConstant(rawTensor(DType::BF16, {2}, bytesOf<uint16_t>({0x3f80, 0xc0a0})));
  checkConstant(rawTensor(DType::I8, {3}, bytesOf<int8_t>({-128, 0, 127})));
  checkConstant(rawTensor(DType::U8, {3}, bytesOf<uint8_t>({0, 1, 255})));
  checkConstant(rawTensor(DType::I16, {2}, bytesOf<int16_t>({-32768, 32767})));
  checkConstant(rawTensor(DType::U16, {2}, bytesOf<uint16_t>({0, 65535})));
  checkConstant(rawTensor(DType::U32, {2}, bytesOf<uint32_t>({0, 4294967295u})));
  checkConstant(rawTensor(DType::U64, {2}, bytesOf<uint64_t>({0, UINT64_MAX})));
  // Sub-byte types, packed LSB-first: int4 {-8, 7, -1}, uint2 x5, uint1 x9.
  checkConstant(rawTensor(DType::I4, {3}, {0x78, 0x0f}));
  checkConstant(rawTensor(DType::U2, {5}, {0xe4, 0x03}));
  checkConstant(rawTensor(DType::U1, {9}, {0xa5, 0x01}));
  checkConstant(rawTensor(DType::U3, {3}, {0xfa, 0x01}));
  checkConstant(rawTensor(DType::U6, {2}, {0xff, 0x0f}));
  checkConstant(rawTensor(DType::U4, {1, 2}, {0x21}));
  // fp8 has no decimal form here: it prints as HEX.
  checkConstant(rawTensor(DType::F8E4M3FN, {2}, {0x38, 0xff}));
  checkConstant(rawTensor(DType::F8E5M2, {2}, {0x3c, 0x7f}));
}

TEST(AsmRoundTrip, ExactBitsNeedingHex) {
  // NaN payloads, negative NaN, fp16 signalling NaN.
  checkConstant(rawTensor(DType::F32, {2}, bytesOf<uint32_t>({0x7fc00001, 0xffc00000})));
  checkConstant(rawTensor(DType::F16, {2}, bytesOf<uint16_t>({0x7c01, 0xfe00})));
  checkConstant(rawTensor(DType::F64, {1}, bytesOf<uint64_t>({0x7ff0000000000001ull})));
  // Sub-byte with junk in the padding bits, and a bool byte other than 0/1.
  checkConstant(rawTensor(DType::U4, {1}, {0xf1}));
  checkConstant(rawTensor(DType::Bool, {1}, {2}));
}

TEST(AsmRoundTrip, ShapesOfLiterals) {
  checkConstant(Constant::fromF32({}, {0}));
  checkConstant(Constant::fromF32({}, {0, 3}));
  checkConstant(Constant::fromI32({}, {2, 0, 3}));
  checkConstant(Constant::fromI32({5}, {1, 1, 1}));
  checkConstant(Constant::fromI32({5}, {}));
  checkConstant(Constant::fromI64({7}, {}));
  Constant unranked = rawTensor(DType::F32, {}, bytesOf<float>({1.0f, 2.0f}));
  unranked.type = Type::unranked(DType::F32);
  checkConstant(unranked);
  Constant symbolic = Constant::fromStrings({"a", "b"}, {});
  symbolic.type = Type::tensor(DType::String, {Dim::symbolic("n")});
  checkConstant(symbolic);
}

TEST(AsmRoundTrip, ConstantMetadataAndContainers) {
  Constant c = Constant::fromF16Bits({0x3c00}, {1});
  c.protoEncoding = 1; // fp16 stored as floats: unusual, so printed
  c.docString = "doc \"string\"";
  checkConstant(c);

  Constant blob = Constant::fromBlob(Type::tensor(DType::F16, std::vector<int64_t>{64, 64}),
                                     BlobRef{"@model_path/weights/weight.bin", 128, nullptr});
  checkConstant(blob);

  Constant tuple;
  tuple.kind = Constant::Kind::Tuple;
  tuple.elements = {Constant::scalarI32(1), Constant::fromF32({1.5f}, {1})};
  tuple.type = Type::tuple({tuple.elements[0].type, tuple.elements[1].type});
  checkConstant(tuple);

  Constant dict;
  dict.kind = Constant::Kind::Dict;
  dict.elements = {Constant::scalarString("k"), Constant::scalarString("v")};
  dict.type = Type::dict(Type::scalar(DType::String), Type::scalar(DType::String));
  checkConstant(dict);

  Constant emptyDict;
  emptyDict.kind = Constant::Kind::Dict;
  emptyDict.type = Type::dict(Type::scalar(DType::String), Type::scalar(DType::String));
  checkConstant(emptyDict);

  Constant list;
  list.kind = Constant::Kind::List;
  list.elements = {Constant::scalarI32(1), Constant::scalarI32(2)};
  list.type = Type::list(Type::scalar(DType::I32), Dim::unknown());
  checkConstant(list);
}

TEST(AsmRoundTrip, WeirdNamesAreQuoted) {
  Model m;
  m.program = std::make_unique<Program>();
  Function *f = m.program->addFunction("my func");
  f->opset = "CoreML8";
  Value *x = f->addInput("input.1", Type::tensor(DType::F32, std::vector<int64_t>{2}));
  Value *y = f->addInput("x:0 y", Type::tensor(DType::F32, std::vector<int64_t>{2}));
  auto op = std::make_unique<Operation>("my.op", "op \"1\"");
  op->setInput("a b", Binding::of(x));
  op->setInput("name", Binding::of(y));
  op->addOutput("out/1", x->type);
  f->body->outputs.push_back(f->body->append(std::move(op))->output());
  std::string text = modelToString(m);
  auto parsed = parse(text);
  EXPECT_EQ(modelToString(*parsed), text);
  const Operation &p = *parsed->program->functions[0]->body->ops[0];
  EXPECT_EQ(p.type, "my.op");
  EXPECT_EQ(p.name, "op \"1\"");
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[1].name, "name");
  EXPECT_EQ(p.inputs[1].bindings[0].value->name, "x:0 y");
  EXPECT_EQ(p.output()->name, "out/1");
}

TEST(AsmRoundTrip, HeaderReproducesDescription) {
  auto m = parse(R"(main[CoreML8](%x: (1, is0, fp16)(Tensor), %s: (1, 8, fp16)(State)) {
  block0() {
    %y: (1, is0, fp16)(Tensor) = relu(x=%x, name="y")
  } -> (%y)
})");
  Model &model = *m;
  model.specificationVersion = 10;
  model.isUpdatable = true;
  ModelDescription &d = model.description;
  d.inputs[0].shortDescription = "the input";
  d.inputs[0].type.enumeratedShapes = {{1, 2}, {1, 4}};
  d.inputs[0].type.intDefaultValue = 3;
  d.inputs[0].type.floatDefaultValue = 0.1f;
  d.inputs[0].type.doubleDefaultValue = 0.2;
  d.inputs[0].type.isOptional = true;
  d.outputs[0].type.kind = FeatureType::Kind::Other;
  d.outputs[0].type.rawProto = std::string("\x22\x00\xff", 3);
  d.predictedFeatureName = "p";
  d.predictedProbabilitiesName = "pp";
  d.trainingInputs = d.inputs;
  d.functions.push_back(FunctionDescription{"main", d.inputs, d.outputs, d.states, "a", "b"});
  d.defaultFunctionName = "main";
  d.metadata = Metadata{"short", "1.0", "me", "MIT", {{"k", "v"}, {"com.x", "\"q\""}}};
  std::string text = modelToString(model);
  auto again = parse(text);
  EXPECT_EQ(modelToString(*again), text);
  const ModelDescription &e = again->description;
  EXPECT_EQ(again->specificationVersion, 10);
  EXPECT_TRUE(again->isUpdatable);
  EXPECT_EQ(e.inputs[0].type.enumeratedShapes, d.inputs[0].type.enumeratedShapes);
  EXPECT_EQ(e.inputs[0].type.shapeRange, d.inputs[0].type.shapeRange);
  EXPECT_EQ(*e.inputs[0].type.floatDefaultValue, 0.1f);
  EXPECT_EQ(e.outputs[0].type.rawProto, d.outputs[0].type.rawProto);
  EXPECT_EQ(e.metadata.userDefined, d.metadata.userDefined);
  EXPECT_EQ(e.functions.size(), 1u);
  EXPECT_EQ(e.functions[0].predictedProbabilitiesName, "b");
}

TEST(AsmRoundTrip, SynthesizedDescription) {
  auto m = parse(R"(main[CoreML8](%x: (1, is0, fp16)(Tensor),
              %n: (int32)(Scalar),
              %k: (1, 8, fp16)(State)) {
  block0() {
    %y: (1, is0, fp16)(Tensor) = relu(x=%x, name="y")
    %z: (2, 3, fp32)(Tensor) = fill(shape=[2, 3], value=0.0, name="z")
  } -> (%y, %z)
})");
  EXPECT_EQ(m->specificationVersion, 9);
  const ModelDescription &d = m->description;
  ASSERT_EQ(d.inputs.size(), 2u);
  EXPECT_EQ(d.inputs[0].name, "x");
  EXPECT_EQ(d.inputs[0].type.dataType, ArrayDataType::Float16);
  EXPECT_EQ(d.inputs[0].type.shape, (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(d.inputs[0].type.hasShapeRange);
  EXPECT_EQ(d.inputs[0].type.shapeRange[1], (std::pair<uint64_t, int64_t>{1, -1}));
  EXPECT_EQ(d.inputs[1].type.shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(d.inputs[1].type.dataType, ArrayDataType::Int32);
  ASSERT_EQ(d.states.size(), 1u);
  EXPECT_EQ(d.states[0].type.kind, FeatureType::Kind::State);
  EXPECT_EQ(d.states[0].type.shape, (std::vector<int64_t>{1, 8}));
  ASSERT_EQ(d.outputs.size(), 2u);
  EXPECT_TRUE(d.outputs[0].type.shape.empty());
  EXPECT_EQ(d.outputs[1].type.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(d.functions.empty());

  auto two = parse("a[CoreML7]() {\n block0() {\n } -> ()\n}\n"
                   "main[CoreML8]() {\n block1() {\n } -> ()\n}\n");
  EXPECT_EQ(two->specificationVersion, 9);
  EXPECT_EQ(two->description.functions.size(), 2u);
  EXPECT_EQ(two->description.defaultFunctionName, "main");
}

TEST(AsmRoundTrip, LiteralsBecomeImmediates) {
  auto m = parse(R"(main[CoreML8](%x: (1, 4, fp16)(Tensor)) {
  block0() {
    %y: (1, 4, fp16)(Tensor) = add(x=%x, y=1.0, name="y")
    %z: (1, 4, fp16)(Tensor) = reduce_sum(x=%y, axes=[1, 2], keep_dims=True, mode="valid", name="z")
  } -> (%z)
})");
  const Block &b = *m->program->functions[0]->body;
  const Constant *y = b.ops[0]->constInput("y");
  ASSERT_TRUE(y);
  EXPECT_EQ(y->type, Type::scalar(DType::F32));
  EXPECT_EQ(*y->asScalar(), 1.0);
  const Constant *axes = b.ops[1]->constInput("axes");
  EXPECT_EQ(axes->type, Type::tensor(DType::I32, std::vector<int64_t>{2}));
  EXPECT_EQ(axes->asInts(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(b.ops[1]->constInput("keep_dims")->type, Type::scalar(DType::Bool));
  EXPECT_EQ(*b.ops[1]->constInput("mode")->asString(), "valid");
}

TEST(AsmRoundTrip, TypedLiterals) {
  auto m = parse(R"(main[CoreML8]() {
  block0() {
    %a: (2,fp16)(Tensor) = const(val=[0.1, 65504.0], name="a")
    %b: (int64)(Scalar) = const(val=-9223372036854775808, name="b")
    %c: (2,int64)(Tensor) = identity(x=[1, 2]:int64, y=1.5:(1,fp16), z=[]:(0, 3, fp32), name="c")
  } -> (%a)
})");
  const Block &b = *m->program->functions[0]->body;
  const Constant &a = *b.ops[0]->attribute("val");
  EXPECT_EQ(a.type.dtype(), DType::F16);
  EXPECT_EQ(a.bytes, bytesOf<uint16_t>({floatToHalf(0.1f), 0x7bff}));
  EXPECT_EQ(b.ops[1]->attribute("val")->elementAsInt(0), INT64_MIN);
  const Operation &c = *b.ops[2];
  EXPECT_EQ(c.constInput("x")->type, Type::tensor(DType::I64, std::vector<int64_t>{2}));
  EXPECT_EQ(c.constInput("y")->type, Type::tensor(DType::F16, std::vector<int64_t>{1}));
  EXPECT_EQ(c.constInput("z")->type, Type::tensor(DType::F32, std::vector<int64_t>{0, 3}));
}

TEST(AsmRoundTrip, PrintWithoutConstsLooksLikeCoremltools) {
  auto m = parse(R"(main[CoreML8](%x: (2,fp32)(Tensor)) {
  block0() {
    %one: (fp32)(Scalar) = const(val=1.0, name="one")
    %y: (2,fp32)(Tensor) = add(x=%x, y=%one, name="y")
  } -> (%y)
})");
  std::ostringstream os;
  PrintOptions opts;
  opts.printConsts = false;
  printProgram(*m->program, os, opts);
  EXPECT_EQ(os.str(), R"(main[CoreML8](%x: (2,fp32)(Tensor)) {
  block0() {
    %y: (2,fp32)(Tensor) = add(x=%x, y=1.0, name="y")
  } -> (%y)
}
)");
}

TEST(AsmRoundTrip, HiddenConstantsOfCoremltoolsText) {
  const char *text = R"(main[CoreML8](%x: (2,fp32)(Tensor), %p: (bool)(Scalar)) {
  block0() {
    %y: (2,fp32)(Tensor) = add(x=%x, y=%w, name="y")
    %c: (2,fp32)(Tensor) = cond(pred=%p, name="c")
      c_true() {
        %z: (2,fp32)(Tensor) = mul(x=%y, y=%v, name="z")
      } -> (%z)
      c_false() {
      } -> (%w)
  } -> (%c)
})";
  EXPECT_THROW(parse(text), InputError);
  ParseOptions options;
  options.allowUndefinedValues = true;
  auto m = parseModelText(text, "t.mil", nullptr, options);
  const Block &body = *m->program->functions[0]->body;
  ASSERT_EQ(body.ops.size(), 4u);
  EXPECT_EQ(body.ops[0]->type, "const");
  EXPECT_EQ(body.ops[0]->name, "w");
  EXPECT_EQ(body.ops[0]->output()->type, Type::unranked(DType::F32));
  EXPECT_EQ(body.ops[1]->name, "v");
  EXPECT_EQ(body.ops[2]->inputValue("y"), body.ops[0]->output());
  // The same name used twice refers to one placeholder.
  EXPECT_EQ(body.ops[3]->blocks[1]->outputs[0], body.ops[0]->output());
}

namespace {
/// A weight file that only remembers its path.
class FakeStore : public BlobStore {
public:
  explicit FakeStore(std::string p) : p(std::move(p)) {}
  const std::string &path() const override { return p; }
  std::span<const uint8_t> blobData(uint64_t, DType) const override { return {}; }

private:
  std::string p;
};
} // namespace

TEST(AsmRoundTrip, BlobFilesResolveThroughTheOpener) {
  const char *text = R"(main[CoreML8]() {
  block0() {
    %a: (4,fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=64), name="a")
    %b: (4,fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=192), name="b")
    %c: (4,fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/other.bin", offset=64), name="c")
  } -> (%a)
})";
  std::vector<std::string> opened;
  WeightOpener opener = [&](const std::string &name) -> std::shared_ptr<const BlobStore> {
    opened.push_back(name);
    if (name.find("other") != std::string::npos)
      return nullptr; // not available: the constant keeps its reference only
    return std::make_shared<FakeStore>("/weights/" + name);
  };
  auto m = parseModelText(text, "t.mil", opener);
  // Each weight file is opened once, however many constants use it.
  EXPECT_EQ(opened, (std::vector<std::string>{"@model_path/weights/weight.bin",
                                              "@model_path/weights/other.bin"}));
  const Block &b = *m->program->functions[0]->body;
  const Constant &a = *b.ops[0]->attribute("val");
  EXPECT_EQ(a.kind, Constant::Kind::Blob);
  EXPECT_EQ(a.blob.offset, 64u);
  ASSERT_TRUE(a.blob.store);
  EXPECT_EQ(a.blob.store, b.ops[1]->attribute("val")->blob.store);
  EXPECT_FALSE(b.ops[2]->attribute("val")->blob.store);
  EXPECT_EQ(m->weightFiles.size(), 1u);
  EXPECT_EQ(m->weightFiles.count("@model_path/weights/weight.bin"), 1u);
}
