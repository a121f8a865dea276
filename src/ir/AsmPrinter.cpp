//===- AsmPrinter.cpp - MIL text printer ----------------------------------===//
//
// Prints programs in the grammar of coremltools' `print(prog)`, plus the parts
// coremltools leaves out (const ops, blob references, attributes, exact
// literals with type suffixes, the model header) so that AsmParser.cpp reads
// back exactly the IR that was printed. docs/mil-text.md is the grammar.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmPrinter.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

namespace anefit {
namespace {

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isIdentChar(char c) { return isIdentStart(c) || (c >= '0' && c <= '9') || c == '@'; }
/// Characters allowed in a bare `%name` (torch-style names like "input.1").
bool isValueNameChar(char c) { return isIdentChar(c) || c == '.'; }

std::string quote(std::string_view s) {
  static const char *hex = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      // Control bytes would break the one-line-per-op layout; UTF-8 passes through.
      if (c < 0x20 || c == 0x7f) {
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += ch;
      }
    }
  }
  return out + "\"";
}

/// A bare identifier if `s` is one, else a quoted string.
std::string identOrQuoted(std::string_view s) {
  bool bare = !s.empty() && isIdentStart(s[0]);
  for (char c : s)
    bare = bare && isIdentChar(c);
  return bare ? std::string(s) : quote(s);
}

std::string valueRef(std::string_view name) {
  bool bare = !name.empty();
  for (char c : name)
    bare = bare && isValueNameChar(c);
  return "%" + (bare ? std::string(name) : quote(name));
}

std::string dimText(const Dim &d) {
  switch (d.kind) {
  case Dim::Kind::Static:
    return std::to_string(d.size);
  case Dim::Kind::Symbolic:
    return identOrQuoted(d.symbol);
  case Dim::Kind::Unknown:
    return "?";
  case Dim::Kind::Variadic:
    return "*" + (d.symbol.empty() ? std::string() : identOrQuoted(d.symbol));
  }
  return "?";
}

/// "(1, 3, fp32)", "(3,fp32)", "(fp32)" as Python prints a shape tuple, and
/// "(..., fp32)" for a tensor of unknown rank.
std::string shapeText(const Type &t) {
  std::string dtype(dtypeName(t.dtype()));
  if (!t.hasRank())
    return "(..., " + dtype + ")";
  const std::vector<Dim> &shape = t.shape();
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + dimText(shape[i]);
  if (shape.size() == 1)
    s += ",";
  else if (shape.size() > 1)
    s += ", ";
  return s + dtype + ")";
}

