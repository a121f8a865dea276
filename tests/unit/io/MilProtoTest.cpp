//===- MilProtoTest.cpp - Model protobuf <-> IR ---------------------------===//
//
// Builds small models in the IR, writes them as Model protobufs and reads them
// back, comparing structurally; checks determinism, the encodings chosen for
// immediate tensors, and that malformed or foreign input becomes an InputError.
// Some inputs are encoded by hand at the wire level so the field numbers are
// checked independently of our schema.
//
//===----------------------------------------------------------------------===//
#include "io/MilProto.h"

#include "TestSupport.h"
#include "io/WeightFile.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <unistd.h>

using namespace anefit;
using anefit::test::errorOf;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// An in-memory weight file: blobs by metadata offset.
class MemoryStore : public BlobStore {
public:
  const std::string &path() const override { return path_; }
  std::span<const uint8_t> blobData(uint64_t offset, DType expected) const override {
    auto it = blobs_.find(offset);
    if (it == blobs_.end())
      throw InputError::at(path_, "offset " + std::to_string(offset), "no blob here");
    if (it->second.first != expected)
      throw InputError::at(path_, "offset " + std::to_string(offset), "dtype mismatch");
    return it->second.second;
  }
  void add(uint64_t offset, DType t, std::vector<uint8_t> data) {
    blobs_[offset] = {t, std::move(data)};
  }

private:
  std::string path_ = "memory/weight.bin";
  std::map<uint64_t, std::pair<DType, std::vector<uint8_t>>> blobs_;
};

/// A fresh path under the temp directory, removed at the end of the test.
class TempFile {
public:
  explicit TempFile(const std::string &stem) {
    path_ = (std::filesystem::temp_directory_path() /
             ("anefit-proto-" + stem + "-" + std::to_string(::getpid()) + ".bin"))
                .string();
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

std::span<const uint8_t> asBytes(const std::string &s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

std::unique_ptr<Model> parse(const std::string &bytes, const WeightOpener &opener = {}) {
  return parseModelProto(asBytes(bytes), "model.mlmodel", opener);
}

/// Runs `fn` and returns the InputError message it throws ("" if none).
FeatureDescription arrayFeature(std::string name, std::vector<int64_t> shape, ArrayDataType dt,
                                FeatureType::Kind kind = FeatureType::Kind::MultiArray) {
  FeatureDescription f;
  f.name = std::move(name);
  f.type.kind = kind;
  f.type.shape = std::move(shape);
  f.type.dataType = dt;
  return f;
}

ConstantRef ref(Constant c) { return std::make_shared<const Constant>(std::move(c)); }

Operation *addConst(Block &b, const std::string &name, Constant val) {
  Type t = val.type;
  auto op = std::make_unique<Operation>("const", name);
  op->attributes["val"] = ref(std::move(val));
  op->addOutput(name, t);
  return b.append(std::move(op));
}

Operation *addOp(Block &b, const std::string &type, const std::string &name,
                 std::vector<std::pair<std::string, Binding>> inputs, std::vector<Type> outs) {
  auto op = std::make_unique<Operation>(type, name);
  for (auto &[param, binding] : inputs)
    op->setInput(param, binding);
  for (size_t i = 0; i < outs.size(); ++i)
    op->addOutput(outs.size() == 1 ? name : name + "_" + std::to_string(i), outs[i]);
  return b.append(std::move(op));
}

const Type kVec4 = Type::tensor(DType::F16, std::vector<int64_t>{1, 4});

/// A stateful program touching most of the format: function inputs incl. a
/// state, immediate fp16 (bytes) and int32 (ints) consts, read_state /
/// write_state, an immediate binding, a cond with two nested blocks, a blob
/// const, attributes at every level, and a full description.
std::unique_ptr<Model> buildModel(std::shared_ptr<const BlobStore> store) {
  auto model = std::make_unique<Model>();
  model->specificationVersion = 9;
  ModelDescription &d = model->description;
  d.inputs.push_back(arrayFeature("x", {1, 4}, ArrayDataType::Float16));
  d.inputs.back().shortDescription = "the input";
  d.inputs.back().type.hasShapeRange = true;
  d.inputs.back().type.shapeRange = {{1, 1}, {1, -1}};
  d.states.push_back(
      arrayFeature("cache", {1, 4}, ArrayDataType::Float16, FeatureType::Kind::State));
  d.outputs.push_back(arrayFeature("y", {1, 4}, ArrayDataType::Float16));
  d.outputs.push_back(arrayFeature("z", {2, 2}, ArrayDataType::Float16));
  d.outputs.back().type.enumeratedShapes = {{2, 2}, {1, 4}};
  d.outputs.back().type.intDefaultValue = 3;
  FeatureDescription count;
  count.name = "count";
  count.type.kind = FeatureType::Kind::Int64;
  count.type.isOptional = true;
  d.trainingInputs.push_back(count);
  d.metadata.author = "anefit";
  d.metadata.shortDescription = "test model";
  d.metadata.userDefined["com.github.apple.coremltools.version"] = "9.0";

  model->program = std::make_unique<Program>();
  Program &p = *model->program;
  p.docString = "doc";
  Constant info;
  info.kind = Constant::Kind::Dict;
  info.type = Type::dict(Type::scalar(DType::String), Type::scalar(DType::String));
  info.elements = {Constant::scalarString("coremltools-version"), Constant::scalarString("9.0")};
  p.attributes["buildInfo"] = ref(info);

  Function *f = p.addFunction("main");
  f->opset = "CoreML8";
  Value *x = f->addInput("x", kVec4);
  Value *cache = f->addInput("cache", Type::state(kVec4));
  Block &b = *f->body;

  Value *w =
      addConst(b, "w", Constant::fromF16Bits({0x3c00, 0x4000, 0x4200, 0x4400}, {1, 4}))->output();
  addConst(b, "idx", Constant::fromI32({0, -3}, {2}));
  Value *s0 = addOp(b, "read_state", "s0", {{"input", Binding::of(cache)}}, {kVec4})->output();
  Value *a =
      addOp(b, "add", "a", {{"x", Binding::of(x)}, {"y", Binding::of(s0)}}, {kVec4})->output();
  addOp(b, "write_state", "a_write_state",
        {{"input", Binding::of(cache)}, {"data", Binding::of(a)}}, {});
  Value *scaled =
      addOp(b, "mul", "scaled",
            {{"x", Binding::of(a)}, {"y", Binding::of(ref(Constant::scalarF32(0.5f)))}}, {kVec4})
          ->output();
  Value *pred = addConst(b, "pred", Constant::scalarBool(true))->output();

  Operation *cond = addOp(b, "cond", "branch", {{"pred", Binding::of(pred)}}, {kVec4});
  Block *thenB = cond->addBlock();
  Value *t = addOp(*thenB, "mul", "t", {{"x", Binding::of(scaled)}, {"y", Binding::of(w)}}, {kVec4})
                 ->output();
  thenB->outputs.push_back(t);
  Block *elseB = cond->addBlock();
  Value *e = addOp(*elseB, "identity", "e", {{"x", Binding::of(x)}}, {kVec4})->output();
  elseB->outputs.push_back(e);

  Type blobType = Type::tensor(DType::F16, std::vector<int64_t>{2, 2});
  Value *wb =
      addConst(b, "wb", Constant::fromBlob(blobType, BlobRef{kDefaultWeightFileName, 64, store}))
          ->output();
  Value *r = addOp(b, "reshape", "r",
                   {{"x", Binding::of(cond->output())},
                    {"shape", Binding::of(ref(Constant::fromI32({2, 2}, {2})))}},
                   {blobType})
                 ->output();
  Value *z =
      addOp(b, "add", "z", {{"x", Binding::of(r)}, {"y", Binding::of(wb)}}, {blobType})->output();
  Value *y = addOp(b, "concat", "y",
                   {{"values", Binding::of(a)}, {"axis", Binding::of(ref(Constant::scalarI32(0)))}},
                   {kVec4})
                 ->output();
  b.outputs = {y, z};
  return model;
}

std::shared_ptr<MemoryStore> memoryStore() {
  auto store = std::make_shared<MemoryStore>();
  store->add(64, DType::F16, {0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44});
  return store;
}

//===----------------------------------------------------------------------===//
// Structural comparison
//===----------------------------------------------------------------------===//

void expectSameConstant(const Constant &a, const Constant &b, const std::string &where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.type, b.type) << a.type.str() << " vs " << b.type.str();
  EXPECT_EQ(a.docString, b.docString);
  if (a.kind == Constant::Kind::Blob && b.kind == Constant::Kind::Blob) {
    EXPECT_EQ(a.blob.fileName, b.blob.fileName);
    std::span<const uint8_t> da = a.data(), db = b.data();
    EXPECT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end()));
    return;
  }
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.strings, b.strings);
  ASSERT_EQ(a.elements.size(), b.elements.size());
  for (size_t i = 0; i < a.elements.size(); ++i)
    expectSameConstant(a.elements[i], b.elements[i], where + "[" + std::to_string(i) + "]");
}

