//===- AsmParser.cpp - MIL text parser ------------------------------------===//
//
// A hand-written lexer and recursive-descent parser for the MIL text form
// (docs/mil-text.md). Whitespace and line breaks carry no meaning, so both the
// printer's layout and hand-written text parse. Recursion is bounded by
// kMaxDepth (and blocks by kMaxBlockNesting). Memory stays near the size of
// what is built: tokens are made as the parser asks for them and dropped op
// by op, lines are at most kMaxLineBytes and a list literal holds at most
// kMaxLiteralValues values (larger constants are HEX or BLOBFILE).
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"

#include "ir/Verifier.h"
#include "support/Error.h"
#include "support/Json.h"
#include "support/Number.h"
#include "support/Text.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <unordered_map>

namespace anefit {
namespace {

/// Deepest nesting of types, constants or literal lists accepted.
constexpr int kMaxDepth = 64;
/// Longest line accepted. The printer keeps every line far shorter: large
/// constants print as HEX split over lines.
constexpr uint64_t kMaxLineBytes = uint64_t(64) << 20;
/// Most values in one list literal; larger constants are written as HEX or
/// BLOBFILE (each literal value costs the parser far more than its text).
constexpr uint64_t kMaxLiteralValues = uint64_t(1) << 16;

struct Token {
  enum Kind : uint8_t { Eof, Ident, Number, String, ValueRef, Punct };
  Kind kind = Eof;
  std::string text; ///< identifier, number text, unescaped string, value name, or punctuation
  int64_t line = 0;
  int64_t col = 0;
};

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isIdentChar(char c) { return isIdentStart(c) || isDigit(c) || c == '@'; }
bool isValueNameChar(char c) { return isIdentChar(c) || c == '.'; }

std::string errorAt(const std::string &file, int64_t line, int64_t col,
                    const std::string &message) {
  return file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + message;
}

/// Splits the text into tokens, one at a time as the parser asks for them;
/// remembers the `// anefit model:` header line.
class Lexer {
public:
  Lexer(std::string_view text, const std::string &file) : text(text), file(file) {}

  /// The next token; Eof at the end (again on every further call).
  Token next() {
    {
      skipSpaceAndComments();
      Token t;
      t.line = line;
      t.col = col;
      if (pos >= text.size())
        return t;
      char c = text[pos];
      if (c == '%') {
        advance();
        t.kind = Token::ValueRef;
        if (pos < text.size() && text[pos] == '"') {
          t.text = lexString(t);
        } else {
          size_t start = pos;
          while (pos < text.size() && isValueNameChar(text[pos]))
            advance();
          if (start == pos)
            fail(t, "expected a value name after '%'");
          t.text = std::string(text.substr(start, pos - start));
        }
      } else if (c == '"') {
        t.kind = Token::String;
        t.text = lexString(t);
      } else if (isDigit(c) || (c == '-' && pos + 1 < text.size() && isDigit(text[pos + 1]))) {
        t.kind = Token::Number;
        t.text = lexNumber();
      } else if (c == '-' && text.substr(pos, 4) == "-inf") {
        t.kind = Token::Number;
        t.text = "-inf";
        for (int i = 0; i < 4; ++i)
          advance();
      } else if (c == '-' && text.substr(pos, 2) == "->") {
        t.kind = Token::Punct;
        t.text = "->";
        advance();
        advance();
      } else if (c == '.' && text.substr(pos, 3) == "...") {
        t.kind = Token::Punct;
        t.text = "...";
        for (int i = 0; i < 3; ++i)
          advance();
      } else if (isIdentStart(c)) {
        t.kind = Token::Ident;
        size_t start = pos;
        while (pos < text.size() && isIdentChar(text[pos]))
          advance();
        t.text = std::string(text.substr(start, pos - start));
      } else if (std::string_view("()[]{},=:*?^").find(c) != std::string_view::npos) {
        t.kind = Token::Punct;
        t.text = std::string(1, c);
        advance();
      } else {
        std::string shown =
            static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f
                ? "byte " + std::to_string(static_cast<unsigned char>(c))
                : "'" + std::string(1, c) + "'";
        fail(t, "unexpected character " + shown);
      }
      return t;
    }
  }

  std::string headerJson;
  int64_t headerLine = 0;

private:
  std::string_view text;
  const std::string &file;
  size_t pos = 0;
  size_t lineStart = 0;
  int64_t line = 1;
  int64_t col = 1;

  [[noreturn]] void fail(const Token &at, const std::string &message) {
    throw InputError(errorAt(file, at.line, at.col, message));
  }

  void advance() {
    if (text[pos] == '\n') {
      ++line;
      col = 1;
      lineStart = pos + 1;
    } else {
      ++col;
      if (pos - lineStart >= kMaxLineBytes)
        throw InputError(errorAt(file, line, 1,
                                 "line longer than " + std::to_string(kMaxLineBytes) +
                                     " bytes; write large constants as HEX(...) over several "
                                     "lines or as BLOBFILE(...) in a weight file"));
    }
    ++pos;
  }

  void skipSpaceAndComments() {
    while (pos < text.size()) {
      char c = text[pos];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        advance();
      } else if (c == '/' && pos + 1 < text.size() && text[pos + 1] == '/') {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos)
          end = text.size();
        std::string_view body = text.substr(pos + 2, end - pos - 2);
        size_t first = body.find_first_not_of(' ');
        constexpr std::string_view kHeader = "anefit model:";
        if (first != std::string_view::npos && body.substr(first, kHeader.size()) == kHeader) {
          if (headerLine)
            throw InputError(errorAt(file, line, col,
                                     "second '// anefit model:' header; the first is on line " +
                                         std::to_string(headerLine)));
          headerLine = line;
          headerJson = std::string(body.substr(first + kHeader.size()));
        }
        while (pos < end)
          advance();
      } else {
        return;
      }
    }
  }