std::string formatFloat(float v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
std::string formatDouble(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// Python-repr-like text of a finite float: always has '.', 'e', "inf" or
/// "nan" so the parser infers a float type from it.
std::string floatLiteral(std::string text) {
  if (text == "inf" || text == "-inf" || text == "nan")
    return text;
  if (text.find_first_of(".e") == std::string::npos)
    text += ".0";
  return text;
}

template <typename T> T loadLE(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// Text of element i of an immediate tensor, or nullopt when decimal text
/// would not parse back to the same bits (NaN payloads, fp8, odd bool bytes).
std::optional<std::string> elementText(DType t, std::span<const uint8_t> d, uint64_t i) {
  if (isSubByte(t)) {
    uint32_t v = loadPackedBits(d, i, dtypeBits(t));
    if (t == DType::I4 && v >= 8)
      return std::to_string(static_cast<int>(v) - 16);
    return std::to_string(v);
  }
  switch (t) {
  case DType::Bool:
    if (d[i] > 1)
      return std::nullopt;
    return std::string(d[i] ? "True" : "False");
  case DType::I8:
    return std::to_string(static_cast<int8_t>(d[i]));
  case DType::U8:
    return std::to_string(d[i]);
  case DType::I16:
    return std::to_string(loadLE<int16_t>(&d[i * 2]));
  case DType::U16:
    return std::to_string(loadLE<uint16_t>(&d[i * 2]));
  case DType::I32:
    return std::to_string(loadLE<int32_t>(&d[i * 4]));
  case DType::U32:
    return std::to_string(loadLE<uint32_t>(&d[i * 4]));
  case DType::I64:
    return std::to_string(loadLE<int64_t>(&d[i * 8]));
  case DType::U64:
    return std::to_string(loadLE<uint64_t>(&d[i * 8]));
  case DType::F16:
  case DType::BF16: {
    uint16_t bits = loadLE<uint16_t>(&d[i * 2]);
    float f = t == DType::F16 ? halfToFloat(bits) : bf16ToFloat(bits);
    if (std::isnan(f)) {
      float q = std::numeric_limits<float>::quiet_NaN();
      uint16_t canonical = t == DType::F16 ? floatToHalf(q) : floatToBf16(q);
      return bits == canonical ? std::optional<std::string>("nan") : std::nullopt;
    }
    return floatLiteral(formatFloat(f));
  }
  case DType::F32: {
    float f = loadLE<float>(&d[i * 4]);
    if (std::isnan(f)) {
      float q = std::numeric_limits<float>::quiet_NaN();
      return std::memcmp(&f, &q, 4) == 0 ? std::optional<std::string>("nan") : std::nullopt;
    }
    return floatLiteral(formatFloat(f));
  }
  case DType::F64: {
    double f = loadLE<double>(&d[i * 8]);
    if (std::isnan(f)) {
      double q = std::numeric_limits<double>::quiet_NaN();
      return std::memcmp(&f, &q, 8) == 0 ? std::optional<std::string>("nan") : std::nullopt;
    }
    return floatLiteral(formatDouble(f));
  }
  default:
    return std::nullopt;
  }
}

/// The dtype the parser gives a literal without elements, such as "[]".
constexpr DType kEmptyLiteralDType = DType::I32;

/// The dtype the parser gives an unsuffixed literal of this kind.
DType defaultDType(DType t) {
  switch (dtypeKind(t)) {
  case DTypeKind::Bool:
    return DType::Bool;
  case DTypeKind::String:
    return DType::String;
  case DTypeKind::Float:
    return DType::F32;
  default:
    return DType::I32;
  }
}

/// Prints nested lists following `shape`, one level per dimension.
void printNested(std::string &out, const std::vector<int64_t> &shape, size_t level,
                 const std::vector<std::string> &leaves, uint64_t &next) {
  if (level == shape.size()) {
    out += leaves[next++];
    return;
  }
  out += "[";
  for (int64_t i = 0; i < shape[level]; ++i) {
    if (i)
      out += ", ";
    printNested(out, shape, level + 1, leaves, next);
  }
  out += "]";
}

/// The shape nested lists give: dims up to and including the first zero.
std::vector<Dim> nestedShape(const std::vector<int64_t> &shape) {
  std::vector<Dim> dims;
  for (int64_t d : shape) {
    dims.push_back(Dim::of(d));
    if (d == 0)
      break;
  }
  return dims;
}

/// Bytes per line of a long HEX constant: the parser reads lines of at most
/// 64 MiB; a constant of any size prints as several strings, one per line.
constexpr size_t kHexBytesPerLine = size_t(1) << 19;
/// Tensors with more values than this print as HEX: every value of a list
/// literal costs the parser far more memory than its text.
constexpr uint64_t kMaxPrintedLiteralValues = 4096;

std::string hexBytes(std::span<const uint8_t> bytes) {
  static const char *hex = "0123456789abcdef";
  std::string s = "HEX(\"";
  s.reserve(bytes.size() * 2 + bytes.size() / kHexBytesPerLine * 8 + 8);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i && i % kHexBytesPerLine == 0)
      s += "\"\n    \"";
    s += hex[bytes[i] >> 4];
    s += hex[bytes[i] & 15];
  }
  return s + "\")";
}

/// The TensorValue field coremltools writes for a dtype (formats.md §3):
/// 1 floats, 2 ints, 3 bools, 4 strings, 5 longInts, 6 doubles, 7 bytes. An
/// encoding equal to it is not printed: for writers it means the same as 0.
uint8_t usualEncoding(DType t) {
  switch (t) {
  case DType::F32:
    return 1;
  case DType::I32:
  case DType::I16:
  case DType::U16:
    return 2;
  case DType::Bool:
    return 3;
  case DType::String:
    return 4;
  case DType::I64:
  case DType::U64:
    return 5;
  case DType::F64:
    return 6;
  default:
    return 7;
  }
}

/// Text of a constant. `inferred` receives the type the parser would give
/// the text without a suffix (nullopt: the text needs one).
std::string constantBody(const Constant &c, std::optional<Type> &inferred);

/// Adds the type suffix (when the literal does not imply the type and the
/// context does not give it) and the encoding/doc-string suffix.
std::string constantText(const Constant &c, const Type *context) {
  std::optional<Type> inferred;
  std::string s = constantBody(c, inferred);
  // With a context the parser reads an unsuffixed literal as the context's
  // type, so the suffix is needed exactly when the two differ.
  bool needType = context ? !(*context == c.type) : !(inferred && *inferred == c.type);
  if (needType) {
    // Short form ":int64" when only the dtype differs from the literal's.
    if (inferred && inferred->isTensor() && c.type.isTensor() && c.type.hasRank() &&
        inferred->shape() == c.type.shape())
      s += ":" + std::string(dtypeName(c.type.dtype()));
    else if (c.type.isTensor())
      s += ":" + shapeText(c.type);
    else
      s += ":" + typeToText(c.type);
  }
  bool printEnc =
      c.protoEncoding != 0 && c.isTensorLike() && c.protoEncoding != usualEncoding(c.type.dtype());
  if (printEnc || !c.docString.empty()) {
    s += "{";
    if (printEnc)
      s += "enc=" + std::to_string(c.protoEncoding);
    if (!c.docString.empty())
      s += std::string(printEnc ? ", " : "") + "doc=" + quote(c.docString);
    s += "}";
  }
  return s;
}

std::string tensorBody(const Constant &c, std::optional<Type> &inferred) {
  const Type &t = c.type;
  DType dt = t.dtype();
  auto shape = t.isTensor() ? t.staticShape() : std::nullopt;
  if (dt == DType::String) {
    std::vector<std::string> leaves;
    for (const std::string &s : c.strings)
      leaves.push_back(quote(s));
    // A string tensor whose shape does not match its strings prints flat.
    if (!shape || static_cast<uint64_t>(*t.numElements()) != leaves.size())
      shape = std::vector<int64_t>{static_cast<int64_t>(leaves.size())};
    else
      inferred =
          Type::tensor(leaves.empty() ? kEmptyLiteralDType : DType::String, nestedShape(*shape));
    std::string out;
    uint64_t next = 0;
    printNested(out, *shape, 0, leaves, next);
    return out;
  }
  if (!shape || c.bytes.size() != storageBytes(dt, *t.numElements()))
    return hexBytes(c.bytes);
  uint64_t n = static_cast<uint64_t>(*t.numElements());
  if (n > kMaxPrintedLiteralValues)
    return hexBytes(c.bytes);
  if (isSubByte(dt)) {
    // Padding bits of the last byte must be zero to print as numbers.
    uint64_t used = n * static_cast<uint64_t>(dtypeBits(dt));
    if (used % 8 && (c.bytes.back() >> (used % 8)) != 0)
      return hexBytes(c.bytes);
  }
  std::vector<std::string> leaves;
  leaves.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    std::optional<std::string> e = elementText(dt, c.bytes, i);
    if (!e)
      return hexBytes(c.bytes);
    leaves.push_back(std::move(*e));
  }
  inferred = Type::tensor(n == 0 ? kEmptyLiteralDType : defaultDType(dt), nestedShape(*shape));
  std::string out;
  uint64_t next = 0;
  printNested(out, *shape, 0, leaves, next);
  return out;
}