void expectSameAttributes(const AttributeMap &a, const AttributeMap &b, const std::string &where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  for (const auto &[key, value] : a) {
    ASSERT_TRUE(b.count(key)) << where << " lacks attribute " << key;
    expectSameConstant(*value, *b.at(key), where + " attribute " + key);
  }
}

void expectSameBlock(const Block &a, const Block &b, const std::string &where);

void expectSameOp(const Operation &a, const Operation &b, const std::string &where) {
  std::string at = where + " op " + a.name;
  SCOPED_TRACE(at);
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.name, b.name);
  expectSameAttributes(a.attributes, b.attributes, at);
  // The reader orders inputs by parameter name; compare in that order.
  auto sorted = [](const Operation &op) {
    std::vector<const OpInput *> v;
    for (const OpInput &in : op.inputs)
      v.push_back(&in);
    std::sort(v.begin(), v.end(),
              [](const OpInput *l, const OpInput *r) { return l->name < r->name; });
    return v;
  };
  auto ia = sorted(a), ib = sorted(b);
  ASSERT_EQ(ia.size(), ib.size());
  for (size_t i = 0; i < ia.size(); ++i) {
    EXPECT_EQ(ia[i]->name, ib[i]->name);
    ASSERT_EQ(ia[i]->bindings.size(), ib[i]->bindings.size());
    for (size_t j = 0; j < ia[i]->bindings.size(); ++j) {
      const Binding &ba = ia[i]->bindings[j], &bb = ib[i]->bindings[j];
      ASSERT_EQ(ba.isValue(), bb.isValue()) << ia[i]->name;
      if (ba.isValue())
        EXPECT_EQ(ba.value->name, bb.value->name);
      else
        expectSameConstant(*ba.constant, *bb.constant, at + " input " + ia[i]->name);
    }
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_EQ(a.outputs[i]->name, b.outputs[i]->name);
    EXPECT_EQ(a.outputs[i]->type, b.outputs[i]->type);
    EXPECT_EQ(b.outputs[i]->definingOp, &b);
  }
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    EXPECT_EQ(b.blocks[i]->parentOp, &b);
    expectSameBlock(*a.blocks[i], *b.blocks[i], at + " block " + std::to_string(i));
  }
}