  std::string lexNumber() {
    size_t start = pos;
    if (text[pos] == '-')
      advance();
    while (pos < text.size() && isDigit(text[pos]))
      advance();
    if (pos < text.size() && text[pos] == '.' && text.substr(pos, 3) != "...") {
      advance();
      while (pos < text.size() && isDigit(text[pos]))
        advance();
    }
    if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
      size_t save = pos;
      int64_t saveCol = col;
      advance();
      if (pos < text.size() && (text[pos] == '+' || text[pos] == '-'))
        advance();
      if (pos < text.size() && isDigit(text[pos])) {
        while (pos < text.size() && isDigit(text[pos]))
          advance();
      } else {
        pos = save;
        col = saveCol;
      }
    }
    return std::string(text.substr(start, pos - start));
  }

  int hexDigit(char c) {
    if (isDigit(c))
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  }

  /// Reads a "..." string starting at the quote; returns it unescaped.
  std::string lexString(const Token &at) {
    advance(); // opening quote
    std::string out;
    while (true) {
      if (pos >= text.size() || text[pos] == '\n')
        fail(at, "unterminated string");
      char c = text[pos];
      if (c == '"') {
        advance();
        // Names and string values are UTF-8 in every Core ML format.
        if (!isUtf8(out))
          fail(at, "expected UTF-8 text in this string, found bytes that are not UTF-8");
        return out;
      }
      if (c != '\\') {
        out += c;
        advance();
        continue;
      }
      Token esc{Token::Punct, "", line, col};
      advance();
      if (pos >= text.size())
        fail(at, "unterminated string");
      char e = text[pos];
      advance();
      switch (e) {
      case '"':
      case '\\':
      case '\'':
        out += e;
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'x': {
        int hi = pos < text.size() ? hexDigit(text[pos]) : -1;
        int lo = pos + 1 < text.size() ? hexDigit(text[pos + 1]) : -1;
        if (hi < 0 || lo < 0)
          fail(esc, "expected two hex digits after '\\x'");
        advance();
        advance();
        out += static_cast<char>(hi * 16 + lo);
        break;
      }
      default:
        fail(esc, std::string("unknown escape '\\") + e + "'");
      }
    }
  }
};

/// A literal before its element type is known: numbers keep their text.
struct Literal {
  enum Kind : uint8_t { Num, Bool, Str, List };
  Kind kind = Num;
  std::string text;
  std::vector<Literal> items;
  const Token *at = nullptr;
};

bool looksFloat(const std::string &num) {
  return num.find_first_of(".eE") != std::string::npos || num == "inf" || num == "-inf" ||
         num == "nan";
}

template <typename T> void storeLE(std::vector<uint8_t> &out, T v) {
  uint8_t buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.insert(out.end(), buf, buf + sizeof(T));
}

using nlohmann::json;

class Parser {
public:
  Parser(Lexer &lexer, const std::string &file, const WeightOpener &openWeights,
         const ParseOptions &options, Model &model)
      : lexer(lexer), file(file), openWeights(openWeights), options(options), model(model) {}

  void parseProgram() {
    model.program = std::make_unique<Program>();
    Program &p = *model.program;
    if (isIdent("program") && isPunct(1, "("))
      parseProgramLine(p);
    while (peek().kind != Token::Eof)
      parseFunction(p);
    if (p.functions.empty())
      fail(peek(),
           "expected a function such as 'main[CoreML8](...) { ... }', found " + describe(peek()));
  }

private:
  Lexer &lexer;
  /// Tokens lexed but not yet dropped; toks[pos] is the current one. A
  /// deque keeps references to tokens valid while more are lexed; tokens
  /// before pos are dropped between ops (compact()), where no one holds them.
  std::deque<Token> toks;
  size_t pos = 0;
  bool lexedEof = false;
  const std::string &file;
  const WeightOpener &openWeights;
  const ParseOptions &options;
  Model &model;
  /// The function being parsed (placeholders for hidden constants go there).
  Function *currentFunction = nullptr;
  std::vector<std::unordered_map<std::string, Value *>> scopes;
  std::map<std::string, std::shared_ptr<const BlobStore>> stores;

  //===--------------------------------------------------------------------===//
  // Token helpers
  //===--------------------------------------------------------------------===//

  const Token &peek(size_t k = 0) {
    while (toks.size() <= pos + k && !lexedEof) {
      toks.push_back(lexer.next());
      lexedEof = toks.back().kind == Token::Eof;
    }
    size_t i = pos + k;
    return i < toks.size() ? toks[i] : toks.back();
  }
  const Token &next() {
    const Token &t = peek();
    if (t.kind != Token::Eof)
      ++pos;
    return t;
  }
  /// Drops the tokens already consumed. Only where no reference to one is
  /// held: before an op or a function.
  void compact() {
    toks.erase(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(pos));
    pos = 0;
  }
  bool isPunct(size_t k, std::string_view p) {
    return peek(k).kind == Token::Punct && peek(k).text == p;
  }
  bool isPunct(std::string_view p) { return isPunct(0, p); }
  bool isIdent(std::string_view s, size_t k = 0) {
    return peek(k).kind == Token::Ident && peek(k).text == s;
  }
  bool consumePunct(std::string_view p) {
    if (!isPunct(p))
      return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const Token &at, const std::string &message) const {
    throw InputError(errorAt(file, at.line, at.col, message));
  }

  static std::string describe(const Token &t) {
    switch (t.kind) {
    case Token::Eof:
      return "end of file";
    case Token::String:
      return "string \"" + t.text.substr(0, 40) + "\"";
    case Token::ValueRef:
      return "'%" + t.text + "'";
    default:
      return "'" + t.text + "'";
    }
  }

  void expectPunct(std::string_view p) {
    if (!consumePunct(p))
      fail(peek(), "expected '" + std::string(p) + "', found " + describe(peek()));
  }

  /// An identifier or a quoted string (names that are not identifiers).
  std::string parseName(const char *what) {
    if (peek().kind != Token::Ident && peek().kind != Token::String)
      fail(peek(), std::string("expected ") + what + ", found " + describe(peek()));
    return next().text;
  }