std::string constantBody(const Constant &c, std::optional<Type> &inferred) {
  switch (c.kind) {
  case Constant::Kind::Tensor:
    return tensorBody(c, inferred);
  case Constant::Kind::Blob:
    return "BLOBFILE(path=" + quote(c.blob.fileName) + ", offset=" + std::to_string(c.blob.offset) +
           ")";
  case Constant::Kind::Tuple: {
    std::string s = "TUPLE(";
    std::vector<Type> types;
    for (size_t i = 0; i < c.elements.size(); ++i) {
      s += (i ? ", " : "") + constantText(c.elements[i], nullptr);
      types.push_back(c.elements[i].type);
    }
    inferred = Type::tuple(std::move(types));
    return s + ")";
  }
  case Constant::Kind::List: {
    std::string s = "LIST(";
    for (size_t i = 0; i < c.elements.size(); ++i)
      s += (i ? ", " : "") + constantText(c.elements[i], nullptr);
    if (!c.elements.empty())
      inferred = Type::list(c.elements[0].type, Dim::of(static_cast<int64_t>(c.elements.size())));
    return s + ")";
  }
  case Constant::Kind::Dict: {
    std::string s = "DICT(";
    for (size_t i = 0; i + 1 < c.elements.size(); i += 2)
      s += (i ? ", " : "") + constantText(c.elements[i], nullptr) + ": " +
           constantText(c.elements[i + 1], nullptr);
    if (c.elements.size() % 2 != 0)
      s +=
          std::string(c.elements.size() > 1 ? ", " : "") + constantText(c.elements.back(), nullptr);
    if (c.elements.size() >= 2)
      inferred = Type::dict(c.elements[0].type, c.elements[1].type);
    return s + ")";
  }
  }
  return "";
}

