//===- OpDocs.cpp - The op table as a reference page ----------------------===//
#include "ops/OpDocs.h"
#include "ops/OpRegistry.h"

#include <algorithm>
#include <map>
#include <vector>

namespace anefit {

namespace {

std::string opsetLabel(const OpDef &def) {
  if (def.opset != 0)
    return "iOS" + std::to_string(def.opset);
  return def.name == "write_state" ? "proto" : "coreml";
}

/// "x: fp16|fp32 (T)", "const axis: int32", "[const pad_type: string = valid]".
std::string paramText(const ParamSpec &p) {
  std::string s;
  if (p.constOnly && p.kind != ParamKind::Attribute)
    s += "const ";
  s += "`" + std::string(p.name) + "`";
  switch (p.kind) {
  case ParamKind::State:
    s += ": state";
    break;
  case ParamKind::List:
    s += ": list";
    break;
  case ParamKind::Any:
    s += ": any";
    break;
  case ParamKind::Attribute:
    s += ": attribute";
    break;
  case ParamKind::Tensor:
    if (!p.dtypes.empty())
      s += ": " + std::string(p.dtypes);
    if (!p.domain.empty())
      s += " (" + std::string(p.domain) + ")";
    break;
  }
  if (p.variadic)
    s += " ...";
  if (!p.defaultValue.empty())
    s += " = " + std::string(p.defaultValue);
  if (p.optional)
    s = "[" + s + "]";
  // Keep table cells intact.
  std::string out;
  for (char c : s)
    out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

} // namespace

std::string opsMarkdown() {
  std::string md;
  md += "# MIL ops known to anefit\n\n";
  md += "Generated from `src/ops/Ops.def` by the op library (`anefit-opt --list-ops`); do not "
        "edit. Regenerate with `scripts/generated_docs.sh`; the test `docs` fails when this page "
        "and the table disagree.\n\n";
  md += "One row per op and opset in which it was introduced or changed; a program uses the "
        "newest row whose opset is not after its own (CoreML5 = iOS15 ... CoreML8 = iOS18; "
        "CoreML9 adds no ops). `coreml` is the coreml dialect, `proto` an op that exists only in "
        "serialized programs.\n\n";
  md +=
      "Parameters: `[...]` optional (with its default), `const` must be a compile-time "
      "constant, `...` variadic, `(T)` a type domain: parameters sharing one must share a "
      "dtype. Inference `None` means the op keeps its declared output types. Traits (what kind of "
      "op it is, read by the checker, the passes and the partitioner) are explained at the top "
      "of `Ops.def`.\n\n";

  std::vector<const OpDef *> rows;
  for (const OpDef &def : allOps())
    rows.push_back(&def);
  std::stable_sort(rows.begin(), rows.end(), [](const OpDef *a, const OpDef *b) {
    if (a->name != b->name)
      return a->name < b->name;
    return (a->opset == 0 ? 100 : a->opset) < (b->opset == 0 ? 100 : b->opset);
  });

  std::map<std::string, int> perOpset;
  int withRule = 0;
  for (const OpDef *d : rows) {
    ++perOpset[opsetLabel(*d)];
    withRule += d->infer != nullptr;
  }
  md += "| opset | rows |\n| --- | --- |\n";
  for (const char *label : {"iOS15", "iOS16", "iOS17", "iOS18", "coreml", "proto"})
    md += "| " + std::string(label) + " | " + std::to_string(perOpset[label]) + " |\n";
  md += "\n" + std::to_string(rows.size()) + " rows, " + std::to_string(withRule) +
        " with an inference rule.\n\n";

  md += "| op | opset | inference | traits | parameters |\n| --- | --- | --- | --- | --- |\n";
  for (const OpDef *d : rows) {
    std::string params;
    for (const ParamSpec &p : d->params)
      params += (params.empty() ? "" : ", ") + paramText(p);
    std::string traits;
    for (auto [t, name] : {std::pair{OpTrait::ConstLike, "ConstLike"},
                           {OpTrait::StateRead, "StateRead"},
                           {OpTrait::StateWrite, "StateWrite"},
                           {OpTrait::View, "View"},
                           {OpTrait::DataMovement, "DataMovement"}})
      if (d->has(t))
        traits += (traits.empty() ? "" : ", ") + std::string(name);
    md += "| `" + std::string(d->name) + "` | " + opsetLabel(*d) + " | " +
          std::string(d->inferName) + " | " + traits + " | " + params + " |\n";
  }
  return md;
}

} // namespace anefit
