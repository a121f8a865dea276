//===- MilProto.cpp - Model protobuf <-> IR ------------------------------===//
//
// Reads a serialized Core ML Model into the IR and writes it back. The reader
// checks everything a file can get wrong (value types, ranks, element counts,
// undefined names, other model kinds) and reports it as an InputError naming
// the function, op and value; the writer is deterministic so equal models
// give byte-identical files.
//
//===----------------------------------------------------------------------===//
#include "io/MilProto.h"

#include "io/WeightFile.h"
#include "support/Error.h"

#include "MIL.pb.h"
#include "Model.pb.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/wire_format_lite.h>
// Protobuf 3.x can silence its own log while we parse untrusted bytes.
#if GOOGLE_PROTOBUF_VERSION < 4022000 && __has_include(<google/protobuf/stubs/logging.h>)
#include <google/protobuf/stubs/logging.h>
#define ANEFIT_PROTOBUF_HAS_LOG_SILENCER 1
#endif

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <unordered_map>

namespace anefit {
namespace {

namespace pb = anefit::coreml;
namespace mil = anefit::coreml::mil;

/// Ranks beyond this are refused: no real model comes close, and a huge rank
/// would only serve to make later passes allocate.
constexpr int64_t kMaxRank = 64;

/// Members of the Model.Type oneof other than mlProgram (formats.md §2). They
/// are not declared in our schema, so they arrive as unknown fields.
struct OtherModelKind {
  int field;
  const char *name;
  /// True when coremltools can convert the source of such a model to an ML Program.
  bool convertible;
};

constexpr OtherModelKind kOtherModelKinds[] = {
    {200, "PipelineClassifier", false},
    {201, "PipelineRegressor", false},
    {202, "Pipeline", false},
    {300, "GLMRegressor", false},
    {301, "SupportVectorRegressor", false},
    {302, "TreeEnsembleRegressor", false},
    {303, "NeuralNetworkRegressor", true},
    {304, "BayesianProbitRegressor", false},
    {400, "GLMClassifier", false},
    {401, "SupportVectorClassifier", false},
    {402, "TreeEnsembleClassifier", false},
    {403, "NeuralNetworkClassifier", true},
    {404, "KNearestNeighborsClassifier", false},
    {500, "NeuralNetwork", true},
    {501, "ItemSimilarityRecommender", false},
    {555, "CustomModel", false},
    {556, "LinkedModel", false},
    {560, "ClassConfidenceThresholding", false},
    {600, "OneHotEncoder", false},
    {601, "Imputer", false},
    {602, "FeatureVectorizer", false},
    {603, "DictVectorizer", false},
    {604, "Scaler", false},
    {606, "CategoricalMapping", false},
    {607, "Normalizer", false},
    {609, "ArrayFeatureExtractor", false},
    {610, "NonMaximumSuppression", false},
    {900, "Identity", false},
    {2000, "TextClassifier", false},
    {2001, "WordTagger", false},
    {2002, "VisionFeaturePrint", false},
    {2003, "SoundAnalysisPreprocessing", false},
    {2004, "Gazetteer", false},
    {2005, "WordEmbedding", false},
    {2006, "AudioFeaturePrint", false},
    {3000, "SerializedModel", false},
};

const OtherModelKind *findOtherModelKind(int field) {
  for (const OtherModelKind &k : kOtherModelKinds)
    if (k.field == field)
      return &k;
  return nullptr;
}

/// TensorValue oneof field numbers; Constant::protoEncoding stores one of them.
enum TensorField : uint8_t {
  kNoField = 0,
  kFloats = 1,
  kInts = 2,
  kBools = 3,
  kStrings = 4,
  kLongInts = 5,
  kDoubles = 6,
  kBytes = 7,
};

const char *tensorFieldName(int field) {
  switch (field) {
  case kFloats:
    return "floats";
  case kInts:
    return "ints";
  case kBools:
    return "bools";
  case kStrings:
    return "strings";
  case kLongInts:
    return "longInts";
  case kDoubles:
    return "doubles";
  case kBytes:
    return "bytes";
  default:
    return "no value";
  }
}

/// The field coremltools uses for a dtype (formats.md §3 exporter conventions).
TensorField naturalTensorField(DType t) {
  switch (t) {
  case DType::Bool:
    return kBools;
  case DType::String:
    return kStrings;
  case DType::F32:
    return kFloats;
  case DType::F64:
    return kDoubles;
  case DType::I64:
  case DType::U64:
    return kLongInts;
  case DType::I32:
  case DType::I16:
  case DType::U16:
    return kInts;
  default:
    return kBytes;
  }
}

/// Whether values of dtype `t` can travel in TensorValue field `f`. Floats
/// and doubles need a float type we can convert to (not fp8); the integer
/// fields carry integers and bools; bytes carry any fixed-width type.
bool tensorFieldFits(DType t, int f) {
  if (t == DType::String)
    return f == kStrings;
  switch (f) {
  case kBytes:
    return true;
  case kFloats:
  case kDoubles:
    return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64;
  case kInts:
  case kLongInts:
  case kBools:
    return isInteger(t) || t == DType::Bool;
  default:
    return false;
  }
}

/// A name from the file, quoted for a message: control and non-ASCII bytes
/// escaped so the message stays one printable line, and cut after 80 bytes.
std::string quoted(const std::string &s) {
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  if (s.size() > kMaxShown)
    out += "...";
  return out + "'";
}

/// Number of elements of a static shape, or nullopt if some dim is not static.
/// Shapes are checked against overflow when read, so the product fits.
std::optional<uint64_t> staticCount(const Type &t) {
  if (!t.isTensor() || !t.hasStaticShape())
    return std::nullopt;
  uint64_t n = 1;
  for (const Dim &d : t.shape())
    n *= static_cast<uint64_t>(d.size);
  return n;
}

template <typename T> void storeAt(std::vector<uint8_t> &bytes, uint64_t i, T v) {
  std::memcpy(&bytes[i * sizeof(T)], &v, sizeof(T));
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

class ProtoReader {
public:
  ProtoReader(const std::string &file, const WeightOpener &openWeights, Model &model)
      : file_(file), openWeights_(openWeights), model_(model) {}

  void readModel(const pb::Model &pm);

private:
  [[noreturn]] void fail(const std::string &place, const std::string &message) const {
    throw InputError::at(file_, place, message);
  }

  Type readType(const mil::ValueType &vt, const std::string &place);
  Dim readDim(const mil::Dimension &d, const std::string &place);
  Constant readValue(const mil::Value &v, const std::string &place);
  Constant readTensorValue(const mil::TensorValue &tv, const Type &type, const std::string &place);
  AttributeMap readAttributes(const google::protobuf::Map<std::string, mil::Value> &attrs,
                              const std::string &place, const char *skip = nullptr);
  std::shared_ptr<const BlobStore> store(const std::string &fileName);

  void readFunction(const std::string &name, const mil::Function &pf, Program &program);
  void readBlock(const mil::Block &pbk, Block &block, const std::string &place);
  void readOperation(const mil::Operation &pop, Block &block, size_t index,
                     const std::string &blockPlace);
  Value *lookup(const std::string &name) const;
  void define(Value *v) { scopes_.back()[v->name] = v; }

  FeatureType readFeatureType(const pb::FeatureType &p);
  FeatureDescription readFeature(const pb::FeatureDescription &p);
  std::vector<FeatureDescription>
  readFeatures(const google::protobuf::RepeatedPtrField<pb::FeatureDescription> &ps);
  void readDescription(const pb::ModelDescription &pd, ModelDescription &d);

  const std::string &file_;
  const WeightOpener &openWeights_;
  Model &model_;
  /// Weight files asked for so far, by name (null when not opened).
  std::map<std::string, std::shared_ptr<const BlobStore>> stores_;
  /// Values visible at the current point: function inputs, then one scope per
  /// enclosing block, innermost last.
  std::vector<std::unordered_map<std::string, Value *>> scopes_;
};

Dim ProtoReader::readDim(const mil::Dimension &d, const std::string &place) {
  switch (d.dimension_case()) {
  case mil::Dimension::kConstant: {
    uint64_t size = d.constant().size();
    if (size > static_cast<uint64_t>(INT64_MAX))
      fail(place, "dimension " + std::to_string(size) + " does not fit in 63 bits");
    return Dim::of(static_cast<int64_t>(size));
  }
  case mil::Dimension::kUnknown:
    return d.unknown().variadic() ? Dim::variadic() : Dim::unknown();
  default:
    fail(place, "expected a constant or unknown dimension, found an empty Dimension");
  }
}

Type ProtoReader::readType(const mil::ValueType &vt, const std::string &place) {
  switch (vt.type_case()) {
  case mil::ValueType::kTensorType: {
    const mil::TensorType &tt = vt.tensortype();
    std::optional<DType> dtype = dtypeFromProtoCode(tt.datatype());
    if (!dtype)
      failExpected(file_, place, "a known MIL data type",
                   "data type code " + std::to_string(tt.datatype()));
    if (tt.rank() == -1) {
      if (tt.dimensions_size() != 0)
        failExpected(file_, place, "no dimensions for rank -1",
                     std::to_string(tt.dimensions_size()));
      return Type::unranked(*dtype);
    }
    if (tt.rank() < -1 || tt.rank() > kMaxRank)
      failExpected(file_, place, "a rank between -1 and " + std::to_string(kMaxRank),
                   std::to_string(tt.rank()));
    if (tt.dimensions_size() != tt.rank())
      failExpected(file_, place,
                   std::to_string(tt.rank()) + " dimensions for rank " + std::to_string(tt.rank()),
                   std::to_string(tt.dimensions_size()));
    std::vector<Dim> shape;
    shape.reserve(tt.dimensions_size());
    uint64_t count = 1;
    for (const mil::Dimension &d : tt.dimensions()) {
      shape.push_back(readDim(d, place));
      if (shape.back().isStatic() &&
          __builtin_mul_overflow(count, static_cast<uint64_t>(shape.back().size), &count))
        fail(place, "shape has too many elements (the product of its dimensions overflows)");
    }
    if (count > static_cast<uint64_t>(INT64_MAX))
      fail(place, "shape has too many elements (the product of its dimensions overflows)");
    return Type::tensor(*dtype, std::move(shape));
  }
  case mil::ValueType::kListType: {
    const mil::ListType &lt = vt.listtype();
    Dim length = lt.has_length() ? readDim(lt.length(), place) : Dim::unknown();
    return Type::list(readType(lt.type(), place), std::move(length));
  }
  case mil::ValueType::kTupleType: {
    std::vector<Type> members;
    members.reserve(vt.tupletype().types_size());
    for (const mil::ValueType &m : vt.tupletype().types())
      members.push_back(readType(m, place));
    return Type::tuple(std::move(members));
  }
  case mil::ValueType::kDictionaryType:
    return Type::dict(readType(vt.dictionarytype().keytype(), place),
                      readType(vt.dictionarytype().valuetype(), place));
  case mil::ValueType::kStateType: {
    Type wrapped = readType(vt.statetype().wrappedtype(), place);
    if (!wrapped.isTensor())
      failExpected(file_, place, "a state wrapping a tensor", "a state of " + wrapped.kindStr());
    return Type::state(std::move(wrapped));
  }
  default:
    fail(place, "expected a tensor, list, tuple, dictionary or state type, found an empty "
                "ValueType");
  }
}

std::shared_ptr<const BlobStore> ProtoReader::store(const std::string &fileName) {
  auto it = stores_.find(fileName);
  if (it != stores_.end())
    return it->second;
  std::shared_ptr<const BlobStore> s = openWeights_ ? openWeights_(fileName) : nullptr;
  stores_.emplace(fileName, s);
  if (s)
    model_.weightFiles[fileName] = s;
  return s;
}

Constant ProtoReader::readTensorValue(const mil::TensorValue &tv, const Type &type,
                                      const std::string &place) {
  DType dtype = type.dtype();
  int field = static_cast<int>(tv.value_case());
  if (field != kNoField && !tensorFieldFits(dtype, field))
    failExpected(file_, place,
                 std::string("a '") + tensorFieldName(naturalTensorField(dtype)) +
                     "' tensor value for " + std::string(dtypeName(dtype)),
                 std::string("'") + tensorFieldName(field) + "'");

  Constant c;
  c.type = type;
  c.kind = Constant::Kind::Tensor;
  c.protoEncoding = static_cast<uint8_t>(field);

  int bits = dtypeBits(dtype);
  auto alloc = [&](uint64_t n) { c.bytes.assign(storageBytes(dtype, n), 0); };
  auto storeInt = [&](uint64_t i, int64_t v) {
    DTypeKind k = dtypeKind(dtype);
    if (dtype == DType::U64) {
      // longInts carries uint64 values in their two's-complement bit pattern.
      storeAt<int64_t>(c.bytes, i, v);
      return;
    }
    if (k == DTypeKind::Bool) {
      c.bytes[i] = v != 0;
      return;
    }
    bool inRange = k == DTypeKind::Signed ? bits >= 64 || (v >= -(int64_t(1) << (bits - 1)) &&
                                                           v < (int64_t(1) << (bits - 1)))
                                          : v >= 0 && (bits >= 64 || v < (int64_t(1) << bits));
    if (!inRange)
      fail(place, "element " + std::to_string(i) + " = " + std::to_string(v) +
                      " is out of range for " + std::string(dtypeName(dtype)));
    if (bits < 8) {
      storePackedBits(c.bytes, i, bits, static_cast<uint64_t>(v));
      return;
    }
    switch (bits) {
    case 8:
      c.bytes[i] = static_cast<uint8_t>(v);
      break;
    case 16:
      storeAt<uint16_t>(c.bytes, i, static_cast<uint16_t>(v));
      break;
    case 32:
      storeAt<uint32_t>(c.bytes, i, static_cast<uint32_t>(v));
      break;
    default:
      storeAt<int64_t>(c.bytes, i, v);
      break;
    }
  };
  auto storeFloat = [&](uint64_t i, double v) {
    switch (dtype) {
    case DType::F16:
      storeAt<uint16_t>(c.bytes, i, floatToHalf(static_cast<float>(v)));
      break;
    case DType::BF16:
      storeAt<uint16_t>(c.bytes, i, floatToBf16(static_cast<float>(v)));
      break;
    case DType::F32:
      storeAt<float>(c.bytes, i, static_cast<float>(v));
      break;
    default:
      storeAt<double>(c.bytes, i, v);
      break;
    }
  };

  uint64_t found = 0; // elements present in the value
  switch (tv.value_case()) {
  case mil::TensorValue::kFloats: {
    const auto &vs = tv.floats().values();
    alloc(found = vs.size());
    for (int i = 0; i < vs.size(); ++i)
      storeFloat(i, vs[i]);
    break;
  }
  case mil::TensorValue::kDoubles: {
    const auto &vs = tv.doubles().values();
    alloc(found = vs.size());
    for (int i = 0; i < vs.size(); ++i)
      storeFloat(i, vs[i]);
    break;
  }
  case mil::TensorValue::kInts: {
    const auto &vs = tv.ints().values();
    alloc(found = vs.size());
    for (int i = 0; i < vs.size(); ++i)
      storeInt(i, vs[i]);
    break;
  }
  case mil::TensorValue::kLongInts: {
    const auto &vs = tv.longints().values();
    alloc(found = vs.size());
    for (int i = 0; i < vs.size(); ++i)
      storeInt(i, vs[i]);
    break;
  }
  case mil::TensorValue::kBools: {
    const auto &vs = tv.bools().values();
    alloc(found = vs.size());
    for (int i = 0; i < vs.size(); ++i)
      storeInt(i, vs[i] ? 1 : 0);
    break;
  }
  case mil::TensorValue::kStrings:
    c.strings.assign(tv.strings().values().begin(), tv.strings().values().end());
    found = c.strings.size();
    break;
  case mil::TensorValue::kBytes: {
    const std::string &raw = tv.bytes().values();
    c.bytes.assign(raw.begin(), raw.end());
    break;
  }
  default:
    break;
  }

  std::optional<uint64_t> expected = staticCount(type);
  if (!expected)
    return c; // a constant of non-static type: nothing to compare against
  if (field == kBytes) {
    uint64_t need = storageBytes(dtype, *expected);
    if (c.bytes.size() != need)
      failExpected(file_, place, std::to_string(need) + " bytes for " + type.shapeStr(),
                   std::to_string(c.bytes.size()));
  } else if (found != *expected) {
    failExpected(file_, place, std::to_string(*expected) + " elements for " + type.shapeStr(),
                 std::to_string(found));
  }
  return c;
}

Constant ProtoReader::readValue(const mil::Value &v, const std::string &place) {
  Constant c;
  if (v.value_case() == mil::Value::kBlobFileValue) {
    if (!v.has_type())
      fail(place, "blob-file value has no type");
    Type t = readType(v.type(), place);
    if (!t.isTensor() || !t.hasStaticShape())
      failExpected(file_, place, "a tensor of static shape for a blob-file value", t.str());
    const mil::Value::BlobFileValue &bf = v.blobfilevalue();
    c = Constant::fromBlob(std::move(t), BlobRef{bf.filename(), bf.offset(), store(bf.filename())});
  } else if (v.value_case() == mil::Value::kImmediateValue) {
    const mil::Value::ImmediateValue &iv = v.immediatevalue();
    auto readMembers = [&](const auto &values, Constant::Kind kind) {
      c.kind = kind;
      c.elements.reserve(values.size());
      std::vector<Type> types;
      for (const mil::Value &m : values) {
        c.elements.push_back(readValue(m, place));
        types.push_back(c.elements.back().type);
      }
      return types;
    };
    switch (iv.value_case()) {
    case mil::Value::ImmediateValue::kTensor: {
      if (!v.has_type())
        fail(place, "tensor value has no type");
      Type t = readType(v.type(), place);
      if (!t.isTensor())
        failExpected(file_, place, "a tensor type for a tensor value", t.str());
      c = readTensorValue(iv.tensor(), t, place);
      break;
    }
    case mil::Value::ImmediateValue::kTuple: {
      std::vector<Type> types = readMembers(iv.tuple().values(), Constant::Kind::Tuple);
      // Older exporters leave the type of tuple values out; it follows from the members.
      c.type = v.has_type() ? readType(v.type(), place) : Type::tuple(std::move(types));
      break;
    }
    case mil::Value::ImmediateValue::kList: {
      std::vector<Type> types = readMembers(iv.list().values(), Constant::Kind::List);
      if (v.has_type())
        c.type = readType(v.type(), place);
      else
        c.type = Type::list(types.empty() ? Type::scalar(DType::F32) : types.front(),
                            Dim::of(static_cast<int64_t>(types.size())));
      break;
    }
    case mil::Value::ImmediateValue::kDictionary: {
      c.kind = Constant::Kind::Dict;
      const auto &pairs = iv.dictionary().values();
      c.elements.reserve(2 * static_cast<size_t>(pairs.size()));
      for (const auto &kv : pairs) {
        c.elements.push_back(readValue(kv.key(), place));
        c.elements.push_back(readValue(kv.value(), place));
      }
      if (v.has_type())
        c.type = readType(v.type(), place);
      else if (c.elements.size() >= 2)
        c.type = Type::dict(c.elements[0].type, c.elements[1].type);
      else
        fail(place, "empty dictionary value has no type");
      break;
    }
    default:
      fail(place, "expected a tensor, tuple, list or dictionary immediate value, found an "
                  "empty ImmediateValue");
    }
  } else {
    fail(place, "expected an immediate or blob-file value, found an empty Value");
  }
  c.docString = v.docstring();
  return c;
}

AttributeMap
ProtoReader::readAttributes(const google::protobuf::Map<std::string, mil::Value> &attrs,
                            const std::string &place, const char *skip) {
  AttributeMap out;
  for (const auto &[key, value] : attrs) {
    if (skip && key == skip)
      continue;
    out[key] = std::make_shared<const Constant>(
        readValue(value, place + (place.empty() ? "" : ": ") + "attribute " + quoted(key)));
  }
  return out;
}

Value *ProtoReader::lookup(const std::string &name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end())
      return found->second;
  }
  return nullptr;
}

void ProtoReader::readOperation(const mil::Operation &pop, Block &block, size_t index,
                                const std::string &blockPlace) {
  std::string opPlace =
      blockPlace + ": op #" + std::to_string(index) + " (" + quoted(pop.type()) + ")";
  auto nameIt = pop.attributes().find("name");
  if (nameIt == pop.attributes().end())
    fail(opPlace, "expected a 'name' attribute, found none");
  Constant nameValue = readValue(nameIt->second, opPlace + ": attribute 'name'");
  std::optional<std::string> name = nameValue.asString();
  if (!name)
    failExpected(file_, opPlace + ": attribute 'name'", "a string scalar", nameValue.type.str());
  if (pop.type().empty())
    failExpected(file_, opPlace, "an op type", "an empty string");

  Operation *op = block.append(std::make_unique<Operation>(pop.type(), *name));
  opPlace = blockPlace + ": op " + quoted(*name);
  op->attributes = readAttributes(pop.attributes(), opPlace, "name");

  // Protobuf map order is unspecified; parameter name order is stable.
  std::vector<const std::string *> params;
  params.reserve(pop.inputs().size());
  for (const auto &entry : pop.inputs())
    params.push_back(&entry.first);
  std::sort(params.begin(), params.end(),
            [](const std::string *a, const std::string *b) { return *a < *b; });
  for (const std::string *param : params) {
    std::string place = opPlace + ": input " + quoted(*param);
    OpInput in{*param, {}};
    const mil::Argument &arg = pop.inputs().at(*param);
    in.bindings.reserve(arg.arguments_size());
    for (const mil::Argument::Binding &b : arg.arguments()) {
      switch (b.binding_case()) {
      case mil::Argument::Binding::kName: {
        Value *v = lookup(b.name());
        if (!v)
          fail(place, "refers to undefined value " + quoted(b.name()));
        in.bindings.push_back(Binding::of(v));
        break;
      }
      case mil::Argument::Binding::kValue:
        in.bindings.push_back(
            Binding::of(std::make_shared<const Constant>(readValue(b.value(), place))));
        break;
      default:
        fail(place, "expected a name or a value binding, found an empty Binding");
      }
    }
    op->inputs.push_back(std::move(in));
  }

  // Nested blocks see the values defined so far, not this op's own outputs.
  for (int i = 0; i < pop.blocks_size(); ++i) {
    Block *nested = op->addBlock();
    readBlock(pop.blocks(i), *nested, opPlace + ": block " + std::to_string(i));
  }

  for (const mil::NamedValueType &out : pop.outputs()) {
    std::string place = opPlace + ": output " + quoted(out.name());
    if (out.name().empty())
      failExpected(file_, opPlace, "a named output", "an empty output name");
    define(op->addOutput(out.name(), readType(out.type(), place)));
  }
}

void ProtoReader::readBlock(const mil::Block &pbk, Block &block, const std::string &place) {
  scopes_.emplace_back();
  for (const mil::NamedValueType &in : pbk.inputs())
    define(block.addInput(in.name(), readType(in.type(), place + ": input " + quoted(in.name()))));
  for (int i = 0; i < pbk.operations_size(); ++i)
    readOperation(pbk.operations(i), block, static_cast<size_t>(i), place);
  for (const std::string &name : pbk.outputs()) {
    Value *v = lookup(name);
    if (!v)
      fail(place, "block output refers to undefined value " + quoted(name));
    block.outputs.push_back(v);
  }
  block.attributes = readAttributes(pbk.attributes(), place);
  scopes_.pop_back();
}

void ProtoReader::readFunction(const std::string &name, const mil::Function &pf, Program &program) {
  std::string place = "function " + quoted(name);
  Function *f = program.addFunction(name);
  f->opset = pf.opset();
  scopes_.emplace_back();
  for (const mil::NamedValueType &in : pf.inputs())
    define(f->addInput(in.name(), readType(in.type(), place + ": input " + quoted(in.name()))));
  f->attributes = readAttributes(pf.attributes(), place);

  auto body = pf.block_specializations().find(pf.opset());
  if (body == pf.block_specializations().end())
    failExpected(file_, place, "a block specialization for opset " + quoted(pf.opset()),
                 std::to_string(pf.block_specializations().size()) + " specializations without it");
  readBlock(body->second, *f->body, place);

  std::vector<std::string> others;
  for (const auto &entry : pf.block_specializations())
    if (entry.first != pf.opset())
      others.push_back(entry.first);
  std::sort(others.begin(), others.end());
  for (const std::string &key : others) {
    auto block = std::make_unique<Block>();
    block->parentFunc = f;
    readBlock(pf.block_specializations().at(key), *block,
              place + ": specialization " + quoted(key));
    f->otherSpecializations[key] = std::move(block);
  }
  scopes_.pop_back();
}

FeatureType ProtoReader::readFeatureType(const pb::FeatureType &p) {
  FeatureType ft;
  ft.isOptional = p.isoptional();
  auto readArray = [&](const pb::ArrayFeatureType &a) {
    ft.shape.assign(a.shape().begin(), a.shape().end());
    ft.dataType = static_cast<ArrayDataType>(a.datatype());
    if (a.has_enumeratedshapes())
      for (const auto &s : a.enumeratedshapes().shapes())
        ft.enumeratedShapes.emplace_back(s.shape().begin(), s.shape().end());
    if (a.has_shaperange()) {
      ft.hasShapeRange = true;
      for (const pb::SizeRange &r : a.shaperange().sizeranges())
        ft.shapeRange.emplace_back(r.lowerbound(), r.upperbound());
    }
    switch (a.defaultOptionalValue_case()) {
    case pb::ArrayFeatureType::kIntDefaultValue:
      ft.intDefaultValue = a.intdefaultvalue();
      break;
    case pb::ArrayFeatureType::kFloatDefaultValue:
      ft.floatDefaultValue = a.floatdefaultvalue();
      break;
    case pb::ArrayFeatureType::kDoubleDefaultValue:
      ft.doubleDefaultValue = a.doubledefaultvalue();
      break;
    default:
      break;
    }
  };
  switch (p.Type_case()) {
  case pb::FeatureType::kInt64Type:
    ft.kind = FeatureType::Kind::Int64;
    break;
  case pb::FeatureType::kDoubleType:
    ft.kind = FeatureType::Kind::Double;
    break;
  case pb::FeatureType::kStringType:
    ft.kind = FeatureType::Kind::String;
    break;
  case pb::FeatureType::kMultiArrayType:
    ft.kind = FeatureType::Kind::MultiArray;
    readArray(p.multiarraytype());
    break;
  case pb::FeatureType::kStateType:
    if (p.statetype().has_arraytype()) {
      ft.kind = FeatureType::Kind::State;
      readArray(p.statetype().arraytype());
      break;
    }
    [[fallthrough]];
  default:
    // Image, dictionary, sequence, or nothing: carried through unchanged.
    ft.kind = FeatureType::Kind::Other;
    p.SerializeToString(&ft.rawProto);
    break;
  }
  return ft;
}

FeatureDescription ProtoReader::readFeature(const pb::FeatureDescription &p) {
  return FeatureDescription{p.name(), p.shortdescription(), readFeatureType(p.type())};
}

std::vector<FeatureDescription>
ProtoReader::readFeatures(const google::protobuf::RepeatedPtrField<pb::FeatureDescription> &ps) {
  std::vector<FeatureDescription> out;
  out.reserve(ps.size());
  for (const pb::FeatureDescription &p : ps)
    out.push_back(readFeature(p));
  return out;
}

void ProtoReader::readDescription(const pb::ModelDescription &pd, ModelDescription &d) {
  d.inputs = readFeatures(pd.input());
  d.outputs = readFeatures(pd.output());
  d.states = readFeatures(pd.state());
  d.predictedFeatureName = pd.predictedfeaturename();
  d.predictedProbabilitiesName = pd.predictedprobabilitiesname();
  d.trainingInputs = readFeatures(pd.traininginput());
  for (const pb::FunctionDescription &pf : pd.functions()) {
    FunctionDescription f;
    f.name = pf.name();
    f.inputs = readFeatures(pf.input());
    f.outputs = readFeatures(pf.output());
    f.states = readFeatures(pf.state());
    f.predictedFeatureName = pf.predictedfeaturename();
    f.predictedProbabilitiesName = pf.predictedprobabilitiesname();
    d.functions.push_back(std::move(f));
  }
  d.defaultFunctionName = pd.defaultfunctionname();
  const pb::Metadata &pm = pd.metadata();
  d.metadata.shortDescription = pm.shortdescription();
  d.metadata.versionString = pm.versionstring();
  d.metadata.author = pm.author();
  d.metadata.license = pm.license();
  d.metadata.userDefined.insert(pm.userdefined().begin(), pm.userdefined().end());
}

void ProtoReader::readModel(const pb::Model &pm) {
  model_.specificationVersion = pm.specificationversion();
  model_.isUpdatable = pm.isupdatable();
  readDescription(pm.description(), model_.description);

  const mil::Program &pp = pm.mlprogram();
  auto program = std::make_unique<Program>();
  program->version = pp.version();
  program->docString = pp.docstring();
  program->attributes = readAttributes(pp.attributes(), "program");
  std::vector<const std::string *> names;
  for (const auto &entry : pp.functions())
    names.push_back(&entry.first);
  std::sort(names.begin(), names.end(),
            [](const std::string *a, const std::string *b) { return *a < *b; });
  for (const std::string *name : names)
    readFunction(*name, pp.functions().at(*name), *program);
  model_.program = std::move(program);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

class ProtoWriter {
public:
  explicit ProtoWriter(WeightWriter *weights) : weights_(weights) {}

  void writeModel(const Model &model, pb::Model &pm);

private:
  void writeType(const Type &t, mil::ValueType *vt);
  void writeDim(const Dim &d, mil::Dimension *pd);
  void writeValue(const Constant &c, mil::Value *v, const std::string &place);
  void writeTensorValue(const Constant &c, mil::TensorValue *tv, const std::string &place);
  void writeAttributes(const AttributeMap &attrs,
                       google::protobuf::Map<std::string, mil::Value> *out,
                       const std::string &place);
  void writeBlock(const Block &block, mil::Block *pbk, const std::string &place);
  void writeOperation(const Operation &op, mil::Operation *pop, const std::string &place);
  void writeFeatureType(const FeatureType &ft, pb::FeatureType *p);
  void writeFeatures(const std::vector<FeatureDescription> &fs,
                     google::protobuf::RepeatedPtrField<pb::FeatureDescription> *out);

  WeightWriter *weights_;
  /// Blob constants already appended (a constant shared by several ops is
  /// stored once), with their metadata offsets.
  std::unordered_map<const Constant *, uint64_t> written_;
};

void ProtoWriter::writeDim(const Dim &d, mil::Dimension *pd) {
  switch (d.kind) {
  case Dim::Kind::Static:
    pd->mutable_constant()->set_size(static_cast<uint64_t>(d.size));
    break;
  case Dim::Kind::Variadic:
    pd->mutable_unknown()->set_variadic(true);
    break;
  default:
    // Symbols have no place in the format; they are written as unknown dims.
    pd->mutable_unknown()->set_variadic(false);
    break;
  }
}

void ProtoWriter::writeType(const Type &t, mil::ValueType *vt) {
  switch (t.kind()) {
  case Type::Kind::Tensor: {
    mil::TensorType *tt = vt->mutable_tensortype();
    tt->set_datatype(static_cast<mil::DataType>(dtypeProtoCode(t.dtype())));
    if (!t.hasRank()) {
      tt->set_rank(-1);
      break;
    }
    tt->set_rank(t.rank());
    for (const Dim &d : t.shape())
      writeDim(d, tt->add_dimensions());
    break;
  }
  case Type::Kind::State:
    writeType(t.elementType(), vt->mutable_statetype()->mutable_wrappedtype());
    break;
  case Type::Kind::List:
    writeType(t.elementType(), vt->mutable_listtype()->mutable_type());
    writeDim(t.listLength(), vt->mutable_listtype()->mutable_length());
    break;
  case Type::Kind::Tuple:
    for (const Type &m : t.elements())
      writeType(m, vt->mutable_tupletype()->add_types());
    if (t.elements().empty())
      vt->mutable_tupletype();
    break;
  case Type::Kind::Dict:
    writeType(t.elementType(), vt->mutable_dictionarytype()->mutable_keytype());
    writeType(t.valueType(), vt->mutable_dictionarytype()->mutable_valuetype());
    break;
  }
}

void ProtoWriter::writeTensorValue(const Constant &c, mil::TensorValue *tv,
                                   const std::string &place) {
  DType dtype = c.type.dtype();
  int field = c.protoEncoding != kNoField && tensorFieldFits(dtype, c.protoEncoding)
                  ? c.protoEncoding
                  : static_cast<int>(naturalTensorField(dtype));
  if (field == kStrings) {
    auto *out = tv->mutable_strings()->mutable_values();
    out->Reserve(static_cast<int>(c.strings.size()));
    for (const std::string &s : c.strings)
      *out->Add() = s;
    return;
  }
  if (field == kBytes) {
    tv->mutable_bytes()->set_values(c.bytes.data(), c.bytes.size());
    return;
  }
  uint64_t n = c.numElements();
  int bits = dtypeBits(dtype);
  if (!staticCount(c.type) && bits >= 8)
    n = c.bytes.size() * 8 / static_cast<uint64_t>(bits);
  if (storageBytes(dtype, n) > c.bytes.size())
    throw InputError::at("", place,
                         "constant of type " + c.type.str() + " holds only " +
                             std::to_string(c.bytes.size()) + " bytes");
  auto intAt = [&](uint64_t i) -> int64_t {
    if (dtype == DType::U64 || dtype == DType::I64) {
      int64_t v;
      std::memcpy(&v, &c.bytes[i * 8], sizeof v);
      return v;
    }
    return c.elementAsInt(i);
  };
  switch (field) {
  case kFloats: {
    auto *out = tv->mutable_floats()->mutable_values();
    out->Reserve(static_cast<int>(n));
    for (uint64_t i = 0; i < n; ++i)
      out->Add(static_cast<float>(c.elementAsDouble(i)));
    break;
  }
  case kDoubles: {
    auto *out = tv->mutable_doubles()->mutable_values();
    out->Reserve(static_cast<int>(n));
    for (uint64_t i = 0; i < n; ++i)
      out->Add(c.elementAsDouble(i));
    break;
  }
  case kInts: {
    auto *out = tv->mutable_ints()->mutable_values();
    out->Reserve(static_cast<int>(n));
    for (uint64_t i = 0; i < n; ++i)
      out->Add(static_cast<int32_t>(intAt(i)));
    break;
  }
  case kLongInts: {
    auto *out = tv->mutable_longints()->mutable_values();
    out->Reserve(static_cast<int>(n));
    for (uint64_t i = 0; i < n; ++i)
      out->Add(intAt(i));
    break;
  }
  case kBools: {
    auto *out = tv->mutable_bools()->mutable_values();
    out->Reserve(static_cast<int>(n));
    for (uint64_t i = 0; i < n; ++i)
      out->Add(intAt(i) != 0);
    break;
  }
  default:
    break;
  }
}

void ProtoWriter::writeValue(const Constant &c, mil::Value *v, const std::string &place) {
  if (!c.docString.empty())
    v->set_docstring(c.docString);
  switch (c.kind) {
  case Constant::Kind::Tensor:
    writeType(c.type, v->mutable_type());
    writeTensorValue(c, v->mutable_immediatevalue()->mutable_tensor(), place);
    break;
  case Constant::Kind::Blob: {
    if (!weights_)
      throw InputError::at("", place,
                           "ML Programs with weights must be saved as .mlpackage (this model "
                           "has weight-file constants)");
    uint64_t offset;
    auto it = written_.find(&c);
    if (it != written_.end()) {
      offset = it->second;
    } else {
      DType dtype = c.type.dtype();
      std::span<const uint8_t> data = c.data();
      uint64_t padding = 0;
      if (isSubByte(dtype)) {
        uint64_t usedBits = c.numElements() * static_cast<uint64_t>(dtypeBits(dtype));
        if (data.size() * 8 >= usedBits)
          padding = (data.size() * 8 - usedBits) % 8;
      }
      offset = weights_->append(dtype, data, padding);
      written_.emplace(&c, offset);
    }
    writeType(c.type, v->mutable_type());
    mil::Value::BlobFileValue *bf = v->mutable_blobfilevalue();
    bf->set_filename(kDefaultWeightFileName);
    bf->set_offset(offset);
    break;
  }
  case Constant::Kind::Tuple: {
    if (c.type.kind() == Type::Kind::Tuple) {
      writeType(c.type, v->mutable_type());
    } else {
      std::vector<Type> members;
      for (const Constant &m : c.elements)
        members.push_back(m.type);
      writeType(Type::tuple(std::move(members)), v->mutable_type());
    }
    mil::TupleValue *tv = v->mutable_immediatevalue()->mutable_tuple();
    for (const Constant &m : c.elements)
      writeValue(m, tv->add_values(), place);
    break;
  }
  case Constant::Kind::List: {
    writeType(c.type, v->mutable_type());
    mil::ListValue *lv = v->mutable_immediatevalue()->mutable_list();
    for (const Constant &m : c.elements)
      writeValue(m, lv->add_values(), place);
    break;
  }
  case Constant::Kind::Dict: {
    writeType(c.type, v->mutable_type());
    mil::DictionaryValue *dv = v->mutable_immediatevalue()->mutable_dictionary();
    for (size_t i = 0; i + 1 < c.elements.size(); i += 2) {
      mil::DictionaryValue::KeyValuePair *kv = dv->add_values();
      writeValue(c.elements[i], kv->mutable_key(), place);
      writeValue(c.elements[i + 1], kv->mutable_value(), place);
    }
    break;
  }
  }
}

void ProtoWriter::writeAttributes(const AttributeMap &attrs,
                                  google::protobuf::Map<std::string, mil::Value> *out,
                                  const std::string &place) {
  for (const auto &[key, value] : attrs)
    if (value)
      writeValue(*value, &(*out)[key], place + ": attribute " + quoted(key));
}

void ProtoWriter::writeOperation(const Operation &op, mil::Operation *pop,
                                 const std::string &blockPlace) {
  std::string place = blockPlace + ": op " + quoted(op.name);
  pop->set_type(op.type);

  std::vector<const OpInput *> inputs;
  for (const OpInput &in : op.inputs)
    inputs.push_back(&in);
  std::sort(inputs.begin(), inputs.end(),
            [](const OpInput *a, const OpInput *b) { return a->name < b->name; });
  for (const OpInput *in : inputs) {
    mil::Argument &arg = (*pop->mutable_inputs())[in->name];
    for (const Binding &b : in->bindings) {
      mil::Argument::Binding *pb = arg.add_arguments();
      if (b.value)
        pb->set_name(b.value->name);
      else if (b.constant)
        writeValue(*b.constant, pb->mutable_value(), place + ": input " + quoted(in->name));
      else
        throw InputError::at("", place + ": input " + quoted(in->name),
                             "binding holds neither a value nor a constant");
    }
  }
  for (const auto &out : op.outputs) {
    mil::NamedValueType *nvt = pop->add_outputs();
    nvt->set_name(out->name);
    writeType(out->type, nvt->mutable_type());
  }
  for (const auto &nested : op.blocks)
    writeBlock(*nested, pop->add_blocks(), place + ": block");

  AttributeMap attrs = op.attributes;
  attrs["name"] = std::make_shared<const Constant>(Constant::scalarString(op.name));
  writeAttributes(attrs, pop->mutable_attributes(), place);
}

void ProtoWriter::writeBlock(const Block &block, mil::Block *pbk, const std::string &place) {
  for (const auto &in : block.inputs) {
    mil::NamedValueType *nvt = pbk->add_inputs();
    nvt->set_name(in->name);
    writeType(in->type, nvt->mutable_type());
  }
  for (const auto &op : block.ops)
    writeOperation(*op, pbk->add_operations(), place);
  for (const Value *v : block.outputs)
    pbk->add_outputs(v->name);
  writeAttributes(block.attributes, pbk->mutable_attributes(), place);
}

void ProtoWriter::writeFeatureType(const FeatureType &ft, pb::FeatureType *p) {
  auto writeArray = [&](pb::ArrayFeatureType *a) {
    for (int64_t d : ft.shape)
      a->add_shape(d);
    a->set_datatype(static_cast<pb::ArrayFeatureType::ArrayDataType>(ft.dataType));
    if (!ft.enumeratedShapes.empty()) {
      auto *es = a->mutable_enumeratedshapes();
      for (const auto &s : ft.enumeratedShapes)
        es->add_shapes()->mutable_shape()->Add(s.begin(), s.end());
    } else if (ft.hasShapeRange) {
      auto *sr = a->mutable_shaperange();
      for (const auto &[lower, upper] : ft.shapeRange) {
        pb::SizeRange *r = sr->add_sizeranges();
        r->set_lowerbound(lower);
        r->set_upperbound(upper);
      }
    }
    if (ft.intDefaultValue)
      a->set_intdefaultvalue(*ft.intDefaultValue);
    else if (ft.floatDefaultValue)
      a->set_floatdefaultvalue(*ft.floatDefaultValue);
    else if (ft.doubleDefaultValue)
      a->set_doubledefaultvalue(*ft.doubleDefaultValue);
  };
  switch (ft.kind) {
  case FeatureType::Kind::MultiArray:
    writeArray(p->mutable_multiarraytype());
    break;
  case FeatureType::Kind::State:
    writeArray(p->mutable_statetype()->mutable_arraytype());
    break;
  case FeatureType::Kind::Int64:
    p->mutable_int64type();
    break;
  case FeatureType::Kind::Double:
    p->mutable_doubletype();
    break;
  case FeatureType::Kind::String:
    p->mutable_stringtype();
    break;
  case FeatureType::Kind::Other:
    if (!p->ParseFromString(ft.rawProto))
      throw InputError("feature type kept from the source model is not a valid FeatureType");
    break;
  }
  p->set_isoptional(ft.isOptional);
}

void ProtoWriter::writeFeatures(const std::vector<FeatureDescription> &fs,
                                google::protobuf::RepeatedPtrField<pb::FeatureDescription> *out) {
  for (const FeatureDescription &f : fs) {
    pb::FeatureDescription *p = out->Add();
    p->set_name(f.name);
    p->set_shortdescription(f.shortDescription);
    writeFeatureType(f.type, p->mutable_type());
  }
}

void ProtoWriter::writeModel(const Model &model, pb::Model &pm) {
  if (!model.program)
    throw InputError::at(model.sourcePath, "", "model has no ML Program to write");
  pm.set_specificationversion(model.specificationVersion);
  pm.set_isupdatable(model.isUpdatable);

  const ModelDescription &d = model.description;
  pb::ModelDescription *pd = pm.mutable_description();
  writeFeatures(d.inputs, pd->mutable_input());
  writeFeatures(d.outputs, pd->mutable_output());
  writeFeatures(d.states, pd->mutable_state());
  pd->set_predictedfeaturename(d.predictedFeatureName);
  pd->set_predictedprobabilitiesname(d.predictedProbabilitiesName);
  writeFeatures(d.trainingInputs, pd->mutable_traininginput());
  for (const FunctionDescription &f : d.functions) {
    pb::FunctionDescription *pf = pd->add_functions();
    pf->set_name(f.name);
    writeFeatures(f.inputs, pf->mutable_input());
    writeFeatures(f.outputs, pf->mutable_output());
    writeFeatures(f.states, pf->mutable_state());
    pf->set_predictedfeaturename(f.predictedFeatureName);
    pf->set_predictedprobabilitiesname(f.predictedProbabilitiesName);
  }
  pd->set_defaultfunctionname(d.defaultFunctionName);
  const Metadata &md = d.metadata;
  bool hasMetadata = !md.shortDescription.empty() || !md.versionString.empty() ||
                     !md.author.empty() || !md.license.empty() || !md.userDefined.empty();
  if (hasMetadata) {
    pb::Metadata *pmd = pd->mutable_metadata();
    pmd->set_shortdescription(md.shortDescription);
    pmd->set_versionstring(md.versionString);
    pmd->set_author(md.author);
    pmd->set_license(md.license);
    pmd->mutable_userdefined()->insert(md.userDefined.begin(), md.userDefined.end());
  }

  const Program &program = *model.program;
  mil::Program *pp = pm.mutable_mlprogram();
  pp->set_version(program.version);
  pp->set_docstring(program.docString);
  writeAttributes(program.attributes, pp->mutable_attributes(), "program");

  // Functions in name order so blobs are appended in a stable order.
  std::vector<const Function *> functions;
  for (const auto &f : program.functions)
    functions.push_back(f.get());
  std::sort(functions.begin(), functions.end(),
            [](const Function *a, const Function *b) { return a->name < b->name; });
  for (const Function *f : functions) {
    std::string place = "function " + quoted(f->name);
    if (f->opset.empty())
      throw InputError::at(model.sourcePath, place, "function has no opset (e.g. \"CoreML8\")");
    if (pp->functions().count(f->name))
      throw InputError::at(model.sourcePath, place, "two functions have the same name");
    mil::Function &pf = (*pp->mutable_functions())[f->name];
    for (const auto &in : f->inputs) {
      mil::NamedValueType *nvt = pf.add_inputs();
      nvt->set_name(in->name);
      writeType(in->type, nvt->mutable_type());
    }
    pf.set_opset(f->opset);
    writeAttributes(f->attributes, pf.mutable_attributes(), place);
    writeBlock(*f->body, &(*pf.mutable_block_specializations())[f->opset], place);
    for (const auto &[key, block] : f->otherSpecializations)
      if (key != f->opset && block)
        writeBlock(*block, &(*pf.mutable_block_specializations())[key],
                   place + ": specialization " + quoted(key));
  }
}

} // namespace

std::unique_ptr<Model> parseModelProto(std::span<const uint8_t> bytes, const std::string &fileName,
                                       const WeightOpener &openWeights) {
  if (bytes.empty())
    throw InputError::at(fileName, "", "not a valid Core ML model protobuf (the file is empty)");
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    throw InputError::at(fileName, "",
                         "not a valid Core ML model protobuf (larger than 2 GiB, found " +
                             std::to_string(bytes.size()) + " bytes)");
  // The parsed message is thrown away as soon as the IR is built: an arena
  // makes that one free instead of one per field.
  google::protobuf::Arena arena;
  pb::Model &pm = *google::protobuf::Arena::CreateMessage<pb::Model>(&arena);
  bool parsed;
  {
#ifdef ANEFIT_PROTOBUF_HAS_LOG_SILENCER
    // The problem is reported once, as an InputError; protobuf would also log
    // it to stderr (e.g. a name that is not UTF-8).
    google::protobuf::LogSilencer quiet;
#endif
    parsed = pm.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  }
  if (!parsed)
    throw InputError::at(fileName, "",
                         "not a valid Core ML model protobuf (truncated or corrupt wire data, or "
                         "text that is not UTF-8, in " +
                             std::to_string(bytes.size()) + " bytes)");

  // Other model kinds are not in our schema, so they show up as unknown fields.
  // They are top-level fields of the message: walk its tags.
  google::protobuf::io::CodedInputStream fields(bytes.data(), static_cast<int>(bytes.size()));
  while (uint32_t tag = fields.ReadTag()) {
    using google::protobuf::internal::WireFormatLite;
    const OtherModelKind *kind = findOtherModelKind(WireFormatLite::GetTagFieldNumber(tag));
    if (!kind) {
      if (!WireFormatLite::SkipField(&fields, tag))
        break;
      continue;
    }
    std::string message = std::string("this is a ") + kind->name + " model (field " +
                          std::to_string(kind->field) + "); anefit reads ML Program models only";
    if (kind->convertible)
      message += " - convert with coremltools convert_to='mlprogram'";
    throw InputError::at(fileName, "", message);
  }
  if (!pm.has_mlprogram())
    throw InputError::at(fileName, "",
                         "expected an ML Program model (Model field 502), found a Model "
                         "without mlProgram");

  auto model = std::make_unique<Model>();
  model->sourcePath = fileName;
  ProtoReader reader(fileName, openWeights, *model);
  reader.readModel(pm);
  return model;
}

std::string serializeModelProto(const Model &model, WeightWriter *weights) {
  google::protobuf::Arena arena;
  pb::Model &pm = *google::protobuf::Arena::CreateMessage<pb::Model>(&arena);
  ProtoWriter writer(weights);
  writer.writeModel(model, pm);

  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    // Map entries sorted by key: equal models give equal bytes.
    coded.SetSerializationDeterministic(true);
    if (!pm.SerializeToCodedStream(&coded))
      throw InputError::at(model.sourcePath, "", "cannot serialize the model protobuf");
  }
  return out;
}

} // namespace anefit