std::string attributesText(const AttributeMap &attrs, const char *skip1 = nullptr) {
  std::string s;
  for (const auto &[key, value] : attrs) {
    if (skip1 && key == skip1)
      continue;
    s += (s.empty() ? "[" : ", ") + identOrQuoted(key) + "=" +
         (value ? constantText(*value, nullptr) : std::string("None"));
  }
  return s.empty() ? s : s + "]";
}

class Printer {
public:
  Printer(std::ostream &os, const PrintOptions &options) : os(os), options(options) {}

  void printProgram(const Program &p) {
    if (p.version != 1 || !p.docString.empty() || !p.attributes.empty()) {
      os << "program(version=" << p.version;
      if (!p.docString.empty())
        os << ", doc=" << quote(p.docString);
      os << ")" << attributesText(p.attributes) << "\n\n";
    }
    for (size_t i = 0; i < p.functions.size(); ++i) {
      if (i)
        os << "\n";
      printFunction(*p.functions[i]);
    }
  }

private:
  std::ostream &os;
  const PrintOptions &options;
  int blockCounter = 0;

  void printFunction(const Function &f) {
    std::string head = identOrQuoted(f.name) + "[" + f.opset + "]";
    os << head << "(";
    std::string align(head.size() + 1, ' ');
    for (size_t i = 0; i < f.inputs.size(); ++i) {
      if (i)
        os << ",\n" << align;
      os << valueRef(f.inputs[i]->name) << ": " << typeToText(f.inputs[i]->type);
    }
    os << ")" << attributesText(f.attributes) << " {\n";
    printBlock(*f.body, "block" + std::to_string(blockCounter++), "", 2);
    for (const auto &[key, block] : f.otherSpecializations)
      printBlock(*block, "block" + std::to_string(blockCounter++), key, 2);
    os << "}\n";
  }

  void printBlock(const Block &b, const std::string &name, const std::string &key, int indent) {
    std::string pad(indent, ' ');
    os << pad << identOrQuoted(name);
    if (!key.empty())
      os << "[" << identOrQuoted(key) << "]";
    os << "(";
    for (size_t i = 0; i < b.inputs.size(); ++i)
      os << (i ? ", " : "") << valueRef(b.inputs[i]->name) << ": " << typeToText(b.inputs[i]->type);
    os << ")" << attributesText(b.attributes) << " {\n";
    for (const auto &op : b.ops)
      printOp(*op, indent + 2);
    os << pad << "} -> (";
    for (size_t i = 0; i < b.outputs.size(); ++i)
      os << (i ? ", " : "") << (b.outputs[i] ? valueRef(b.outputs[i]->name) : "%\"\"");
    os << ")\n";
  }

  /// Nested block names follow coremltools: <op>_true/_false for cond,
  /// <op>_cond_block/_body_block for while_loop.
  static std::string nestedBlockName(const Operation &op, size_t i) {
    if (op.type == "cond" && op.blocks.size() == 2)
      return op.name + (i == 0 ? "_true" : "_false");
    if (op.type == "while_loop" && op.blocks.size() == 2)
      return op.name + (i == 0 ? "_cond_block" : "_body_block");
    return op.name + "_block" + std::to_string(i);
  }