void expectSameBlock(const Block &a, const Block &b, const std::string &where) {
  ASSERT_EQ(a.inputs.size(), b.inputs.size()) << where;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i]->name, b.inputs[i]->name);
    EXPECT_EQ(a.inputs[i]->type, b.inputs[i]->type);
  }
  ASSERT_EQ(a.ops.size(), b.ops.size()) << where;
  for (size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_EQ(b.ops[i]->parent, &b);
    expectSameOp(*a.ops[i], *b.ops[i], where);
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << where;
  for (size_t i = 0; i < a.outputs.size(); ++i)
    EXPECT_EQ(a.outputs[i]->name, b.outputs[i]->name) << where;
  expectSameAttributes(a.attributes, b.attributes, where);
}

void expectSameFeatures(const std::vector<FeatureDescription> &a,
                        const std::vector<FeatureDescription> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].name);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].shortDescription, b[i].shortDescription);
    const FeatureType &ta = a[i].type, &tb = b[i].type;
    EXPECT_EQ(ta.kind, tb.kind);
    EXPECT_EQ(ta.shape, tb.shape);
    EXPECT_EQ(ta.dataType, tb.dataType);
    EXPECT_EQ(ta.enumeratedShapes, tb.enumeratedShapes);
    EXPECT_EQ(ta.hasShapeRange, tb.hasShapeRange);
    EXPECT_EQ(ta.shapeRange, tb.shapeRange);
    EXPECT_EQ(ta.intDefaultValue, tb.intDefaultValue);
    EXPECT_EQ(ta.floatDefaultValue, tb.floatDefaultValue);
    EXPECT_EQ(ta.doubleDefaultValue, tb.doubleDefaultValue);
    EXPECT_EQ(ta.rawProto, tb.rawProto);
    EXPECT_EQ(ta.isOptional, tb.isOptional);
  }
}

void expectSameModel(const Model &a, const Model &b) {
  EXPECT_EQ(a.specificationVersion, b.specificationVersion);
  EXPECT_EQ(a.isUpdatable, b.isUpdatable);
  const ModelDescription &da = a.description, &db = b.description;
  expectSameFeatures(da.inputs, db.inputs);
  expectSameFeatures(da.outputs, db.outputs);
  expectSameFeatures(da.states, db.states);
  expectSameFeatures(da.trainingInputs, db.trainingInputs);
  EXPECT_EQ(da.predictedFeatureName, db.predictedFeatureName);
  EXPECT_EQ(da.defaultFunctionName, db.defaultFunctionName);
  ASSERT_EQ(da.functions.size(), db.functions.size());
  for (size_t i = 0; i < da.functions.size(); ++i) {
    EXPECT_EQ(da.functions[i].name, db.functions[i].name);
    expectSameFeatures(da.functions[i].inputs, db.functions[i].inputs);
    expectSameFeatures(da.functions[i].outputs, db.functions[i].outputs);
    expectSameFeatures(da.functions[i].states, db.functions[i].states);
  }
  EXPECT_EQ(da.metadata.author, db.metadata.author);
  EXPECT_EQ(da.metadata.shortDescription, db.metadata.shortDescription);
  EXPECT_EQ(da.metadata.versionString, db.metadata.versionString);
  EXPECT_EQ(da.metadata.license, db.metadata.license);
  EXPECT_EQ(da.metadata.userDefined, db.metadata.userDefined);

  const Program &pa = *a.program, &pb = *b.program;
  EXPECT_EQ(pa.version, pb.version);
  EXPECT_EQ(pa.docString, pb.docString);
  expectSameAttributes(pa.attributes, pb.attributes, "program");
  ASSERT_EQ(pa.functions.size(), pb.functions.size());
  for (size_t i = 0; i < pa.functions.size(); ++i) {
    const Function &fa = *pa.functions[i], &fb = *pb.functions[i];
    EXPECT_EQ(fa.name, fb.name);
    EXPECT_EQ(fa.opset, fb.opset);
    ASSERT_EQ(fa.inputs.size(), fb.inputs.size());
    for (size_t j = 0; j < fa.inputs.size(); ++j) {
      EXPECT_EQ(fa.inputs[j]->name, fb.inputs[j]->name);
      EXPECT_EQ(fa.inputs[j]->type, fb.inputs[j]->type);
      EXPECT_EQ(fb.inputs[j]->ownerBlock, fb.body.get());
    }
    expectSameAttributes(fa.attributes, fb.attributes, fa.name);
    expectSameBlock(*fa.body, *fb.body, fa.name);
    EXPECT_EQ(fb.body->parentFunc, &fb);
    ASSERT_EQ(fa.otherSpecializations.size(), fb.otherSpecializations.size());
  }
}

//===----------------------------------------------------------------------===//
// A minimal protobuf wire encoder, to craft inputs our writer would never
// produce and to check field numbers independently of the schema.
//===----------------------------------------------------------------------===//

class Wire {
public:
  Wire &varint(int field, uint64_t v) {
    tag(field, 0);
    raw(v);
    return *this;
  }
  Wire &bytes(int field, const std::string &s) {
    tag(field, 2);
    raw(s.size());
    out_ += s;
    return *this;
  }
  Wire &msg(int field, const Wire &w) { return bytes(field, w.out_); }
  const std::string &str() const { return out_; }

private:
  void tag(int field, int wireType) { raw((static_cast<uint64_t>(field) << 3) | wireType); }
  void raw(uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }
  std::string out_;
};

/// ValueType{tensorType{dataType, rank, dims...}}.
Wire tensorType(uint64_t dataType, std::vector<uint64_t> dims) {
  Wire tt;
  tt.varint(1, dataType).varint(2, dims.size());
  for (uint64_t d : dims)
    tt.msg(3, Wire().msg(1, Wire().varint(1, d)));
  return Wire().msg(1, tt);
}

