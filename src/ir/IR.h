//===- IR.h - The in-memory form of a MIL program --------------*- C++ -*-===//
//
// Program -> Function -> Block -> Operation -> Value, in SSA form, mirroring
// MILSpec (formats.md §3). Operations own their output Values and nested
// Blocks; Blocks own their Operations in program order. Inputs of an
// operation are named parameters, each a list of bindings (more than one for
// variadic parameters such as concat.values); a binding refers to a Value
// or holds an immediate Constant. There are no use-lists: analyses that need
// uses build a UseMap (transforms/UseMap.h) for the moment they need it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Constant.h"
#include "ir/Type.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

class Block;
class Function;
class Operation;

/// An SSA value: an operation result, or a block/function input.
class Value {
public:
  Value(std::string name, Type type) : name(std::move(name)), type(std::move(type)) {}
  std::string name;
  Type type;
  /// The operation producing this value; null for block/function inputs.
  Operation *definingOp = nullptr;
  /// For block/function inputs: the block that declares it (function inputs:
  /// the function body).
  Block *ownerBlock = nullptr;

  bool isBlockInput() const { return definingOp == nullptr; }
};

/// One argument of a parameter: a value or an immediate constant.
struct Binding {
  Value *value = nullptr;
  ConstantRef constant;

  static Binding of(Value *v) { return Binding{v, nullptr}; }
  static Binding of(ConstantRef c) { return Binding{nullptr, std::move(c)}; }
  bool isValue() const { return value != nullptr; }
};

/// A named parameter of an operation and its bindings, in order.
struct OpInput {
  std::string name;
  std::vector<Binding> bindings;
};

/// Attributes by name; std::less<> finds a string_view key without a copy.
using AttributeMap = std::map<std::string, ConstantRef, std::less<>>;

class Operation {
public:
  Operation(std::string type, std::string name) : type(std::move(type)), name(std::move(name)) {}

  std::string type; ///< op type as in MIL: "conv", "const", "read_state", ...
  std::string name; ///< the op's "name" attribute
  /// Parameters in the order they were read or built (the writer sorts by name).
  std::vector<OpInput> inputs;
  std::vector<std::unique_ptr<Value>> outputs;
  std::vector<std::unique_ptr<Block>> blocks;
  /// Attributes other than "name" (const's "val", constexpr params before iOS18, ...).
  AttributeMap attributes;
  Block *parent = nullptr;

  /// The parameter called `param`, or null.
  const OpInput *input(std::string_view param) const;
  OpInput *input(std::string_view param);
  /// The single value bound to `param`, or null (absent, immediate, or variadic).
  Value *inputValue(std::string_view param) const;
  /// The constant bound to `param`: an immediate, or the "val" of a const op
  /// producing the bound value. Null if the parameter is absent or not constant.
  const Constant *constInput(std::string_view param) const;
  /// The type of the single value or immediate bound to `param`, or null
  /// (absent or variadic). Attributes are not inputs: see op.attribute().
  const Type *inputType(std::string_view param) const;
  /// All values this op reads (every binding of every input), in order.
  std::vector<Value *> operandValues() const;

  /// Sets (replaces) a parameter to one binding.
  void setInput(std::string param, Binding b);
  void setInput(std::string param, std::vector<Binding> bs);
  void removeInput(std::string_view param);
  Value *addOutput(std::string valueName, Type type);
  Value *output(size_t i = 0) const { return outputs.at(i).get(); }
  Block *addBlock();
  /// The attribute `key`, or null.
  const Constant *attribute(std::string_view key) const;
  /// Enclosing function (walking up through nested blocks).
  Function *parentFunction() const;
};

class Block {
public:
  std::vector<std::unique_ptr<Value>> inputs; ///< only for nested (loop) blocks
  std::vector<std::unique_ptr<Operation>> ops;
  std::vector<Value *> outputs;
  AttributeMap attributes;
  Operation *parentOp = nullptr;  ///< set for nested blocks
  Function *parentFunc = nullptr; ///< set for a function body

  Value *addInput(std::string name, Type type);
  /// Appends and returns the op, setting its parent.
  Operation *append(std::unique_ptr<Operation> op);
  /// Inserts before `pos` (which must be in this block).
  Operation *insertBefore(const Operation *pos, std::unique_ptr<Operation> op);
  /// Inserts after `pos` (which must be in this block).
  Operation *insertAfter(const Operation *pos, std::unique_ptr<Operation> op);
  /// Removes `op` from this block and destroys it; its outputs must be unused.
  void erase(const Operation *op);
  /// Index of `op` in ops, or -1.
  int64_t indexOf(const Operation *op) const;
  Function *function() const;
};

class Function {
public:
  explicit Function(std::string name) : name(std::move(name)), body(std::make_unique<Block>()) {
    body->parentFunc = this;
  }
  std::string name;
  /// Function inputs (tensors and states). Their ownerBlock is `body`.
  std::vector<std::unique_ptr<Value>> inputs;
  /// Opset string such as "CoreML8"; the key of `body` in block_specializations.
  std::string opset;
  std::unique_ptr<Block> body;
  /// Further block specializations (rare), by opset key, kept for round trips.
  std::map<std::string, std::unique_ptr<Block>> otherSpecializations;
  AttributeMap attributes;

  Value *addInput(std::string name, Type type);
  Value *findInput(std::string_view name) const;
};

class Program {
public:
  int64_t version = 1;
  /// Functions in name order (the proto map's order as written).
  std::vector<std::unique_ptr<Function>> functions;
  std::string docString;
  AttributeMap attributes;

  Function *findFunction(std::string_view name) const;
  Function *addFunction(std::string name);
};

/// Calls `fn(op)` for every operation in `block`, nested blocks included, in
/// program order (an op is visited before the ops of its nested blocks).
template <typename Fn> void walk(Block &block, Fn &&fn) {
  for (auto &op : block.ops) {
    fn(*op);
    for (auto &nested : op->blocks)
      walk(*nested, fn);
  }
}
template <typename Fn> void walk(const Block &block, Fn &&fn) {
  for (const auto &op : block.ops) {
    fn(static_cast<const Operation &>(*op));
    for (const auto &nested : op->blocks)
      walk(static_cast<const Block &>(*nested), fn);
  }
}

/// Opset string ("CoreML5".."CoreML9") <-> number (5..9). 0 if not recognised.
int opsetNumber(std::string_view opset);
/// Core ML specification version that introduced opset CoreML<N>: N + 1.
inline int specVersionForOpset(int opsetNum) { return opsetNum + 1; }

} // namespace anefit