  void checkDepth(int depth) {
    if (depth > kMaxDepth)
      fail(peek(), "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  }

  //===--------------------------------------------------------------------===//
  // Values and scopes
  //===--------------------------------------------------------------------===//

  Value *lookup(const Token &ref) {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto found = it->find(ref.text);
      if (found != it->end())
        return found->second;
    }
    if (!options.allowUndefinedValues || !currentFunction)
      fail(ref, "undefined value '%" + ref.text + "'");
    return placeholder(ref.text);
  }

  /// coremltools hides const ops and prints large constants as %name; such a
  /// name becomes a const op without a value (and of unknown type) at the
  /// start of the function, so the rest of the program can still be read.
  Value *placeholder(const std::string &name) {
    auto op = std::make_unique<Operation>("const", name);
    Value *v = op->addOutput(name, Type::unranked(DType::F32));
    Block &body = *currentFunction->body;
    op->parent = &body;
    body.ops.insert(body.ops.begin() + static_cast<std::ptrdiff_t>(placeholders++), std::move(op));
    scopes.front()[name] = v;
    return v;
  }
  size_t placeholders = 0;

  void define(Value *v) { scopes.back()[v->name] = v; }

  //===--------------------------------------------------------------------===//
  // Program, functions, blocks
  //===--------------------------------------------------------------------===//

  void parseProgramLine(Program &p) {
    next(); // program
    expectPunct("(");
    while (!isPunct(")")) {
      const Token &key = peek();
      std::string k = parseName("'version' or 'doc'");
      expectPunct("=");
      if (k == "version") {
        const Token &num = peek();
        if (num.kind != Token::Number)
          fail(num, "expected an integer version, found " + describe(num));
        p.version = parseInt64(next());
      } else if (k == "doc") {
        if (peek().kind != Token::String)
          fail(peek(), "expected a string, found " + describe(peek()));
        p.docString = next().text;
      } else {
        fail(key, "expected 'version' or 'doc', found '" + k + "'");
      }
      if (!consumePunct(","))
        break;
    }
    expectPunct(")");
    if (isPunct("["))
      parseAttributes(p.attributes);
  }

  void parseFunction(Program &p) {
    compact();
    const Token &nameTok = peek();
    std::string name = parseName("a function name");
    if (p.findFunction(name))
      fail(nameTok, "function '" + name + "' is defined twice");
    Function *f = p.addFunction(name);
    currentFunction = f;
    placeholders = 0;
    expectPunct("[");
    if (peek().kind == Token::Ident)
      f->opset = next().text;
    expectPunct("]");
    scopes.emplace_back();
    expectPunct("(");
    while (!isPunct(")")) {
      auto [vname, type] = parseDeclaration();
      define(f->addInput(vname, type));
      if (!consumePunct(","))
        break;
    }
    expectPunct(")");
    if (isPunct("["))
      parseAttributes(f->attributes);
    expectPunct("{");
    parseBlock(*f->body, 1, /*allowKey=*/false);
    while (!isPunct("}") && peek().kind != Token::Eof) {
      auto block = std::make_unique<Block>();
      block->parentFunc = f;
      std::string key = parseBlock(*block, 1, /*allowKey=*/true);
      if (key.empty())
        fail(peek(), "a further block of function '" + name +
                         "' needs an opset key, as in "
                         "'block1[CoreML7]() {'");
      f->otherSpecializations[key] = std::move(block);
    }
    expectPunct("}");
    scopes.pop_back();
    currentFunction = nullptr;
  }

  /// `%name: type`
  std::pair<std::string, Type> parseDeclaration() {
    if (peek().kind != Token::ValueRef)
      fail(peek(),
           "expected a value such as '%x: (1, 4, fp16)(Tensor)', found " + describe(peek()));
    std::string name = next().text;
    expectPunct(":");
    return {name, parseType(0)};
  }

  /// `NAME[KEY](inputs)[attrs] { ops } -> (outputs)`; returns KEY.
  std::string parseBlock(Block &block, int depth, bool allowKey) {
    checkDepth(depth);
    // The function body is depth 1; what the writers can write is the limit.
    if (depth - 1 > kMaxBlockNesting)
      fail(peek(), "blocks nested deeper than " + std::to_string(kMaxBlockNesting) + " levels");
    parseName("a block such as 'block0() {'");
    std::string key;
    if (allowKey && consumePunct("[")) {
      key = parseName("an opset key");
      expectPunct("]");
    }
    scopes.emplace_back();
    expectPunct("(");
    while (!isPunct(")")) {
      auto [vname, type] = parseDeclaration();
      define(block.addInput(vname, type));
      if (!consumePunct(","))
        break;
    }
    expectPunct(")");
    if (isPunct("["))
      parseAttributes(block.attributes);
    expectPunct("{");
    while (!isPunct("}")) {
      if (peek().kind == Token::Eof)
        fail(peek(), "expected '}' to close the block, found end of file");
      parseOp(block, depth);
    }
    next();
    expectPunct("->");
    expectPunct("(");
    while (!isPunct(")")) {
      if (peek().kind != Token::ValueRef)
        fail(peek(), "expected a block output such as '%x', found " + describe(peek()));
      block.outputs.push_back(lookup(next()));
      if (!consumePunct(","))
        break;
    }
    expectPunct(")");
    scopes.pop_back();
    return key;
  }

  /// True if the tokens ahead open a nested block: `NAME(%x: ...` or `NAME() {`.
  bool atBlockHeader() {
    if (peek().kind != Token::Ident && peek().kind != Token::String)
      return false;
    if (!isPunct(1, "("))
      return false;
    if (peek(2).kind == Token::ValueRef)
      return true;
    return isPunct(2, ")") && (isPunct(3, "{") || isPunct(3, "["));
  }

  void parseOp(Block &block, int depth) {
    compact();
    auto op = std::make_unique<Operation>("", "");
    while (peek().kind == Token::ValueRef) {
      auto [vname, type] = parseDeclaration();
      op->addOutput(vname, type);
      if (!consumePunct(","))
        break;
    }
    if (!op->outputs.empty())
      expectPunct("=");
    op->type = parseName("an op type");
    // coremltools' print_attr=True adds "[SCOPE: ...]" after the op type.
    if (isPunct("["))
      skipBrackets();
    bool isConst = op->type == "const";
    expectPunct("(");
    consumePunct(","); // coremltools prints "op(, name=...)" for ops without inputs
    while (!isPunct(")")) {
      const Token &keyTok = peek();
      bool quoted = keyTok.kind == Token::String;
      std::string key = parseName("a parameter name");
      expectPunct("=");
      if (key == "name" && !quoted) {
        if (peek().kind != Token::String)
          fail(peek(), "expected the op name as a string, found " + describe(peek()));
        op->name = next().text;
      } else if (isConst && key == "val" && !quoted) {
        const Type *context = op->outputs.size() == 1 ? &op->outputs[0]->type : nullptr;
        op->attributes["val"] = std::make_shared<Constant>(parseConstant(context, 0));
      } else {
        if (op->input(key))
          fail(keyTok, "parameter '" + key + "' is given twice");
        std::vector<Binding> bindings;
        if (consumePunct("(")) {
          while (!isPunct(")")) {
            bindings.push_back(parseBinding());
            if (!consumePunct(","))
              break;
          }
          expectPunct(")");
        } else {
          bindings.push_back(parseBinding());
        }
        op->inputs.push_back(OpInput{key, std::move(bindings)});
      }
      if (!consumePunct(","))
        break;
    }
    expectPunct(")");
    if (isPunct("["))
      parseAttributes(op->attributes);
    Operation *placed = block.append(std::move(op));
    while (atBlockHeader()) {
      Block *nested = placed->addBlock();
      parseBlock(*nested, depth + 1, /*allowKey=*/false);
    }
    // Results become visible after the op's own blocks, which cannot use them.
    for (auto &out : placed->outputs)
      define(out.get());
  }

  Binding parseBinding() {
    if (peek().kind == Token::ValueRef)
      return Binding::of(lookup(next()));
    return Binding::of(std::make_shared<const Constant>(parseConstant(nullptr, 0)));
  }

  void skipBrackets() {
    int depth = 0;
    do {
      if (peek().kind == Token::Eof)
        fail(peek(), "expected ']', found end of file");
      if (isPunct("["))
        ++depth;
      else if (isPunct("]"))
        --depth;
      next();
    } while (depth > 0);
  }

  /// `[key=CONSTANT, ...]`
  void parseAttributes(AttributeMap &attrs) {
    expectPunct("[");
    while (!isPunct("]")) {
      const Token &keyTok = peek();
      std::string key = parseName("an attribute name");
      expectPunct("=");
      if (attrs.count(key))
        fail(keyTok, "attribute '" + key + "' is given twice");
      attrs[key] = std::make_shared<Constant>(parseConstant(nullptr, 0));
      if (!consumePunct(","))
        break;
    }
    expectPunct("]");
  }

  //===--------------------------------------------------------------------===//
  // Types
  //===--------------------------------------------------------------------===//

  DType parseDType() {
    const Token &t = peek();
    std::optional<DType> dt = t.kind == Token::Ident ? dtypeFromName(t.text) : std::nullopt;
    if (!dt)
      fail(t, "expected a dtype such as fp16 or int32, found " + describe(t));
    next();
    return *dt;
  }

  Dim parseDim() {
    const Token &t = peek();
    if (t.kind == Token::Number) {
      next();
      int64_t n = 0;
      auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), n);
      if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size() || n < 0)
        fail(t, "expected a dimension (a non-negative integer, a symbol, '?' or '*'), found " +
                    describe(t));
      return Dim::of(n);
    }
    if (t.kind == Token::Ident || t.kind == Token::String)
      return Dim::symbolic(next().text);
    if (consumePunct("?"))
      return Dim::unknown();
    if (consumePunct("*")) {
      Dim d = Dim::variadic();
      if (peek().kind == Token::Ident || peek().kind == Token::String)
        d.symbol = next().text;
      return d;
    }
    fail(t, "expected a dimension (a non-negative integer, a symbol, '?' or '*'), found " +
                describe(t));
  }

  /// "(1, is0, fp16)" or "(..., fp32)": the tensor type of a shape string.
  Type parseShape() {
    expectPunct("(");
    if (consumePunct("...")) {
      expectPunct(",");
      DType dt = parseDType();
      expectPunct(")");
      return Type::unranked(dt);
    }
    std::vector<Dim> dims;
    while (true) {
      const Token &t = peek();
      // The last item is the dtype; a symbol cannot end a shape.
      if (t.kind == Token::Ident && isPunct(1, ")")) {
        const Token &at = peek();
        DType dt = parseDType();
        next();
        Type type = Type::tensor(dt, std::move(dims));
        // As the protobuf reader does: a static shape's element count fits.
        if (type.staticShape() && !type.numElements())
          fail(at, "shape " + type.shapeStr() +
                       " has more elements than fit in int64 (the product of its dimensions "
                       "overflows)");
        return type;
      }
      if (t.kind == Token::Eof || isPunct(")"))
        fail(t, "expected a dtype such as fp16 or int32, found " + describe(t));
      dims.push_back(parseDim());
      expectPunct(",");
    }
  }

  /// The optional "(Tensor)" style tag after a type.
  std::optional<std::string> parseTag() {
    if (isPunct("(") && peek(1).kind == Token::Ident && isPunct(2, ")")) {
      static const char *tags[] = {"Tensor", "Scalar", "State", "List", "Tuple", "Dict"};
      for (const char *tag : tags)
        if (peek(1).text == tag) {
          next();
          std::string s = next().text;
          next();
          return s;
        }
    }
    return std::nullopt;
  }

  Type parseType(int depth) {
    checkDepth(depth);
    const Token &t = peek();
    if (isPunct("(")) {
      Type type = parseShape();
      // coremltools marks values known at compile time with '*' or '^'.
      if (isPunct("*") || isPunct("^"))
        next();
      if (auto tag = parseTag(); tag && *tag == "State")
        return Type::state(type);
      return type;
    }
    if (t.kind == Token::Ident && isPunct(1, "[")) {
      std::string kind = t.text;
      if (kind == "List" || kind == "Tuple" || kind == "Dict" || kind == "State") {
        next();
        next();
        Type type;
        if (kind == "List") {
          Dim len = parseDim();
          expectPunct(",");
          type = Type::list(parseListElement(depth + 1), len);
        } else if (kind == "Tuple") {
          std::vector<Type> elems;
          while (!isPunct("]")) {
            elems.push_back(parseType(depth + 1));
            if (!consumePunct(","))
              break;
          }
          type = Type::tuple(std::move(elems));
        } else if (kind == "Dict") {
          Type key = parseType(depth + 1);
          expectPunct(",");
          type = Type::dict(key, parseType(depth + 1));
        } else {
          type = Type::state(parseType(depth + 1));
        }
        expectPunct("]");
        parseTag();
        return type;
      }
    }
    fail(t, "expected a type such as '(1, 4, fp16)(Tensor)', found " + describe(t));
  }

  /// coremltools prints list elements as a shape, "str", "int" or "unknown".
  Type parseListElement(int depth) {
    if (peek().kind == Token::Ident && !isPunct(1, "[")) {
      const std::string &s = peek().text;
      if (s == "str" || s == "int" || s == "unknown") {
        next();
        return s == "str"   ? Type::scalar(DType::String)
               : s == "int" ? Type::scalar(DType::I32)
                            : Type::unranked(DType::F32);
      }
    }
    return parseType(depth);
  }

  //===--------------------------------------------------------------------===//
  // Constants
  //===--------------------------------------------------------------------===//

  int64_t parseInt64(const Token &t) const {
    int64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
      fail(t, "expected an integer, found " + describe(t));
    return v;
  }

  uint64_t parseUInt64(const Token &t) const {
    uint64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (t.kind != Token::Number || r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
      fail(t, "expected a non-negative integer, found " + describe(t));
    return v;
  }

  /// Element count of a static tensor type, refusing absurd shapes.
  std::optional<uint64_t> elementCount(const Type &type, const Token &at) const {
    auto shape = type.staticShape();
    if (!shape)
      return std::nullopt;
    uint64_t n = 1;
    for (int64_t d : *shape) {
      if (d != 0 && n > (uint64_t(1) << 48) / static_cast<uint64_t>(d))
        fail(at, "shape of " + type.str() + " is too large");
      n *= static_cast<uint64_t>(d);
    }
    return n;
  }

  /// A type after ':' — a dtype alone (keeping the literal's shape) or a full type.
  Type parseSuffix(const std::optional<Type> &inferred, const Token &at, int depth) {
    if (peek().kind == Token::Ident && dtypeFromName(peek().text)) {
      DType dt = parseDType();
      if (!inferred || !inferred->isTensor())
        fail(at, "a dtype suffix needs a literal tensor; give a full type such as ':(2,int64)'");
      return inferred->withDType(dt);
    }
    return parseType(depth + 1);
  }

  /// True if the tokens after ':' are a type (not a dictionary value).
  bool atTypeSuffix() {
    if (!isPunct(":"))
      return false;
    const Token &t = peek(1);
    if (isPunct(1, "("))
      return true;
    if (t.kind != Token::Ident)
      return false;
    if (dtypeFromName(t.text))
      return true;
    return (t.text == "List" || t.text == "Tuple" || t.text == "Dict" || t.text == "State") &&
           isPunct(2, "[");
  }

  Constant parseConstant(const Type *context, int depth) {
    checkDepth(depth);
    const Token &start = peek();
    Constant c;
    std::optional<Type> inferred;
    bool needsType = false;
    std::vector<Literal> leaves;
    bool isLiteral = false, isHex = false;
    std::vector<uint8_t> hexData;
    if (start.kind == Token::Ident && isPunct(1, "(") &&
        (start.text == "BLOBFILE" || start.text == "HEX" || start.text == "TUPLE" ||
         start.text == "LIST" || start.text == "DICT")) {
      std::string kw = next().text;
      next();
      if (kw == "BLOBFILE") {
        c.kind = Constant::Kind::Blob;
        parseBlobRef(c.blob);
        needsType = true;
      } else if (kw == "HEX") {
        isHex = true;
        needsType = true;
        hexData = parseHex();
        expectPunct(")");
      } else {
        c.kind = kw == "TUPLE"  ? Constant::Kind::Tuple
                 : kw == "LIST" ? Constant::Kind::List
                                : Constant::Kind::Dict;
        while (!isPunct(")")) {
          c.elements.push_back(parseConstant(nullptr, depth + 1));
          if (c.kind == Constant::Kind::Dict) {
            expectPunct(":");
            c.elements.push_back(parseConstant(nullptr, depth + 1));
          }
          if (!consumePunct(","))
            break;
        }
        expectPunct(")");
        if (c.kind == Constant::Kind::Tuple) {
          std::vector<Type> types;
          for (const Constant &e : c.elements)
            types.push_back(e.type);
          inferred = Type::tuple(std::move(types));
        } else if (c.kind == Constant::Kind::List && !c.elements.empty()) {
          inferred =
              Type::list(c.elements[0].type, Dim::of(static_cast<int64_t>(c.elements.size())));
        } else if (c.kind == Constant::Kind::Dict && !c.elements.empty()) {
          inferred = Type::dict(c.elements[0].type, c.elements[1].type);
        }
      }
    } else {
      isLiteral = true;
      literalValues = 0;
      Literal lit = parseLiteral(depth);
      std::vector<Dim> shape;
      literalShape(lit, shape, leaves);
      inferred = Type::tensor(literalDType(leaves, start), std::move(shape));
    }

    Type type;
    if (atTypeSuffix()) {
      const Token &colon = next();
      type = parseSuffix(inferred, colon, depth);
    } else if (context) {
      type = *context;
    } else if (inferred && !needsType) {
      type = *inferred;
    } else {
      fail(peek(), "expected a type suffix such as ':(4, 4, fp16)' after this constant, found " +
                       describe(peek()));
    }
    c.type = type;

    if (isLiteral || isHex || c.kind == Constant::Kind::Blob) {
      if (!type.isTensor())
        fail(start, "expected a tensor type for this constant, found " + type.str());
    } else {
      Type::Kind want = c.kind == Constant::Kind::Tuple  ? Type::Kind::Tuple
                        : c.kind == Constant::Kind::List ? Type::Kind::List
                                                         : Type::Kind::Dict;
      if (type.kind() != want)
        fail(start, "expected a " + inferred.value_or(Type::tuple({})).kindStr() +
                        " type for this constant, found " + type.str());
    }
    if (isLiteral)
      encodeLiteral(c, leaves, start);
    if (isHex) {
      if (type.dtype() == DType::String)
        fail(start, "string tensors cannot be given as HEX bytes");
      if (auto n = elementCount(type, start)) {
        uint64_t want = storageBytes(type.dtype(), *n);
        if (hexData.size() != want)
          fail(start, "expected " + std::to_string(want) + " bytes for " + type.str() + ", found " +
                          std::to_string(hexData.size()));
      }
      c.bytes = std::move(hexData);
    }
    if (consumePunct("{"))
      parseConstantMeta(c);
    return c;
  }

  void parseConstantMeta(Constant &c) {
    while (!isPunct("}")) {
      const Token &key = peek();
      std::string k = parseName("'enc' or 'doc'");
      expectPunct("=");
      if (k == "enc") {
        const Token &num = next();
        uint64_t v = parseUInt64(num);
        if (v > 255)
          fail(num, "expected an encoding number below 256, found " + num.text);
        c.protoEncoding = static_cast<uint8_t>(v);
      } else if (k == "doc") {
        if (peek().kind != Token::String)
          fail(peek(), "expected a string, found " + describe(peek()));
        c.docString = next().text;
      } else {
        fail(key, "expected 'enc' or 'doc', found '" + k + "'");
      }
      if (!consumePunct(","))
        break;
    }
    expectPunct("}");
  }

  void parseBlobRef(BlobRef &ref) {
    bool havePath = false, haveOffset = false;
    while (!isPunct(")")) {
      const Token &key = peek();
      std::string k = parseName("'path' or 'offset'");
      expectPunct("=");
      if (k == "path") {
        if (peek().kind != Token::String)
          fail(peek(), "expected the weight file path as a string, found " + describe(peek()));
        ref.fileName = next().text;
        havePath = true;
      } else if (k == "offset") {
        ref.offset = parseUInt64(next());
        haveOffset = true;
      } else {
        fail(key, "expected 'path' or 'offset', found '" + k + "'");
      }
      if (!consumePunct(","))
        break;
    }
    if (!havePath || !haveOffset)
      fail(peek(), std::string("expected BLOBFILE(path=\"...\", offset=N), missing ") +
                       (havePath ? "offset" : "path"));
    expectPunct(")");
    auto it = stores.find(ref.fileName);
    if (it == stores.end()) {
      std::shared_ptr<const BlobStore> store = openWeights ? openWeights(ref.fileName) : nullptr;
      it = stores.emplace(ref.fileName, store).first;
      if (store)
        model.weightFiles[ref.fileName] = store;
    }
    ref.store = it->second;
  }

  /// HEX("0a1b" "2c3d" ...): one or more strings of hex digits, so that a
  /// large constant can be printed over several lines.
  std::vector<uint8_t> parseHex() {
    if (peek().kind != Token::String)
      fail(peek(), "expected a string of hex digits, found " + describe(peek()));
    std::vector<uint8_t> out;
    while (peek().kind == Token::String)
      appendHex(next(), out);
    return out;
  }

  void appendHex(const Token &t, std::vector<uint8_t> &out) {
    if (t.text.size() % 2)
      fail(t, "expected an even number of hex digits, found " + std::to_string(t.text.size()));
    out.reserve(out.size() + t.text.size() / 2);
    for (size_t i = 0; i < t.text.size(); i += 2) {
      int v = 0;
      for (size_t k = 0; k < 2; ++k) {
        char ch = t.text[i + k];
        int d = isDigit(ch)                ? ch - '0'
                : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                                           : -1;
        if (d < 0)
          fail(t, std::string("expected a hex digit, found '") + ch + "'");
        v = v * 16 + d;
      }
      out.push_back(static_cast<uint8_t>(v));
    }
  }

  /// Values of the list literal being parsed (bounded by kMaxLiteralValues).
  uint64_t literalValues = 0;

  Literal parseLiteral(int depth) {
    checkDepth(depth);
    const Token &t = peek();
    Literal lit;
    lit.at = &t;
    if (consumePunct("[")) {
      lit.kind = Literal::List;
      while (!isPunct("]")) {
        lit.items.push_back(parseLiteral(depth + 1));
        if (!consumePunct(","))
          break;
      }
      expectPunct("]");
      return lit;
    }
    if (t.kind == Token::Number ||
        (t.kind == Token::Ident && (t.text == "inf" || t.text == "nan"))) {
      lit.kind = Literal::Num;
    } else if (t.kind == Token::Ident && (t.text == "True" || t.text == "False")) {
      lit.kind = Literal::Bool;
    } else if (t.kind == Token::String) {
      lit.kind = Literal::Str;
    } else {
      fail(t, "expected a value (a number, True/False, a string, a list, %name, BLOBFILE(...) "
              "or HEX(...)), found " +
                  describe(t));
    }
    if (++literalValues > kMaxLiteralValues)
      fail(t, "a list literal of more than " + std::to_string(kMaxLiteralValues) +
                  " values; write large constants as HEX(...) or BLOBFILE(...)");
    lit.text = next().text;
    return lit;
  }

  /// The shape nested lists spell; collects leaves in row-major order.
  void literalShape(Literal &lit, std::vector<Dim> &shape, std::vector<Literal> &leaves) {
    if (lit.kind != Literal::List) {
      leaves.push_back(std::move(lit));
      return;
    }
    size_t rank = shape.size();
    shape.push_back(Dim::of(static_cast<int64_t>(lit.items.size())));
    std::vector<Dim> first;
    for (size_t i = 0; i < lit.items.size(); ++i) {
      std::vector<Dim> sub;
      const Token *at = lit.items[i].at;
      literalShape(lit.items[i], sub, leaves);
      if (i == 0)
        first = sub;
      else if (sub != first)
        fail(*at, "ragged nested list: its items have different shapes");
    }
    shape.resize(rank + 1);
    shape.insert(shape.end(), first.begin(), first.end());
  }

  DType literalDType(const std::vector<Literal> &leaves, const Token &at) const {
    bool anyStr = false, anyBool = false, anyNum = false, anyFloat = false;
    for (const Literal &l : leaves) {
      anyStr |= l.kind == Literal::Str;
      anyBool |= l.kind == Literal::Bool;
      anyNum |= l.kind == Literal::Num;
      anyFloat |= l.kind == Literal::Num && looksFloat(l.text);
    }
    if (int(anyStr) + int(anyBool) + int(anyNum) > 1)
      fail(at, "a list mixes strings, booleans and numbers");
    if (anyStr)
      return DType::String;
    if (anyBool)
      return DType::Bool;
    return anyFloat ? DType::F32 : DType::I32;
  }

  void encodeLiteral(Constant &c, std::vector<Literal> &leaves, const Token &start) {
    DType dt = c.type.dtype();
    if (auto n = elementCount(c.type, start); n && *n != leaves.size())
      fail(start, "expected " + std::to_string(*n) + " values for " + c.type.str() + ", found " +
                      std::to_string(leaves.size()));
    if (dt == DType::String) {
      for (Literal &l : leaves) {
        if (l.kind != Literal::Str)
          fail(*l.at, "expected a string for " + c.type.str() + ", found " + describe(*l.at));
        c.strings.push_back(std::move(l.text));
      }
      return;
    }
    c.bytes.reserve(storageBytes(dt, leaves.size()));
    if (isSubByte(dt))
      c.bytes.assign(storageBytes(dt, leaves.size()), 0);
    uint64_t index = 0;
    for (const Literal &l : leaves)
      encodeElement(c, dt, l, index++);
  }

  void encodeElement(Constant &c, DType dt, const Literal &l, uint64_t index) {
    std::string typeName(dtypeName(dt));
    if (dt == DType::Bool) {
      if (l.kind != Literal::Bool)
        fail(*l.at, "expected True or False for bool, found " + describe(*l.at));
      c.bytes.push_back(l.text == "True" ? 1 : 0);
      return;
    }
    if (l.kind != Literal::Num)
      fail(*l.at, "expected a number for " + typeName + ", found " + describe(*l.at));
    if (isFloat(dt)) {
      if (dt == DType::F8E4M3FN || dt == DType::F8E5M2)
        fail(*l.at, typeName + " values must be given as HEX(\"...\") bytes");
      double d = 0;
      float f = 0;
      if (l.text == "inf" || l.text == "-inf" || l.text == "nan") {
        d = l.text == "nan"
                ? std::numeric_limits<double>::quiet_NaN()
                : (l.text[0] == '-' ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
        f = l.text == "nan" ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(d);
      } else if (dt == DType::F64) {
        if (!parseFloating(l.text, d))
          fail(*l.at, "expected a number within the range of fp64, found " + describe(*l.at));
      } else {
        if (!parseFloating(l.text, f))
          fail(*l.at, "expected a number within the range of fp32, found " + describe(*l.at));
      }
      switch (dt) {
      case DType::F64:
        storeLE(c.bytes, d);
        break;
      case DType::F32:
        storeLE(c.bytes, f);
        break;
      case DType::F16:
        storeLE(c.bytes, floatToHalf(f));
        break;
      default:
        storeLE(c.bytes, floatToBf16(f));
        break;
      }
      return;
    }
    if (looksFloat(l.text))
      fail(*l.at, "expected an integer for " + typeName + ", found " + describe(*l.at));
    int bits = dtypeBits(dt);
    bool isSigned = dtypeKind(dt) == DTypeKind::Signed;
    uint64_t raw = 0;
    bool ok = false;
    if (isSigned) {
      int64_t v = 0;
      auto r = std::from_chars(l.text.data(), l.text.data() + l.text.size(), v);
      int64_t lo = bits >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (bits - 1));
      int64_t hi =
          bits >= 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (bits - 1)) - 1;
      ok = r.ec == std::errc() && r.ptr == l.text.data() + l.text.size() && v >= lo && v <= hi;
      raw = static_cast<uint64_t>(v);
    } else {
      uint64_t v = 0;
      auto r = std::from_chars(l.text.data(), l.text.data() + l.text.size(), v);
      uint64_t hi = bits >= 64 ? std::numeric_limits<uint64_t>::max() : (uint64_t(1) << bits) - 1;
      ok = l.text[0] != '-' && r.ec == std::errc() && r.ptr == l.text.data() + l.text.size() &&
           v <= hi;
      raw = v;
    }
    if (!ok)
      fail(*l.at,
           "expected an integer within the range of " + typeName + ", found " + describe(*l.at));
    if (isSubByte(dt)) {
      storePackedBits(c.bytes, index, bits, raw);
      return;
    }
    for (int b = 0; b < bits / 8; ++b)
      c.bytes.push_back(static_cast<uint8_t>(raw >> (8 * b)));
  }
};

