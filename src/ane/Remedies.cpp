//===- Remedies.cpp - Export-time remedies for findings ------------------===//
#include "ane/Remedies.h"

namespace anefit::ane {

std::string_view remedyWhereName(RemedyWhere w) {
  switch (w) {
  case RemedyWhere::ExportLlm:
    return "export_llm";
  case RemedyWhere::Partitioner:
    return "CoreMLPartitioner";
  case RemedyWhere::CompileSpec:
    return "CoreMLBackend.generate_compile_specs";
  case RemedyWhere::ModelSource:
    return "model source";
  }
  return "?";
}

std::span<const Remedy> allRemedies() {
  static const Remedy rows[] = {
#define REMEDY(Rule, Where, Match, Setting, What, Evidence)                                        \
  {RuleId::Rule, RemedyWhere::Where, Match, Setting, What, Evidence},
#include "ane/Remedies.def"
  };
  return rows;
}

std::vector<const Remedy *> remediesFor(const Finding &f) {
  std::vector<const Remedy *> out;
  for (const Remedy &r : allRemedies())
    if (r.rule == f.rule && (r.match.empty() || f.torchNode.find(r.match) != std::string::npos))
      out.push_back(&r);
  return out;
}

std::vector<const Remedy *> remediesFor(RuleId rule) {
  std::vector<const Remedy *> out;
  for (const Remedy &r : allRemedies())
    if (r.rule == rule)
      out.push_back(&r);
  return out;
}

std::string stateRemedyText() {
  for (const Remedy *r : remediesFor(RuleId::StateCount))
    if (r->where == RemedyWhere::Partitioner)
      return "Re-export with " + std::string(r->setting) + ": it " + std::string(r->what) +
             ", and `anefit fix` then keeps the delegate's interface.";
  return "";
}

} // namespace anefit::ane
