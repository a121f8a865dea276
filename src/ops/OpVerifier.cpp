//===- OpVerifier.cpp - Checks ops against the registry -------------------===//
//
// The per-op half of program verification: the IR verifier checks SSA and
// structure, this checks what only the op table knows.
//
//===----------------------------------------------------------------------===//
#include "ops/OpVerifier.h"
#include "ops/OpRegistry.h"
#include "ops/TypeInference.h"

#include <algorithm>
#include <map>

namespace anefit {

namespace {

/// The iOS version whose ops a function may use; functions with an opset we
/// do not recognise are checked against the newest table.
int iosOf(const Function &fn) {
  int ios = iosVersionOfOpset(fn.opset);
  return ios ? ios : 18;
}

bool isConstantBinding(const Binding &b) {
  if (!b.isValue())
    return b.constant != nullptr;
  const Operation *def = b.value->definingOp;
  // Outputs of constexpr_* ops are constants materialised at load time.
  return def && opHasTrait(def->type, OpTrait::ConstLike);
}

const Type *bindingType(const Binding &b) {
  if (b.isValue())
    return &b.value->type;
  return b.constant ? &b.constant->type : nullptr;
}

/// Const-like ops before iOS18 (const, and constexpr_* until iOS18 made
/// their parameters inputs) carry their parameters as attributes.
bool paramsAreAttributes(const OpDef &def) { return def.has(OpTrait::ConstLike) && def.opset < 18; }

class OpChecker {
public:
  OpChecker(const Function &fn, Diagnostics &out) : fn(fn), out(out), ios(iosOf(fn)) {}

  /// A state may only be bound to a State parameter of a state op (unknown
  /// ops included).
  void checkStateUses(const Operation &op) {
    const OpDef *def = findAnyOp(op.type);
    for (const OpInput &in : op.inputs) {
      const ParamSpec *p = def ? def->param(in.name) : nullptr;
      if (p && p->kind == ParamKind::State)
        continue;
      for (const Binding &b : in.bindings)
        if (b.value && b.value->type.isState())
          error(op, "state '%" + b.value->name + "' is used by '" + op.type + "' (parameter '" +
                        in.name + "'); only " +
                        opNamesWithTrait(OpTrait::StateRead | OpTrait::StateWrite) +
                        " may use a state");
    }
  }

  void check(const Operation &op) {
    checkStateUses(op);
    const OpDef *def = findOp(op.type, ios);
    if (!def) {
      if (const OpDef *later = findOp(op.type, 18)) {
        report(op, Diagnostic::Severity::Error,
               "op '" + op.type + "' needs iOS" + std::to_string(later->opset) +
                   " but the function's opset is " + fn.opset);
        return;
      }
      report(op, Diagnostic::Severity::Warning,
             "unknown op '" + op.type + "' loaded as opaque with its declared types");
      return;
    }
    // The coreml dialect and proto-only ops carry states, which need iOS18.
    if (def->opset == 0 && ios < 18) {
      error(op, "op '" + op.type + "' needs iOS18 but the function's opset is " + fn.opset);
      return;
    }
    checkParams(op, *def);
    checkOutputs(op);
  }

private:
  const Function &fn;
  Diagnostics &out;
  int ios;

  void report(const Operation &op, Diagnostic::Severity sev, std::string message) {
    Diagnostic d;
    d.severity = sev;
    d.function = fn.name;
    d.op = op.name;
    d.message = std::move(message);
    out.push_back(std::move(d));
  }
  void error(const Operation &op, std::string message) {
    report(op, Diagnostic::Severity::Error, std::move(message));
  }