//===----------------------------------------------------------------------===//
// Model header
//===----------------------------------------------------------------------===//

/// Reads the header JSON, naming the header line in every error.
class HeaderReader {
public:
  HeaderReader(const std::string &file, int line) : place(file + ":" + std::to_string(line)) {}

  void read(const std::string &text, Model &model) {
    json j;
    checkJsonDepth(text, place);
    try {
      j = json::parse(text);
    } catch (const json::exception &e) {
      fail("expected JSON after '// anefit model:', found invalid JSON (" + std::string(e.what()) +
           ")");
    }
    if (!j.is_object())
      fail("expected a JSON object after '// anefit model:'");
    for (auto &[key, value] : j.items()) {
      if (key == "specificationVersion")
        model.specificationVersion =
            static_cast<int32_t>(integer(value, key, INT32_MIN, INT32_MAX));
      else if (key == "isUpdatable")
        model.isUpdatable = boolean(value, key);
      else if (key == "description")
        description(value, model.description);
      else if (key == "executorchCompileSpecs")
        compileSpecs(value, model.compileSpecs);
      else
        fail("unknown header key '" + key + "'");
    }
  }

private:
  std::string place;

  [[noreturn]] void fail(const std::string &message) const {
    throw InputError(place + ": " + message);
  }

  /// The compile specs of an ExecuTorch delegate: an object of strings.
  void compileSpecs(const json &v, std::map<std::string, std::string> &out) const {
    if (!v.is_object())
      fail("expected an object of strings for 'executorchCompileSpecs', found " + dumpJson(v));
    for (auto &[k, s] : v.items()) {
      if (!s.is_string())
        fail("expected a string for 'executorchCompileSpecs." + k + "', found " + dumpJson(s));
      out[k] = s.get<std::string>();
    }
  }

