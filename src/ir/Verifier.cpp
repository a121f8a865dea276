//===- Verifier.cpp - Structural checks of programs and models ------------===//
//
// Walks each function once, keeping the set of values visible at each point
// (function inputs, block inputs, results of earlier ops in this and the
// enclosing blocks), so a use of a value defined later, in a sibling block or
// in another function is reported where it happens.
//
//===----------------------------------------------------------------------===//
#include "ir/Verifier.h"

#include "support/Text.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace anefit {
namespace {

class ProgramVerifier {
public:
  explicit ProgramVerifier(Diagnostics &diags, bool scopesOnly = false)
      : diags(diags), scopesOnly(scopesOnly) {}

  void verifyFunction(const Function &f) {
    fn = &f;
    names.clear();
    visible.clear();
    int opset = opsetNumber(f.opset);
    if (scopesOnly) {
      // no opset rules
    } else if (opset >= 1 && opset < 5)
      error("",
            "opset '" + f.opset + "' predates ML Programs; expected CoreML5 (iOS15) to CoreML9");
    else if (opset < 5 || opset > 9)
      error("", "unknown opset '" + f.opset + "'; expected CoreML5 to CoreML9");
    for (const auto &in : f.inputs)
      declare(in.get(), "function input");
    verifyBlock(*f.body, /*isBody=*/true);
    for (const auto &[key, block] : f.otherSpecializations) {
      // Each specialization is a separate body over the same inputs.
      std::unordered_map<std::string, const Value *> savedNames = names;
      std::unordered_set<const Value *> savedVisible = visible;
      verifyBlock(*block, /*isBody=*/true);
      names = std::move(savedNames);
      visible = std::move(savedVisible);
    }
  }

private:
  Diagnostics &diags;
  bool scopesOnly;
  const Function *fn = nullptr;
  /// Names of the values in scope, each unique (SSA, no shadowing).
  std::unordered_map<std::string, const Value *> names;
  std::unordered_set<const Value *> visible;

  void error(const std::string &op, const std::string &message) {
    diags.push_back(Diagnostic{Diagnostic::Severity::Error, fn->name, op, message});
  }

  void declare(const Value *v, const char *what, const std::string &op = "") {
    auto [it, inserted] = names.emplace(v->name, v);
    if (!inserted)
      error(op, "value '%" + v->name + "' (" + what + ") is defined more than once");
    visible.insert(v);
  }

  void verifyBlock(const Block &b, bool isBody) {
    if (isBody && !b.inputs.empty() && !scopesOnly)
      error("", "the function body declares block inputs; only nested blocks may");
    std::vector<const Value *> local;
    for (const auto &in : b.inputs) {
      declare(in.get(), "block input");
      local.push_back(in.get());
    }
    for (const auto &op : b.ops) {
      verifyOp(*op);
      for (const auto &out : op->outputs) {
        declare(out.get(), "op result", op->name);
        local.push_back(out.get());
      }
    }
    for (const Value *out : b.outputs) {
      if (!out) {
        error("", "a block output is missing");
        continue;
      }
      if (!visible.count(out))
        error("", "block output '%" + out->name + "' is not defined in the block or around it");
      else if (out->type.isState() && !scopesOnly)
        error("", "block output '%" + out->name + "' is a state; states cannot be returned");
    }
    // Values of this block go out of scope, names included: sibling blocks
    // may reuse them (coremltools gives a while_loop's cond and body blocks
    // inputs of the same names).
    for (const Value *v : local) {
      visible.erase(v);
      auto it = names.find(v->name);
      if (it != names.end() && it->second == v)
        names.erase(it);
    }
  }