  void checkParams(const Operation &op, const OpDef &def) {
    bool viaAttributes = paramsAreAttributes(def);
    for (const OpInput &in : op.inputs)
      if (!def.param(in.name))
        error(op, op.type + ": unknown parameter '" + in.name + "'");
    std::map<std::string_view, std::pair<DType, std::string_view>> domainDTypes;
    for (const ParamSpec &p : def.params) {
      const OpInput *in = op.input(p.name);
      bool asAttribute = !in && op.attribute(p.name) != nullptr;
      if ((!in || in->bindings.empty()) && !asAttribute) {
        if (!p.optional && !(viaAttributes && p.kind == ParamKind::Attribute))
          error(op, op.type + ": missing required parameter '" + std::string(p.name) + "'");
        continue;
      }
      if (asAttribute && !viaAttributes && p.kind != ParamKind::Attribute)
        error(op, op.type + ": parameter '" + std::string(p.name) +
                      "' is an attribute, expected an input");
      std::vector<const Type *> types;
      if (asAttribute) {
        types.push_back(&op.attribute(p.name)->type);
      } else {
        if (!p.variadic && in->bindings.size() != 1)
          error(op, op.type + ": parameter '" + std::string(p.name) + "' has " +
                        std::to_string(in->bindings.size()) + " bindings, expected 1");
        for (const Binding &b : in->bindings) {
          if (p.constOnly && !isConstantBinding(b))
            error(op, op.type + ": parameter '" + std::string(p.name) + "' must be a constant");
          if (const Type *t = bindingType(b))
            types.push_back(t);
        }
      }
      for (const Type *t : types)
        checkType(op, p, *t, domainDTypes);
    }
  }

  void checkType(const Operation &op, const ParamSpec &p, const Type &t,
                 std::map<std::string_view, std::pair<DType, std::string_view>> &domains) {
    std::string where = op.type + ": parameter '" + std::string(p.name) + "'";
    if (p.kind == ParamKind::State) {
      if (!t.isState())
        error(op, where + " is a " + t.kindStr() + ", expected a state");
      return;
    }
    if (p.kind != ParamKind::Tensor || t.isState()) // a state here: checkStateUses
      return;
    if (!t.isTensor()) {
      error(op, where + " is a " + t.kindStr() + ", expected a tensor");
      return;
    }
    if (!p.allows(t.dtype())) {
      error(op, where + " has dtype " + std::string(dtypeName(t.dtype())) +
                    ", allowed: " + std::string(p.dtypes));
      return;
    }
    if (p.domain.empty())
      return;
    auto [it, fresh] = domains.emplace(p.domain, std::make_pair(t.dtype(), p.name));
    if (!fresh && it->second.first != t.dtype())
      error(op, where + " has dtype " + std::string(dtypeName(t.dtype())) + " but '" +
                    std::string(it->second.second) + "' has " +
                    std::string(dtypeName(it->second.first)) + " (both are type " +
                    std::string(p.domain) + ")");
  }

  void checkOutputs(const Operation &op) {
    std::string err;
    auto inferred = inferOutputTypes(op, ios, err);
    if (!inferred) {
      if (!err.empty())
        error(op, err);
      return;
    }
    if (inferred->size() != op.outputs.size()) {
      error(op, op.type + ": declares " + std::to_string(op.outputs.size()) +
                    " outputs, inferred " + std::to_string(inferred->size()));
      return;
    }
    for (size_t i = 0; i < inferred->size(); ++i) {
      const Value &v = *op.outputs[i];
      if (!typesCompatible(v.type, (*inferred)[i]))
        error(op, op.type + ": output '" + v.name + "' declared " + v.type.str() +
                      " but inferred " + (*inferred)[i].str());
    }
  }
};

} // namespace

Diagnostics verifyOps(const Program &program) {
  Diagnostics out;
  for (const auto &fn : program.functions) {
    OpChecker checker(*fn, out);
    walk(static_cast<const Block &>(*fn->body), [&](const Operation &op) { checker.check(op); });
  }
  return out;
}

Diagnostics verifyStateUses(const Program &program) {
  Diagnostics out;
  for (const auto &fn : program.functions) {
    OpChecker checker(*fn, out);
    walk(static_cast<const Block &>(*fn->body),
         [&](const Operation &op) { checker.checkStateUses(op); });
  }
  return out;
}

void canonicalizeInputOrder(Program &program) {
  for (auto &fn : program.functions) {
    int ios = iosOf(*fn);
    walk(*fn->body, [&](Operation &op) {
      const OpDef *def = findOp(op.type, ios);
      if (!def)
        return;
      auto rank = [&](const OpInput &in) {
        for (size_t i = 0; i < def->params.size(); ++i)
          if (def->params[i].name == in.name)
            return i;
        return def->params.size();
      };
      std::stable_sort(op.inputs.begin(), op.inputs.end(),
                       [&](const OpInput &a, const OpInput &b) { return rank(a) < rank(b); });
    });
  }
}

} // namespace anefit