  int64_t integer(const json &v, const std::string &key, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer())
      fail("expected an integer for '" + key + "', found " + dumpJson(v));
    int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                    ? INT64_MAX
                    : v.get<int64_t>();
    if (n < lo || n > hi)
      fail("'" + key + "' out of range: " + dumpJson(v));
    return n;
  }
  uint64_t unsignedInt(const json &v, const std::string &key) const {
    if (!v.is_number_unsigned())
      fail("expected a non-negative integer for '" + key + "', found " + dumpJson(v));
    return v.get<uint64_t>();
  }
  bool boolean(const json &v, const std::string &key) const {
    if (!v.is_boolean())
      fail("expected true or false for '" + key + "', found " + dumpJson(v));
    return v.get<bool>();
  }
  std::string string(const json &v, const std::string &key) const {
    if (!v.is_string())
      fail("expected a string for '" + key + "', found " + dumpJson(v));
    return v.get<std::string>();
  }
  const json &array(const json &v, const std::string &key) const {
    if (!v.is_array())
      fail("expected a list for '" + key + "', found " + dumpJson(v));
    return v;
  }
  std::vector<int64_t> ints(const json &v, const std::string &key) const {
    std::vector<int64_t> out;
    for (const json &e : array(v, key))
      out.push_back(integer(e, key, INT64_MIN, INT64_MAX));
    return out;
  }

  ArrayDataType dataType(const json &v) const {
    if (v.is_string()) {
      static const std::pair<const char *, ArrayDataType> names[] = {
          {"FLOAT32", ArrayDataType::Float32}, {"DOUBLE", ArrayDataType::Double},
          {"INT32", ArrayDataType::Int32},     {"INT8", ArrayDataType::Int8},
          {"FLOAT16", ArrayDataType::Float16}, {"INVALID", ArrayDataType::Invalid}};
      for (const auto &[name, t] : names)
        if (v.get<std::string>() == name)
          return t;
      fail("unknown dataType " + dumpJson(v));
    }
    return static_cast<ArrayDataType>(integer(v, "dataType", INT32_MIN, INT32_MAX));
  }

  FeatureType featureType(const json &j) const {
    if (!j.is_object())
      fail("expected an object for 'type', found " + dumpJson(j));
    FeatureType t;
    static const char *kinds[] = {"multiArray", "state", "int64", "double", "string", "other"};
    for (auto &[key, v] : j.items()) {
      if (key == "kind") {
        std::string k = string(v, key);
        bool found = false;
        for (int i = 0; i < 6; ++i)
          if (k == kinds[i]) {
            t.kind = static_cast<FeatureType::Kind>(i);
            found = true;
          }
        if (!found)
          fail("unknown feature kind '" + k + "'");
      } else if (key == "shape") {
        t.shape = ints(v, key);
      } else if (key == "dataType") {
        t.dataType = dataType(v);
      } else if (key == "enumeratedShapes") {
        for (const json &s : array(v, key))
          t.enumeratedShapes.push_back(ints(s, key));
      } else if (key == "shapeRange") {
        t.hasShapeRange = true;
        for (const json &r : array(v, key)) {
          if (!r.is_array() || r.size() != 2)
            fail("expected [lower, upper] pairs in 'shapeRange', found " + dumpJson(r));
          t.shapeRange.emplace_back(unsignedInt(r[0], key),
                                    integer(r[1], key, INT64_MIN, INT64_MAX));
        }
      } else if (key == "intDefaultValue") {
        t.intDefaultValue = static_cast<int32_t>(integer(v, key, INT32_MIN, INT32_MAX));
      } else if (key == "floatDefaultValue" || key == "doubleDefaultValue") {
        if (!v.is_number())
          fail("expected a number for '" + key + "', found " + dumpJson(v));
        if (key == "floatDefaultValue")
          t.floatDefaultValue = v.get<float>();
        else
          t.doubleDefaultValue = v.get<double>();
      } else if (key == "rawProto") {
        t.rawProto = unhex(string(v, key));
      } else if (key == "isOptional") {
        t.isOptional = boolean(v, key);
      } else {
        fail("unknown feature type key '" + key + "'");
      }
    }
    return t;
  }

  std::string unhex(const std::string &s) const {
    if (s.size() % 2)
      fail("expected an even number of hex digits in 'rawProto'");
    std::string out;
    for (size_t i = 0; i < s.size(); i += 2) {
      int v = 0;
      for (size_t k = 0; k < 2; ++k) {
        char ch = s[i + k];
        int d = isDigit(ch) ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : -1;
        if (d < 0)
          fail("expected lower-case hex digits in 'rawProto'");
        v = v * 16 + d;
      }
      out += static_cast<char>(v);
    }
    return out;
  }

  std::vector<FeatureDescription> features(const json &v, const std::string &key) const {
    std::vector<FeatureDescription> out;
    for (const json &f : array(v, key)) {
      if (!f.is_object())
        fail("expected an object in '" + key + "', found " + dumpJson(f));
      FeatureDescription d;
      for (auto &[k, fv] : f.items()) {
        if (k == "name")
          d.name = string(fv, k);
        else if (k == "shortDescription")
          d.shortDescription = string(fv, k);
        else if (k == "type")
          d.type = featureType(fv);
        else
          fail("unknown feature key '" + k + "'");
      }
      out.push_back(std::move(d));
    }
    return out;
  }

  void description(const json &j, ModelDescription &d) const {
    if (!j.is_object())
      fail("expected an object for 'description', found " + dumpJson(j));
    for (auto &[key, v] : j.items()) {
      if (key == "input")
        d.inputs = features(v, key);
      else if (key == "output")
        d.outputs = features(v, key);
      else if (key == "state")
        d.states = features(v, key);
      else if (key == "predictedFeatureName")
        d.predictedFeatureName = string(v, key);
      else if (key == "predictedProbabilitiesName")
        d.predictedProbabilitiesName = string(v, key);
      else if (key == "trainingInput")
        d.trainingInputs = features(v, key);
      else if (key == "functions")
        for (const json &f : array(v, key))
          d.functions.push_back(function(f));
      else if (key == "defaultFunctionName")
        d.defaultFunctionName = string(v, key);
      else if (key == "metadata")
        metadata(v, d.metadata);
      else
        fail("unknown description key '" + key + "'");
    }
  }

  FunctionDescription function(const json &j) const {
    if (!j.is_object())
      fail("expected an object in 'functions', found " + dumpJson(j));
    FunctionDescription f;
    for (auto &[key, v] : j.items()) {
      if (key == "name")
        f.name = string(v, key);
      else if (key == "input")
        f.inputs = features(v, key);
      else if (key == "output")
        f.outputs = features(v, key);
      else if (key == "state")
        f.states = features(v, key);
      else if (key == "predictedFeatureName")
        f.predictedFeatureName = string(v, key);
      else if (key == "predictedProbabilitiesName")
        f.predictedProbabilitiesName = string(v, key);
      else
        fail("unknown function description key '" + key + "'");
    }
    return f;
  }

  void metadata(const json &j, Metadata &m) const {
    if (!j.is_object())
      fail("expected an object for 'metadata', found " + dumpJson(j));
    for (auto &[key, v] : j.items()) {
      if (key == "shortDescription")
        m.shortDescription = string(v, key);
      else if (key == "versionString")
        m.versionString = string(v, key);
      else if (key == "author")
        m.author = string(v, key);
      else if (key == "license")
        m.license = string(v, key);
      else if (key == "userDefined") {
        if (!v.is_object())
          fail("expected an object for 'userDefined', found " + dumpJson(v));
        for (auto &[uk, uv] : v.items())
          m.userDefined[uk] = string(uv, uk);
      } else
        fail("unknown metadata key '" + key + "'");
    }
  }
};