/// Value{type, immediateValue{tensor{...}}} holding a string scalar.
Wire stringValue(const std::string &s) {
  Wire tv = Wire().msg(4, Wire().bytes(1, s));
  return Wire().msg(2, tensorType(2, {})).msg(3, Wire().msg(1, tv));
}

/// A Model with one function "main" whose block holds `ops` and returns `outputs`.
std::string wireModel(const std::vector<Wire> &ops, const std::vector<std::string> &outputs,
                      const std::vector<Wire> &inputs = {}) {
  Wire block;
  for (const Wire &op : ops)
    block.msg(3, op);
  for (const std::string &o : outputs)
    block.bytes(2, o);
  Wire fn;
  for (const Wire &in : inputs)
    fn.msg(1, in);
  fn.bytes(2, "CoreML8").msg(3, Wire().bytes(1, "CoreML8").msg(2, block));
  Wire program = Wire().varint(1, 1).msg(2, Wire().bytes(1, "main").msg(2, fn));
  return Wire().varint(1, 9).msg(502, program).str();
}

/// Operation{type: const, attributes{name, val}, outputs[name: type]}.
Wire constOp(const std::string &name, const Wire &type, const Wire &val) {
  Wire op;
  op.bytes(1, "const");
  op.msg(3, Wire().bytes(1, name).msg(2, type));
  op.msg(5, Wire().bytes(1, "name").msg(2, stringValue(name)));
  op.msg(5, Wire().bytes(1, "val").msg(2, val));
  return op;
}

//===----------------------------------------------------------------------===//
// Tests
//===----------------------------------------------------------------------===//

TEST(MilProto, RoundTripsProgramWithWeightFile) {
  auto original = buildModel(memoryStore());
  TempFile weights("roundtrip");
  WeightWriter writer(weights.path());
  std::string bytes = serializeModelProto(*original, &writer);
  writer.finish();
  EXPECT_EQ(writer.count(), 1u);

  int opened = 0;
  auto file = WeightFile::open(weights.path());
  auto parsed = parse(bytes, [&](const std::string &name) -> std::shared_ptr<const BlobStore> {
    ++opened;
    EXPECT_EQ(name, kDefaultWeightFileName);
    return file;
  });
  EXPECT_EQ(opened, 1);
  ASSERT_TRUE(parsed->program);
  EXPECT_EQ(parsed->sourcePath, "model.mlmodel");
  EXPECT_EQ(parsed->weightFiles.count(kDefaultWeightFileName), 1u);
  expectSameModel(*original, *parsed);

  // The blob reference points at the record the writer returned.
  const Operation *wb = nullptr;
  walk(*parsed->program->functions[0]->body, [&](const Operation &op) {
    if (op.name == "wb")
      wb = &op;
  });
  ASSERT_TRUE(wb);
  const Constant *val = wb->attribute("val");
  ASSERT_TRUE(val);
  EXPECT_EQ(val->kind, Constant::Kind::Blob);
  EXPECT_EQ(val->blob.offset, 64u);
  EXPECT_EQ(val->blob.store, file);
}

TEST(MilProto, SerializationIsDeterministic) {
  auto model = buildModel(memoryStore());
  TempFile w1("det1"), w2("det2");
  WeightWriter writer1(w1.path()), writer2(w2.path());
  std::string a = serializeModelProto(*model, &writer1);
  std::string b = serializeModelProto(*model, &writer2);
  EXPECT_EQ(a, b);
  // Read -> write gives the same bytes again.
  auto file = std::make_shared<MemoryStore>();
  file->add(64, DType::F16, {0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44});
  auto parsed = parse(a, [&](const std::string &) { return file; });
  TempFile w3("det3");
  WeightWriter writer3(w3.path());
  EXPECT_EQ(serializeModelProto(*parsed, &writer3), a);
}

TEST(MilProto, ReadsWithoutWeights) {
  auto model = buildModel(memoryStore());
  TempFile weights("noweights");
  WeightWriter writer(weights.path());
  std::string bytes = serializeModelProto(*model, &writer);
  auto parsed = parse(bytes, [](const std::string &) { return nullptr; });
  EXPECT_TRUE(parsed->weightFiles.empty());
  const Constant *val = parsed->program->functions[0]->body->ops[8]->attribute("val");
  ASSERT_TRUE(val);
  EXPECT_EQ(val->kind, Constant::Kind::Blob);
  EXPECT_EQ(val->blob.fileName, kDefaultWeightFileName);
  EXPECT_FALSE(val->blob.store);
  // Reading the bytes of an unopened blob is an InputError, not a crash.
  EXPECT_NE(errorOf([&] { val->data(); }), "");
}

TEST(MilProto, BlobConstantsNeedAWeightWriter) {
  auto model = buildModel(memoryStore());
  std::string msg = errorOf([&] { serializeModelProto(*model, nullptr); });
  EXPECT_NE(msg.find("ML Programs with weights must be saved as .mlpackage"), std::string::npos)
      << msg;
}

TEST(MilProto, ImmediateEncodingsFollowTheExporter) {
  auto model = buildModel(memoryStore());
  TempFile weights("encodings");
  WeightWriter writer(weights.path());
  auto parsed = parse(serializeModelProto(*model, &writer));
  const Block &b = *parsed->program->functions[0]->body;
  // fp16 travels as raw bytes, int32 as ints, bool as bools (formats.md §3).
  EXPECT_EQ(b.ops[0]->attribute("val")->protoEncoding, 7);
  EXPECT_EQ(b.ops[1]->attribute("val")->protoEncoding, 2);
  EXPECT_EQ(b.ops[1]->attribute("val")->asInts(), (std::vector<int64_t>{0, -3}));
  const Constant *half = b.ops[5]->input("y")->bindings[0].constant.get();
  ASSERT_TRUE(half);
  EXPECT_EQ(half->protoEncoding, 1);
  EXPECT_EQ(half->asScalar(), 0.5);
  EXPECT_EQ(b.ops[6]->attribute("val")->protoEncoding, 3);
}