  std::string bindingText(const Binding &b) const {
    if (b.isValue()) {
      const Operation *def = b.value->definingOp;
      // Without const ops, small constants show at their uses as coremltools does.
      if (!options.printConsts && def && def->type == "const")
        if (const Constant *val = def->attribute("val"))
          if (val->kind == Constant::Kind::Tensor && val->numElements() <= 10)
            return constantText(*val, nullptr);
      return valueRef(b.value->name);
    }
    if (b.constant)
      return constantText(*b.constant, nullptr);
    return "None";
  }

  void printOp(const Operation &op, int indent) {
    bool isConst = op.type == "const";
    if (isConst && !options.printConsts)
      return;
    os << std::string(indent, ' ');
    for (size_t i = 0; i < op.outputs.size(); ++i)
      os << (i ? ", " : "") << valueRef(op.outputs[i]->name) << ": "
         << typeToText(op.outputs[i]->type);
    if (!op.outputs.empty())
      os << " = ";
    os << identOrQuoted(op.type) << "(";
    const char *inlineAttr = nullptr;
    if (isConst) {
      if (const Constant *val = op.attribute("val")) {
        const Type *context = op.outputs.size() == 1 ? &op.outputs[0]->type : nullptr;
        os << "val=" << constantText(*val, context) << ", ";
        inlineAttr = "val";
      }
    }
    for (const OpInput &in : op.inputs) {
      // Bare `name` and const's bare `val` mean the op's attributes, so a
      // parameter with one of these names prints quoted.
      std::string key = identOrQuoted(in.name);
      if (in.name == "name" || (isConst && in.name == "val"))
        key = quote(in.name);
      os << key << "=";
      if (in.bindings.size() == 1) {
        os << bindingText(in.bindings[0]);
      } else {
        os << "(";
        for (size_t i = 0; i < in.bindings.size(); ++i)
          os << (i ? ", " : "") << bindingText(in.bindings[i]);
        os << ")";
      }
      os << ", ";
    }
    os << "name=" << quote(op.name) << ")" << attributesText(op.attributes, inlineAttr) << "\n";
    for (size_t i = 0; i < op.blocks.size(); ++i)
      printBlock(*op.blocks[i], nestedBlockName(op, i), "", indent + 2);
  }
};

//===----------------------------------------------------------------------===//
// Model header
//===----------------------------------------------------------------------===//

using nlohmann::json;

json arrayDataTypeJson(ArrayDataType t) {
  switch (t) {
  case ArrayDataType::Float32:
    return "FLOAT32";
  case ArrayDataType::Double:
    return "DOUBLE";
  case ArrayDataType::Int32:
    return "INT32";
  case ArrayDataType::Int8:
    return "INT8";
  case ArrayDataType::Float16:
    return "FLOAT16";
  case ArrayDataType::Invalid:
    return "INVALID";
  }
  return static_cast<int32_t>(t);
}