/// The description coremltools would write for a value of this type.
FeatureType featureTypeOf(const Type &type, bool isOutput) {
  FeatureType f;
  const Type &tensor = type.isState() ? type.elementType() : type;
  f.kind = type.isState() ? FeatureType::Kind::State : FeatureType::Kind::MultiArray;
  if (!tensor.isTensor())
    return f;
  f.dataType = arrayDataTypeOf(tensor.dtype()).value_or(ArrayDataType::Invalid);
  if (!tensor.hasRank())
    return f;
  if (tensor.isScalar()) {
    f.shape = {1};
    return f;
  }
  if (tensor.hasStaticShape()) {
    f.shape = *tensor.staticShape();
    return f;
  }
  // Symbolic dims: outputs leave the shape out; inputs get default 1 and an
  // unbounded range, as coremltools does for RangeDim without bounds.
  if (isOutput)
    return f;
  f.hasShapeRange = true;
  for (const Dim &d : tensor.shape()) {
    int64_t n = d.isStatic() ? d.size : 1;
    f.shape.push_back(n);
    f.shapeRange.emplace_back(static_cast<uint64_t>(n), d.isStatic() ? n : -1);
  }
  return f;
}

FunctionDescription describeFunction(const Function &f) {
  FunctionDescription d;
  d.name = f.name;
  for (const auto &in : f.inputs) {
    FeatureDescription fd{in->name, "", featureTypeOf(in->type, false)};
    (in->type.isState() ? d.states : d.inputs).push_back(std::move(fd));
  }
  for (const Value *out : f.body->outputs)
    if (out)
      d.outputs.push_back(FeatureDescription{out->name, "", featureTypeOf(out->type, true)});
  return d;
}

} // namespace