TEST(MilProto, InputsAreSortedByParameterName) {
  auto model = buildModel(memoryStore());
  TempFile weights("sorted");
  WeightWriter writer(weights.path());
  auto parsed = parse(serializeModelProto(*model, &writer));
  const Operation &ws = *parsed->program->functions[0]->body->ops[4];
  ASSERT_EQ(ws.type, "write_state");
  ASSERT_EQ(ws.inputs.size(), 2u);
  EXPECT_EQ(ws.inputs[0].name, "data");
  EXPECT_EQ(ws.inputs[1].name, "input");
  EXPECT_TRUE(ws.outputs.empty());
  EXPECT_TRUE(ws.inputs[1].bindings[0].value->type.isState());
}

TEST(MilProto, SymbolicDimsAreWrittenAsUnknown) {
  auto model = std::make_unique<Model>();
  model->specificationVersion = 9;
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Value *x = f->addInput(
      "x", Type::tensor(DType::F32, {Dim::symbolic("is0"), Dim::unknown(), Dim::variadic()}));
  f->addInput("u", Type::unranked(DType::I32));
  f->addInput("l", Type::list(Type::scalar(DType::I64), Dim::of(3)));
  f->addInput("tp", Type::tuple({Type::scalar(DType::Bool), Type::scalar(DType::String)}));
  f->body->outputs.push_back(x);
  auto parsed = parse(serializeModelProto(*model, nullptr));
  const Function &g = *parsed->program->functions[0];
  EXPECT_EQ(g.inputs[0]->type,
            Type::tensor(DType::F32, {Dim::unknown(), Dim::unknown(), Dim::variadic()}));
  EXPECT_EQ(g.inputs[1]->type, Type::unranked(DType::I32));
  EXPECT_FALSE(g.inputs[1]->type.hasRank());
  EXPECT_EQ(g.inputs[2]->type, f->inputs[2]->type);
  EXPECT_EQ(g.inputs[3]->type, f->inputs[3]->type);
  ASSERT_EQ(g.body->outputs.size(), 1u);
  EXPECT_EQ(g.body->outputs[0], g.inputs[0].get());
}

TEST(MilProto, FunctionsAreReadInNameOrderWithOtherSpecializations) {
  auto model = std::make_unique<Model>();
  model->program = std::make_unique<Program>();
  for (const char *name : {"prefill", "decode"}) {
    Function *f = model->program->addFunction(name);
    f->opset = "CoreML8";
    Value *x = f->addInput("x", kVec4);
    f->body->outputs.push_back(x);
  }
  Function *decode = model->program->findFunction("decode");
  auto other = std::make_unique<Block>();
  other->parentFunc = decode;
  other->outputs.push_back(decode->inputs[0].get());
  decode->otherSpecializations["CoreML7"] = std::move(other);
  model->description.defaultFunctionName = "decode";
  FunctionDescription fd;
  fd.name = "decode";
  fd.inputs.push_back(arrayFeature("x", {1, 4}, ArrayDataType::Float16));
  model->description.functions.push_back(fd);

  auto parsed = parse(serializeModelProto(*model, nullptr));
  ASSERT_EQ(parsed->program->functions.size(), 2u);
  EXPECT_EQ(parsed->program->functions[0]->name, "decode");
  EXPECT_EQ(parsed->program->functions[1]->name, "prefill");
  const Function &d = *parsed->program->functions[0];
  ASSERT_EQ(d.otherSpecializations.count("CoreML7"), 1u);
  const Block &o = *d.otherSpecializations.at("CoreML7");
  EXPECT_EQ(o.parentFunc, &d);
  ASSERT_EQ(o.outputs.size(), 1u);
  EXPECT_EQ(o.outputs[0], d.inputs[0].get());
  EXPECT_EQ(parsed->description.defaultFunctionName, "decode");
  EXPECT_EQ(parsed->defaultFunction(), &d);
  expectSameFeatures(model->description.functions[0].inputs,
                     parsed->description.functions[0].inputs);
}

TEST(MilProto, RefusesNeuralNetworkModel) {
  // specificationVersion = 4, neuralNetwork (field 500) = {}.
  std::string bytes = Wire().varint(1, 4).bytes(500, "").str();
  std::string msg = errorOf([&] { parse(bytes); });
  EXPECT_EQ(msg, "model.mlmodel: this is a NeuralNetwork model (field 500); anefit reads ML "
                 "Program models only - convert with coremltools convert_to='mlprogram'");
}