std::string hexString(std::string_view bytes) {
  static const char *hex = "0123456789abcdef";
  std::string s;
  for (char ch : bytes) {
    auto b = static_cast<unsigned char>(ch);
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

json featureTypeJson(const FeatureType &t) {
  static const char *kinds[] = {"multiArray", "state", "int64", "double", "string", "other"};
  json j;
  j["kind"] = kinds[static_cast<int>(t.kind)];
  if (!t.shape.empty())
    j["shape"] = t.shape;
  if (t.dataType != ArrayDataType::Invalid)
    j["dataType"] = arrayDataTypeJson(t.dataType);
  if (!t.enumeratedShapes.empty())
    j["enumeratedShapes"] = t.enumeratedShapes;
  if (t.hasShapeRange) {
    json ranges = json::array();
    for (const auto &[lo, hi] : t.shapeRange)
      ranges.push_back(json::array({lo, hi}));
    j["shapeRange"] = ranges;
  }
  if (t.intDefaultValue)
    j["intDefaultValue"] = *t.intDefaultValue;
  if (t.floatDefaultValue)
    j["floatDefaultValue"] = *t.floatDefaultValue;
  if (t.doubleDefaultValue)
    j["doubleDefaultValue"] = *t.doubleDefaultValue;
  if (!t.rawProto.empty())
    j["rawProto"] = hexString(t.rawProto);
  if (t.isOptional)
    j["isOptional"] = true;
  return j;
}

json featuresJson(const std::vector<FeatureDescription> &fs) {
  json a = json::array();
  for (const FeatureDescription &f : fs) {
    json j;
    j["name"] = f.name;
    if (!f.shortDescription.empty())
      j["shortDescription"] = f.shortDescription;
    j["type"] = featureTypeJson(f.type);
    a.push_back(std::move(j));
  }
  return a;
}

void putFeatures(json &j, const char *key, const std::vector<FeatureDescription> &fs) {
  if (!fs.empty())
    j[key] = featuresJson(fs);
}

void putString(json &j, const char *key, const std::string &s) {
  if (!s.empty())
    j[key] = s;
}

json descriptionJson(const ModelDescription &d) {
  json j = json::object();
  putFeatures(j, "input", d.inputs);
  putFeatures(j, "output", d.outputs);
  putFeatures(j, "state", d.states);
  putString(j, "predictedFeatureName", d.predictedFeatureName);
  putString(j, "predictedProbabilitiesName", d.predictedProbabilitiesName);
  putFeatures(j, "trainingInput", d.trainingInputs);
  if (!d.functions.empty()) {
    json fs = json::array();
    for (const FunctionDescription &f : d.functions) {
      json fj;
      fj["name"] = f.name;
      putFeatures(fj, "input", f.inputs);
      putFeatures(fj, "output", f.outputs);
      putFeatures(fj, "state", f.states);
      putString(fj, "predictedFeatureName", f.predictedFeatureName);
      putString(fj, "predictedProbabilitiesName", f.predictedProbabilitiesName);
      fs.push_back(std::move(fj));
    }
    j["functions"] = fs;
  }
  putString(j, "defaultFunctionName", d.defaultFunctionName);
  const Metadata &m = d.metadata;
  json mj = json::object();
  putString(mj, "shortDescription", m.shortDescription);
  putString(mj, "versionString", m.versionString);
  putString(mj, "author", m.author);
  putString(mj, "license", m.license);
  if (!m.userDefined.empty())
    mj["userDefined"] = m.userDefined;
  if (!mj.empty())
    j["metadata"] = mj;
  return j;
}

} // namespace

std::string typeToText(const Type &t) {
  switch (t.kind()) {
  case Type::Kind::Tensor:
    return shapeText(t) + (t.isScalar() ? "(Scalar)" : "(Tensor)");
  case Type::Kind::State:
    if (t.elementType().isTensor())
      return shapeText(t.elementType()) + "(State)";
    return "State[" + typeToText(t.elementType()) + "](State)";
  case Type::Kind::List:
    return "List[" + dimText(t.listLength()) + ", " + typeToText(t.elementType()) + "](List)";
  case Type::Kind::Tuple: {
    std::string s = "Tuple[";
    for (size_t i = 0; i < t.elements().size(); ++i)
      s += (i ? ", " : "") + typeToText(t.elements()[i]);
    return s + "](Tuple)";
  }
  case Type::Kind::Dict:
    return "Dict[" + typeToText(t.elementType()) + ", " + typeToText(t.valueType()) + "](Dict)";
  }
  return "";
}

std::string constantToText(const Constant &constant) { return constantText(constant, nullptr); }

void printProgram(const Program &program, std::ostream &os, const PrintOptions &options) {
  Printer(os, options).printProgram(program);
}

void printModel(const Model &model, std::ostream &os) {
  json header;
  header["specificationVersion"] = model.specificationVersion;
  if (model.isUpdatable)
    header["isUpdatable"] = true;
  header["description"] = descriptionJson(model.description);
  if (!model.compileSpecs.empty())
    header["executorchCompileSpecs"] = model.compileSpecs;
  // Invalid UTF-8 in a name must not abort printing; it is replaced instead.
  os << "// anefit model: " << dumpJson(header, -1) << "\n";
  if (model.program)
    printProgram(*model.program, os);
}

std::string modelToString(const Model &model) {
  std::ostringstream os;
  printModel(model, os);
  return os.str();
}

} // namespace anefit