void synthesizeDescription(Model &model) {
  model.description = ModelDescription();
  model.specificationVersion = 0;
  if (!model.program)
    return;
  int maxOpset = 0;
  for (const auto &f : model.program->functions)
    maxOpset = std::max(maxOpset, opsetNumber(f->opset));
  if (maxOpset > 0)
    model.specificationVersion = specVersionForOpset(maxOpset);
  const auto &fns = model.program->functions;
  if (fns.size() == 1) {
    FunctionDescription d = describeFunction(*fns[0]);
    model.description.inputs = std::move(d.inputs);
    model.description.outputs = std::move(d.outputs);
    model.description.states = std::move(d.states);
    return;
  }
  for (const auto &f : fns)
    model.description.functions.push_back(describeFunction(*f));
  if (!fns.empty())
    model.description.defaultFunctionName =
        model.program->findFunction("main") ? "main" : fns.front()->name;
}

std::unique_ptr<Model> parseModelText(std::string_view text, const std::string &fileName,
                                      const WeightOpener &openWeights) {
  return parseModelText(text, fileName, openWeights, ParseOptions{});
}

std::unique_ptr<Model> parseModelText(std::string_view text, const std::string &fileName,
                                      const WeightOpener &openWeights,
                                      const ParseOptions &options) {
  Lexer lexer(text, fileName);
  auto model = std::make_unique<Model>();
  model->sourcePath = fileName;
  Parser(lexer, fileName, openWeights, options, *model).parseProgram();
  if (lexer.headerLine)
    HeaderReader(fileName, lexer.headerLine).read(lexer.headerJson, *model);
  else
    synthesizeDescription(*model);
  return model;
}

std::vector<std::string> splitInputFile(std::string_view text) {
  std::vector<std::string> parts(1);
  size_t lineNo = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    std::string_view trimmed = line;
    while (!trimmed.empty() && (trimmed.back() == '\r' || trimmed.back() == ' '))
      trimmed.remove_suffix(1);
    ++lineNo;
    if (trimmed == kSplitMarker) {
      // Blank lines keep the next part's line numbers those of the file.
      parts.emplace_back(lineNo, '\n');
      continue;
    }
    parts.back().append(line).append("\n");
  }
  return parts;
}

} // namespace anefit