TEST(MilProto, RefusesOtherModelKinds) {
  std::string pipeline = Wire().varint(1, 4).bytes(202, "").str();
  EXPECT_NE(errorOf([&] { parse(pipeline); }).find("this is a Pipeline model (field 202)"),
            std::string::npos);
  std::string tree = Wire().bytes(402, "").str();
  std::string msg = errorOf([&] { parse(tree); });
  EXPECT_NE(msg.find("TreeEnsembleClassifier"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("convert_to"), std::string::npos) << msg;
}

TEST(MilProto, RefusesModelWithoutProgram) {
  std::string bytes = Wire().varint(1, 9).str();
  EXPECT_NE(errorOf([&] { parse(bytes); }).find("expected an ML Program model (Model field 502)"),
            std::string::npos);
}

TEST(MilProto, RefusesTruncatedAndGarbageBytes) {
  auto model = buildModel(memoryStore());
  TempFile weights("truncated");
  WeightWriter writer(weights.path());
  std::string bytes = serializeModelProto(*model, &writer);
  for (size_t cut : {size_t(1), size_t(7), bytes.size() / 2}) {
    std::string msg = errorOf([&] { parse(bytes.substr(0, bytes.size() - cut)); });
    EXPECT_NE(msg.find("model.mlmodel: not a valid Core ML model protobuf"), std::string::npos)
        << "cut " << cut << ": " << msg;
  }
  EXPECT_NE(errorOf([&] {
              parse(std::string("\xff\xff\xff\xff", 4));
            }).find("not a valid Core ML model protobuf"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { parse(""); }).find("(the file is empty)"), std::string::npos);
}

TEST(MilProto, RefusesUndefinedValueName) {
  auto model = std::make_unique<Model>();
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Value ghost("ghost", kVec4);
  addOp(*f->body, "relu", "relu_0", {{"x", Binding::of(&ghost)}}, {kVec4});
  std::string msg = errorOf([&] { parse(serializeModelProto(*model, nullptr)); });
  EXPECT_EQ(msg, "model.mlmodel: function 'main': op 'relu_0': input 'x': refers to undefined "
                 "value 'ghost'");

  // Names from the file are escaped so the message stays on one line.
  Value odd("bad\nname", kVec4);
  model->program->functions[0]->body->ops[0]->setInput("x", Binding::of(&odd));
  msg = errorOf([&] { parse(serializeModelProto(*model, nullptr)); });
  EXPECT_NE(msg.find("refers to undefined value 'bad\\x0aname'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(MilProto, RefusesUseBeforeDefinitionAndUndefinedBlockOutput) {
  // A value defined later in the block is not visible yet.
  auto model = std::make_unique<Model>();
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Value *x = f->addInput("x", kVec4);
  Operation *first = addOp(*f->body, "relu", "first", {{"x", Binding::of(x)}}, {kVec4});
  Value *second = addOp(*f->body, "relu", "second", {{"x", Binding::of(x)}}, {kVec4})->output();
  first->setInput("x", Binding::of(second));
  EXPECT_NE(errorOf([&] {
              parse(serializeModelProto(*model, nullptr));
            }).find("op 'first': input 'x': refers to undefined value 'second'"),
            std::string::npos);

  // A nested block's values are not visible after it.
  std::string bytes = wireModel({}, {"nowhere"});
  EXPECT_EQ(errorOf([&] { parse(bytes); }),
            "model.mlmodel: function 'main': block output refers to undefined value 'nowhere'");
}

TEST(MilProto, ReadsHandEncodedConstsAtTheFormatsFieldNumbers) {
  // const "w": fp16 (code 10) [2] as TensorValue.bytes (field 7).
  Wire fp16Val =
      Wire()
          .msg(2, tensorType(10, {2}))
          .msg(3,
               Wire().msg(1, Wire().msg(7, Wire().bytes(1, std::string("\x00\x3c\x00\xc0", 4)))));
  // const "b": blobFileValue is field 5 of Value; offset 128.
  Wire blobVal = Wire()
                     .msg(2, tensorType(10, {3}))
                     .msg(5, Wire().bytes(1, "@model_path/weights/weight.bin").varint(2, 128));
  // const "i": int16 (code 22) widened into TensorValue.ints (field 2, packed).
  Wire packed;
  packed.bytes(1, std::string("\x05\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11)); // 5, -2
  Wire int16Val = Wire().msg(2, tensorType(22, {2})).msg(3, Wire().msg(1, Wire().msg(2, packed)));
  std::string bytes = wireModel({constOp("w", tensorType(10, {2}), fp16Val),
                                 constOp("b", tensorType(10, {3}), blobVal),
                                 constOp("i", tensorType(22, {2}), int16Val)},
                                {"w"});
  int calls = 0;
  auto parsed = parse(bytes, [&](const std::string &) -> std::shared_ptr<const BlobStore> {
    ++calls;
    return nullptr;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(parsed->specificationVersion, 9);
  const Block &b = *parsed->program->functions[0]->body;
  ASSERT_EQ(b.ops.size(), 3u);
  const Constant *w = b.ops[0]->attribute("val");
  EXPECT_EQ(w->type, Type::tensor(DType::F16, std::vector<int64_t>{2}));
  EXPECT_EQ(w->asDoubles(), (std::vector<double>{1.0, -2.0}));
  const Constant *blob = b.ops[1]->attribute("val");
  EXPECT_EQ(blob->kind, Constant::Kind::Blob);
  EXPECT_EQ(blob->blob.offset, 128u);
  const Constant *i16 = b.ops[2]->attribute("val");
  EXPECT_EQ(i16->type.dtype(), DType::I16);
  EXPECT_EQ(i16->bytes.size(), 4u);
  EXPECT_EQ(i16->asInts(), (std::vector<int64_t>{5, -2}));
  EXPECT_EQ(i16->protoEncoding, 2);
}

TEST(MilProto, RefusesNonUtf8NamesQuietly) {
  Wire op = Wire().bytes(1, "relu");
  op.msg(5, Wire().bytes(1, "name").msg(2, stringValue("bad\xff")));
  std::string bytes = wireModel({op}, {});
  testing::internal::CaptureStderr();
  std::string msg = errorOf([&] { parse(bytes); });
  std::string logged = testing::internal::GetCapturedStderr();
  EXPECT_NE(msg.find("model.mlmodel: not a valid Core ML model protobuf"), std::string::npos)
      << msg;
  EXPECT_EQ(logged, "");
}

TEST(MilProto, RefusesUnknownDataType) {
  Wire input = Wire().bytes(1, "x").msg(2, tensorType(99, {1}));
  std::string msg = errorOf([&] { parse(wireModel({}, {}, {input})); });
  EXPECT_EQ(msg, "model.mlmodel: function 'main': input 'x': expected a known MIL data type, "
                 "found data type code 99");
}

TEST(MilProto, RefusesAbsurdRanksAndOverflowingDims) {
  auto withInput = [](Type t) {
    auto model = std::make_unique<Model>();
    model->program = std::make_unique<Program>();
    Function *f = model->program->addFunction("main");
    f->opset = "CoreML8";
    f->addInput("x", std::move(t));
    return serializeModelProto(*model, nullptr);
  };
  std::string rank65 = withInput(Type::tensor(DType::F32, std::vector<int64_t>(65, 1)));
  EXPECT_NE(errorOf([&] { parse(rank65); }).find("expected a rank between -1 and 64, found 65"),
            std::string::npos);
  std::string overflow =
      withInput(Type::tensor(DType::F32, std::vector<int64_t>{int64_t(1) << 40, int64_t(1) << 40}));
  EXPECT_NE(errorOf([&] { parse(overflow); }).find("product of its dimensions overflows"),
            std::string::npos);
  // 2^64 - 1 as an unsigned dimension does not fit an int64.
  std::string huge = wireModel({}, {}, {Wire().bytes(1, "x").msg(2, tensorType(11, {~0ull}))});
  EXPECT_NE(errorOf([&] { parse(huge); }).find("does not fit in 63 bits"), std::string::npos);
  // rank disagreeing with the number of dimensions.
  Wire tt = Wire().varint(1, 11).varint(2, 3);
  std::string mismatch = wireModel({}, {}, {Wire().bytes(1, "x").msg(2, Wire().msg(1, tt))});
  EXPECT_NE(errorOf([&] { parse(mismatch); }).find("expected 3 dimensions for rank 3, found 0"),
            std::string::npos);
}

TEST(MilProto, RefusesElementCountMismatch) {
  auto model = std::make_unique<Model>();
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Constant c = Constant::fromF32({1, 2, 3}, {3});
  c.type = Type::tensor(DType::F32, std::vector<int64_t>{4});
  c.protoEncoding = 7; // raw bytes: 12 where 16 are needed
  addConst(*f->body, "c", c);
  std::string msg = errorOf([&] { parse(serializeModelProto(*model, nullptr)); });
  EXPECT_EQ(msg, "model.mlmodel: function 'main': op 'c': attribute 'val': expected 16 bytes for "
                 "(4,fp32), found 12");

  Wire floats = Wire().msg(1, Wire().bytes(1, std::string(8, '\0'))); // two floats
  Wire val = Wire().msg(2, tensorType(11, {3})).msg(3, Wire().msg(1, floats));
  std::string bytes = wireModel({constOp("v", tensorType(11, {3}), val)}, {});
  EXPECT_NE(errorOf([&] { parse(bytes); }).find("expected 3 elements for (3,fp32), found 2"),
            std::string::npos);
}

TEST(MilProto, RefusesWrongTensorFieldAndOutOfRangeInts) {
  // int8 values (code 21) must not arrive as floats.
  Wire floats = Wire().msg(1, Wire().bytes(1, std::string(4, '\0')));
  Wire val = Wire().msg(2, tensorType(21, {1})).msg(3, Wire().msg(1, floats));
  std::string bytes = wireModel({constOp("v", tensorType(21, {1}), val)}, {});
  EXPECT_NE(errorOf([&] { parse(bytes); })
                .find("expected a 'bytes' tensor value for int8, found "
                      "'floats'"),
            std::string::npos);
  // 70000 does not fit an int16 (ints, packed varint 70000 = f0 a2 04).
  Wire ints = Wire().msg(2, Wire().bytes(1, std::string("\xf0\xa2\x04", 3)));
  Wire big = Wire().msg(2, tensorType(22, {1})).msg(3, Wire().msg(1, ints));
  std::string wrong = wireModel({constOp("v", tensorType(22, {1}), big)}, {});
  EXPECT_NE(errorOf([&] { parse(wrong); }).find("element 0 = 70000 is out of range for int16"),
            std::string::npos);
}

TEST(MilProto, RefusesMalformedOperations) {
  // An op without a name attribute.
  Wire unnamed = Wire().bytes(1, "relu");
  EXPECT_EQ(errorOf([&] { parse(wireModel({unnamed}, {})); }),
            "model.mlmodel: function 'main': op #0 ('relu'): expected a 'name' attribute, found "
            "none");
  // An empty binding.
  Wire op = Wire().bytes(1, "relu");
  op.msg(2, Wire().bytes(1, "x").msg(2, Wire().msg(1, Wire())));
  op.msg(5, Wire().bytes(1, "name").msg(2, stringValue("r")));
  EXPECT_NE(errorOf([&] {
              parse(wireModel({op}, {}));
            }).find("op 'r': input 'x': expected a name or a value binding"),
            std::string::npos);
  // A const whose value is empty.
  Wire empty = constOp("c", tensorType(11, {}), Wire());
  EXPECT_NE(errorOf([&] {
              parse(wireModel({empty}, {}));
            }).find("expected an immediate or blob-file value"),
            std::string::npos);
  // A function whose opset has no block.
  Wire fn = Wire().bytes(2, "CoreML8");
  std::string noBody = Wire().msg(502, Wire().msg(2, Wire().bytes(1, "main").msg(2, fn))).str();
  EXPECT_NE(errorOf([&] {
              parse(noBody);
            }).find("function 'main': expected a block specialization for opset 'CoreML8'"),
            std::string::npos);
}

TEST(MilProto, KeepsUninterpretedFeatureTypes) {
  // FeatureType{imageType{width 224, height 224, colorSpace RGB}}.
  std::string image = Wire().msg(4, Wire().varint(1, 224).varint(2, 224).varint(3, 20)).str();
  auto model = std::make_unique<Model>();
  model->program = std::make_unique<Program>();
  model->program->addFunction("main")->opset = "CoreML8";
  FeatureDescription f;
  f.name = "image";
  f.type.kind = FeatureType::Kind::Other;
  f.type.rawProto = image;
  model->description.inputs.push_back(f);
  auto parsed = parse(serializeModelProto(*model, nullptr));
  ASSERT_EQ(parsed->description.inputs.size(), 1u);
  EXPECT_EQ(parsed->description.inputs[0].type.kind, FeatureType::Kind::Other);
  EXPECT_EQ(parsed->description.inputs[0].type.rawProto, image);
}

} // namespace

namespace {

TEST(MilProto, RoundTripsLoopBlocksSubByteAndBlobBindings) {
  auto store = std::make_shared<MemoryStore>();
  store->add(64, DType::U4, {0x21, 0x43, 0x05});         // uint4 [5]: 1..5, 4 padding bits
  store->add(192, DType::F16, {0x00, 0x3c, 0x00, 0x40}); // fp16 [2]
  auto model = std::make_unique<Model>();
  model->specificationVersion = 9;
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Type i32 = Type::scalar(DType::I32);
  Value *n = f->addInput("n", i32);
  Block &b = *f->body;

  // while_loop(loop_vars=[n]) { cond: n_x0 < 10 } { body: n_x0 + 1 }
  Operation *loop = addOp(b, "while_loop", "loop", {{"loop_vars", Binding::of(n)}}, {i32});
  Block *cond = loop->addBlock();
  Value *cx = cond->addInput("n_x0", i32);
  Value *lt = addOp(*cond, "less", "lt",
                    {{"x", Binding::of(cx)}, {"y", Binding::of(ref(Constant::scalarI32(10)))}},
                    {Type::scalar(DType::Bool)})
                  ->output();
  cond->outputs.push_back(lt);
  Block *body = loop->addBlock();
  Value *bx = body->addInput("n_x0_1", i32);
  Value *inc =
      addOp(*body, "add", "inc",
            {{"x", Binding::of(bx)}, {"y", Binding::of(ref(Constant::scalarI32(1)))}}, {i32})
          ->output();
  body->outputs.push_back(inc);
  body->attributes["note"] = ref(Constant::scalarString("body"));

  // iOS18 constexpr ops take blob-backed values as immediate bindings.
  Type u4 = Type::tensor(DType::U4, std::vector<int64_t>{5});
  Type h2 = Type::tensor(DType::F16, std::vector<int64_t>{2});
  Constant packed;
  packed.type = Type::tensor(DType::U4, std::vector<int64_t>{3});
  packed.bytes = {0x21, 0x03};
  addConst(b, "small", packed); // sub-byte immediates travel as bytes
  addOp(b, "constexpr_lut_to_dense", "lut",
        {{"indices",
          Binding::of(ref(Constant::fromBlob(u4, BlobRef{kDefaultWeightFileName, 64, store})))},
         {"lut",
          Binding::of(ref(Constant::fromBlob(h2, BlobRef{kDefaultWeightFileName, 192, store})))}},
        {Type::tensor(DType::F16, std::vector<int64_t>{5})});
  b.outputs = {loop->output()};

  TempFile weights("loop");
  WeightWriter writer(weights.path());
  std::string bytes = serializeModelProto(*model, &writer);
  writer.finish();
  EXPECT_EQ(writer.count(), 2u);
  auto file = WeightFile::open(weights.path());
  auto parsed = parse(bytes, [&](const std::string &) { return file; });
  expectSameModel(*model, *parsed);

  const Block &pb = *parsed->program->functions[0]->body;
  const Operation &ploop = *pb.ops[0];
  ASSERT_EQ(ploop.blocks.size(), 2u);
  // Loop-block inputs resolve inside their block.
  EXPECT_EQ(ploop.blocks[0]->ops[0]->inputValue("x"), ploop.blocks[0]->inputs[0].get());
  EXPECT_EQ(ploop.blocks[1]->outputs[0], ploop.blocks[1]->ops[0]->output());
  EXPECT_EQ(pb.ops[1]->attribute("val")->protoEncoding, 7);
  EXPECT_EQ(pb.ops[1]->attribute("val")->asInts(), (std::vector<int64_t>{1, 2, 3}));
  const Constant *indices = pb.ops[2]->input("indices")->bindings[0].constant.get();
  ASSERT_TRUE(indices);
  EXPECT_EQ(indices->kind, Constant::Kind::Blob);
  EXPECT_EQ(indices->asInts(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(file->record(indices->blob.offset).paddingBits, 4u);
}

TEST(MilProto, RefusesSubByteImmediateOfWrongSize) {
  auto model = std::make_unique<Model>();
  model->program = std::make_unique<Program>();
  Function *f = model->program->addFunction("main");
  f->opset = "CoreML8";
  Constant packed;
  packed.type = Type::tensor(DType::U4, std::vector<int64_t>{5}); // needs 3 bytes
  packed.bytes = {0x21, 0x43};
  addConst(*f->body, "c", packed);
  EXPECT_NE(errorOf([&] {
              parse(serializeModelProto(*model, nullptr));
            }).find("expected 3 bytes for (5,uint4), found 2"),
            std::string::npos);
}

} // namespace
