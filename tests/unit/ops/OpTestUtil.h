//===- OpTestUtil.h - Building single ops for registry tests ---*- C++ -*-===//
//
// A compact way to write "op with these input types -> these output types"
// test tables: types are written as text ("fp16(1, 8, ?, s0)", "int32" for a
// scalar, "state fp16(1, 4)"), inputs are function inputs or const ops.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <cctype>
#include <string>
#include <variant>
#include <vector>

namespace anefit::test {

/// Parses "fp16(1, ?, s0)", "int32" (scalar), "fp32(*)" (unranked) or "state fp16(1, 4)".
inline Type ty(std::string s) {
  if (s.rfind("state ", 0) == 0)
    return Type::state(ty(s.substr(6)));
  size_t paren = s.find('(');
  std::string name = s.substr(0, paren);
  DType dt = *dtypeFromName(name);
  if (paren == std::string::npos)
    return Type::scalar(dt);
  std::string body = s.substr(paren + 1, s.rfind(')') - paren - 1);
  if (body == "*")
    return Type::unranked(dt);
  std::vector<Dim> dims;
  size_t start = 0;
  while (start <= body.size() && !body.empty()) {
    size_t comma = body.find(',', start);
    std::string tok =
        body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!tok.empty() && tok.front() == ' ')
      tok.erase(tok.begin());
    while (!tok.empty() && tok.back() == ' ')
      tok.pop_back();
    if (tok == "?")
      dims.push_back(Dim::unknown());
    else if (!tok.empty() && (std::isdigit(static_cast<unsigned char>(tok[0])) || tok[0] == '-'))
      dims.push_back(Dim::of(std::stoll(tok)));
    else
      dims.push_back(Dim::symbolic(tok));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return Type::tensor(dt, std::move(dims));
}

inline Constant ints(std::vector<int32_t> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return Constant::fromI32(std::move(v), {n});
}
inline Constant i32(int32_t v) { return Constant::scalarI32(v); }
inline Constant boolean(bool v) { return Constant::scalarBool(v); }
inline Constant bools(std::vector<bool> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return Constant::fromBool(std::move(v), {n});
}
inline Constant str(std::string v) { return Constant::scalarString(std::move(v)); }
inline Constant f32(float v) { return Constant::scalarF32(v); }
/// A constant of the given type whose contents do not matter (weights).
inline Constant weights(const std::string &type) {
  Constant c;
  c.type = ty(type);
  c.bytes.assign(storageBytes(c.type.dtype(), static_cast<uint64_t>(*c.type.numElements())), 0);
  return c;
}

/// One argument: a runtime value of a type, a constant, or several runtime values.
using Arg = std::variant<std::string, Constant, std::vector<std::string>>;

/// A program with one function holding the op under test.
struct OpHarness {
  Program program;
  Function *fn;
  int counter = 0;

  explicit OpHarness(std::string opset = "CoreML8") {
    fn = program.addFunction("main");
    fn->opset = std::move(opset);
  }

  Binding bind(const std::string &type) {
    Type t = ty(type);
    return Binding::of(fn->addInput("in" + std::to_string(counter++), t));
  }
  Binding bind(const Constant &c) {
    auto op = std::make_unique<Operation>("const", "c" + std::to_string(counter++));
    op->attributes["val"] = std::make_shared<Constant>(c);
    Value *v = op->addOutput(op->name, c.type);
    fn->body->append(std::move(op));
    return Binding::of(v);
  }

  /// Appends `type` with the given inputs and declared output types.
  Operation *add(const std::string &type, const std::vector<std::pair<std::string, Arg>> &inputs,
                 const std::vector<std::string> &outputs = {}) {
    auto op = std::make_unique<Operation>(type, type + "_" + std::to_string(counter++));
    for (const auto &[name, arg] : inputs) {
      if (auto *s = std::get_if<std::string>(&arg))
        op->setInput(name, bind(*s));
      else if (auto *c = std::get_if<Constant>(&arg))
        op->setInput(name, bind(*c));
      else {
        std::vector<Binding> bs;
        for (const std::string &t : std::get<std::vector<std::string>>(arg))
          bs.push_back(bind(t));
        op->setInput(name, std::move(bs));
      }
    }
    for (size_t i = 0; i < outputs.size(); ++i)
      op->addOutput(op->name + "_out" + std::to_string(i), ty(outputs[i]));
    return fn->body->append(std::move(op));
  }
};

} // namespace anefit::test