  void verifyOp(const Operation &op) {
    std::string opName = op.name.empty() ? op.type : op.name;
    if (op.name.empty() && !scopesOnly)
      error("", "a '" + op.type + "' op has no name");
    if (op.type == "const" && !scopesOnly) {
      const Constant *val = op.attribute("val");
      if (!val)
        error(opName, "const op has no 'val' attribute");
      if (op.outputs.size() != 1)
        error(opName, "const op has " + std::to_string(op.outputs.size()) + " results; expected 1");
      else if (val && val->type != op.outputs[0]->type)
        error(opName, "const value has type " + val->type.str() + " but its result is declared " +
                          op.outputs[0]->type.str());
    }
    std::set<std::string> params;
    for (const OpInput &in : op.inputs) {
      if (!params.insert(in.name).second && !scopesOnly)
        error(opName, "parameter '" + in.name + "' appears more than once");
      for (const Binding &b : in.bindings) {
        if (!b.value) {
          if (!b.constant)
            error(opName, "parameter '" + in.name + "' has an empty binding");
          continue;
        }
        const Value *v = b.value;
        if (!visible.count(v))
          error(opName, "parameter '" + in.name + "' uses '%" + v->name +
                            "' before its definition or outside its scope");
      }
    }
    for (const auto &nested : op.blocks)
      verifyBlock(*nested, /*isBody=*/false);
  }
};

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Compares one described feature with the value the function declares.
void checkFeature(Diagnostics &diags, const std::string &fn, const FeatureDescription &d,
                  const Value &v, const char *what) {
  auto err = [&](const std::string &m) {
    diags.push_back(Diagnostic{Diagnostic::Severity::Error, fn, "", m});
  };
  const FeatureType &ft = d.type;
  if (ft.kind != FeatureType::Kind::MultiArray && ft.kind != FeatureType::Kind::State)
    return;
  const Type &t = v.type.isState() ? v.type.elementType() : v.type;
  if (!t.isTensor())
    return;
  if (ft.dataType != ArrayDataType::Invalid) {
    std::optional<DType> dt = dtypeOfArrayDataType(ft.dataType);
    if (dt && *dt != t.dtype())
      err(std::string(what) + " '" + d.name + "' is described as " + std::string(dtypeName(*dt)) +
          " but the program declares " + std::string(dtypeName(t.dtype())));
  }
  auto shape = t.staticShape();
  if (!shape || ft.shape.empty() || ft.hasFlexibleShape())
    return;
  // A scalar is described with shape [1].
  std::vector<int64_t> want = shape->empty() ? std::vector<int64_t>{1} : *shape;
  if (ft.shape != want)
    err(std::string(what) + " '" + d.name + "' is described with shape " + shapeText(ft.shape) +
        " but the program declares " + t.str());
}

/// Checks that `described` names exactly `values`, in order, with matching types.
void checkFeatures(Diagnostics &diags, const std::string &fn,
                   const std::vector<FeatureDescription> &described,
                   const std::vector<const Value *> &values, const char *what) {
  auto err = [&](const std::string &m) {
    diags.push_back(Diagnostic{Diagnostic::Severity::Error, fn, "", m});
  };
  std::unordered_map<std::string, const Value *> byName;
  for (const Value *v : values)
    byName[v->name] = v;
  std::unordered_set<std::string> describedNames;
  for (const FeatureDescription &d : described) {
    describedNames.insert(d.name);
    auto it = byName.find(d.name);
    if (it == byName.end())
      err("the description lists " + std::string(what) + " '" + d.name +
          "' but the program has no such " + what);
    else
      checkFeature(diags, fn, d, *it->second, what);
  }
  for (const Value *v : values)
    if (!describedNames.count(v->name))
      err(std::string(what) + " '" + v->name + "' is missing from the model description");
}

} // namespace

namespace {

Diagnostics verifyFunctions(const Program &program, bool scopesOnly) {
  Diagnostics diags;
  ProgramVerifier verifier(diags, scopesOnly);
  std::set<std::string> seen;
  for (const auto &f : program.functions) {
    if (!seen.insert(f->name).second)
      diags.push_back(Diagnostic{Diagnostic::Severity::Error, f->name, "",
                                 "function '" + f->name + "' is defined more than once"});
    verifier.verifyFunction(*f);
  }
  return diags;
}

} // namespace

Diagnostics verifyProgram(const Program &program) {
  return verifyFunctions(program, /*scopesOnly=*/false);
}

Diagnostics verifyValueScopes(const Program &program) {
  return verifyFunctions(program, /*scopesOnly=*/true);
}

namespace {

/// Walks everything a writer writes, stopping at the first problem.
class WritableChecker {
public:
  std::string problem;

