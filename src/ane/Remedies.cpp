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

namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ')
    s.remove_suffix(1);
  return s;
}

/// "a=1, b=[2, 3]" as its arguments: split at the commas outside brackets
/// and quotes, each at its first '='.
std::vector<RemedyArgument> keywordArguments(std::string_view text) {
  std::vector<RemedyArgument> out;
  auto add = [&](std::string_view item) {
    item = trimmed(item);
    size_t eq = item.find('=');
    if (!item.empty() && eq != std::string_view::npos)
      out.push_back({trimmed(item.substr(0, eq)), trimmed(item.substr(eq + 1))});
  };
  int depth = 0;
  char quote = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '(' || c == '{') {
      ++depth;
    } else if (c == ']' || c == ')' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      add(text.substr(start, i - start));
      start = i + 1;
    }
  }
  add(text.substr(start));
  return out;
}

} // namespace

std::vector<RemedyArgument> remedyArguments(const Remedy &r) {
  std::string_view setting = r.setting;
  if (r.where == RemedyWhere::CompileSpec)
    return keywordArguments(setting);
  constexpr std::string_view kCall = "CoreMLPartitioner(";
  if (r.where == RemedyWhere::Partitioner && setting.starts_with(kCall) && setting.ends_with(")"))
    return keywordArguments(setting.substr(kCall.size(), setting.size() - kCall.size() - 1));
  return {};
}

std::string stateRemedyText() {
  for (const Remedy *r : remediesFor(RuleId::StateCount))
    if (r->where == RemedyWhere::Partitioner)
      return "Re-export with " + std::string(r->setting) + ": it " + std::string(r->what) +
             ", and `anefit fix` then keeps the delegate's interface.";
  return "";
}

} // namespace anefit::ane