  void model(const Model &m) {
    description(m.description);
    if (m.program)
      program(*m.program);
  }

private:
  void fail(const std::string &where, const std::string &what) {
    if (problem.empty())
      problem = where.empty() ? what : where + ": " + what;
  }

  void text(std::string_view s, const std::string &where, const char *what) {
    if (!isUtf8(s))
      fail(where, std::string(what) + " is not UTF-8 text");
  }

  void type(const Type &t, const std::string &where) {
    if (t.isTensor()) {
      if (t.hasRank() && t.staticShape() && !t.numElements())
        fail(where, "the shape of " + t.str() + " has more elements than fit in int64");
      if (t.hasRank())
        for (const Dim &d : t.shape())
          text(d.symbol, where, "a dimension symbol");
      return;
    }
    if (t.kind() == Type::Kind::List)
      text(t.listLength().symbol, where, "a dimension symbol");
    for (const Type &e : t.elements())
      type(e, where);
  }

  void constant(const Constant &c, const std::string &where) {
    type(c.type, where);
    for (const std::string &s : c.strings)
      text(s, where, "a string constant");
    text(c.docString, where, "a doc string");
    for (const Constant &e : c.elements)
      constant(e, where);
    if (c.kind == Constant::Kind::Tensor && c.type.isTensor() && c.type.dtype() != DType::String)
      if (auto n = c.type.numElements())
        if (c.bytes.size() < storageBytes(c.type.dtype(), static_cast<uint64_t>(*n)))
          fail(where, "constant of type " + c.type.str() + " holds " +
                          std::to_string(c.bytes.size()) + " bytes, fewer than its type needs");
    if (c.kind == Constant::Kind::Blob) {
      text(c.blob.fileName, where, "a weight file name");
      if (c.blob.store && c.type.isTensor())
        if (auto n = c.type.numElements()) {
          uint64_t need = storageBytes(c.type.dtype(), static_cast<uint64_t>(*n));
          std::span<const uint8_t> data = c.blob.store->blobData(c.blob.offset, c.type.dtype());
          if (data.size() < need)
            fail(where, "blob at offset " + std::to_string(c.blob.offset) + " of " +
                            c.blob.store->path() + " holds " + std::to_string(data.size()) +
                            " bytes, fewer than the " + std::to_string(need) + " that " +
                            c.type.str() + " needs");
        }
    }
  }

  void attributes(const AttributeMap &attrs, const std::string &where) {
    for (const auto &[key, c] : attrs) {
      text(key, where, "an attribute name");
      if (c)
        constant(*c, where + ": attribute '" + key + "'");
    }
  }

  void block(const Block &b, const std::string &where, int depth) {
    if (depth > kMaxBlockNesting) {
      fail(where, "blocks nested deeper than " + std::to_string(kMaxBlockNesting) + " levels");
      return;
    }
    attributes(b.attributes, where);
    for (const auto &in : b.inputs) {
      text(in->name, where, "a block input name");
      type(in->type, where + ": block input");
    }
    for (const auto &op : b.ops) {
      std::string at = where + ": op '" + op->name + "'";
      text(op->name, where, "an op name");
      text(op->type, at, "the op type");
      attributes(op->attributes, at);
      for (const OpInput &in : op->inputs) {
        text(in.name, at, "a parameter name");
        for (const Binding &bd : in.bindings)
          if (bd.constant)
            constant(*bd.constant, at + ": parameter '" + in.name + "'");
      }
      for (const auto &out : op->outputs) {
        text(out->name, at, "a result name");
        type(out->type, at + ": result");
      }
      for (const auto &nested : op->blocks)
        block(*nested, at, depth + 1);
      if (!problem.empty())
        return;
    }
  }

  void program(const Program &p) {
    Diagnostics d = verifyValueScopes(p);
    for (const Diagnostic &x : d)
      if (x.severity == Diagnostic::Severity::Error) {
        fail("", x.str().substr(7)); // without "error: "
        return;
      }
    text(p.docString, "program", "the doc string");
    attributes(p.attributes, "program");
    for (const auto &f : p.functions) {
      std::string where = "function '" + f->name + "'";
      text(f->name, "", "a function name");
      text(f->opset, where, "the opset name");
      attributes(f->attributes, where);
      for (const auto &in : f->inputs) {
        text(in->name, where, "an input name");
        type(in->type, where + ": input '" + in->name + "'");
      }
      block(*f->body, where, 0);
      for (const auto &[key, b] : f->otherSpecializations) {
        text(key, where, "a specialization key");
        if (b)
          block(*b, where, 0);
      }
    }
  }

  void features(const std::vector<FeatureDescription> &fs, const char *what) {
    for (const FeatureDescription &f : fs) {
      text(f.name, "description", what);
      text(f.shortDescription, "description", "a feature description");
    }
  }

  void description(const ModelDescription &d) {
    features(d.inputs, "an input name");
    features(d.outputs, "an output name");
    features(d.states, "a state name");
    features(d.trainingInputs, "a training input name");
    text(d.predictedFeatureName, "description", "predictedFeatureName");
    text(d.predictedProbabilitiesName, "description", "predictedProbabilitiesName");
    text(d.defaultFunctionName, "description", "defaultFunctionName");
    for (const FunctionDescription &f : d.functions) {
      text(f.name, "description", "a function name");
      features(f.inputs, "an input name");
      features(f.outputs, "an output name");
      features(f.states, "a state name");
    }
    const Metadata &m = d.metadata;
    for (const std::string *s : {&m.shortDescription, &m.versionString, &m.author, &m.license})
      text(*s, "metadata", "a metadata string");
    for (const auto &[k, v] : m.userDefined) {
      text(k, "metadata", "a user-defined metadata key");
      text(v, "metadata", "a user-defined metadata value");
    }
  }
};

} // namespace

std::string unwritableReason(const Model &model) {
  WritableChecker checker;
  checker.model(model);
  return checker.problem;
}

Diagnostics verifyModel(const Model &model) {
  if (!model.program)
    return {Diagnostic{Diagnostic::Severity::Error, "", "", "the model has no ML program"}};
  Diagnostics diags = verifyProgram(*model.program);
  auto err = [&](const std::string &fn, const std::string &m) {
    diags.push_back(Diagnostic{Diagnostic::Severity::Error, fn, "", m});
  };
  const ModelDescription &desc = model.description;
  int maxOpset = 0;
  for (const auto &f : model.program->functions)
    maxOpset = std::max(maxOpset, opsetNumber(f->opset));
  if (maxOpset >= 5 && model.specificationVersion < specVersionForOpset(maxOpset))
    err("", "specificationVersion " + std::to_string(model.specificationVersion) +
                " is older than opset CoreML" + std::to_string(maxOpset) + " needs (" +
                std::to_string(specVersionForOpset(maxOpset)) + ")");
  if (!desc.defaultFunctionName.empty() && !model.program->findFunction(desc.defaultFunctionName))
    err("", "defaultFunctionName '" + desc.defaultFunctionName + "' names no function");
  if (model.program->functions.size() > 1 && desc.functions.empty())
    err("", "the program has " + std::to_string(model.program->functions.size()) +
                " functions but the description describes none of them");
  for (const FunctionDescription &fd : desc.functions)
    if (!model.program->findFunction(fd.name))
      err("", "the description describes function '" + fd.name + "', which the program lacks");

  for (const auto &f : model.program->functions) {
    bool described = desc.functions.empty();
    for (const FunctionDescription &fd : desc.functions)
      described = described || fd.name == f->name;
    if (!described) {
      err(f->name, "function '" + f->name + "' is missing from the model description");
      continue;
    }
    FunctionDescription fd = desc.describe(f->name);
    std::vector<const Value *> inputs, states, outputs;
    for (const auto &in : f->inputs)
      (in->type.isState() ? states : inputs).push_back(in.get());
    for (const Value *out : f->body->outputs)
      if (out)
        outputs.push_back(out);
    checkFeatures(diags, f->name, fd.inputs, inputs, "input");
    checkFeatures(diags, f->name, fd.states, states, "state");
    checkFeatures(diags, f->name, fd.outputs, outputs, "output");
  }
  return diags;
}

} // namespace anefit
