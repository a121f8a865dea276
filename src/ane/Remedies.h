//===- Remedies.h - Export-time remedies for findings ------------*- C++ -*-===//
//
// The rows of Remedies.def: what removes a finding at export time, in the
// terms of the tool that made the model (ExecuTorch's export_llm config keys,
// CoreMLPartitioner arguments, the model source). Reports name them for
// models read from an ExecuTorch .pte.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/AneRules.h"
#include "ane/Checker.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::ane {

/// Where a remedy is applied.
enum class RemedyWhere : uint8_t {
  ExportLlm,   ///< a key of ExecuTorch's export_llm config
  Partitioner, ///< an argument of ExecuTorch's CoreMLPartitioner
  CompileSpec, ///< an argument of CoreMLBackend.generate_compile_specs
  ModelSource, ///< a pattern in the PyTorch model
};
/// "export_llm", "CoreMLPartitioner", "CoreMLBackend.generate_compile_specs",
/// "model source".
std::string_view remedyWhereName(RemedyWhere w);

struct Remedy {
  RuleId rule;
  RemedyWhere where;
  std::string_view match;   ///< torch-node substring the finding must have; empty: any
  std::string_view setting; ///< what to write
  std::string_view what;    ///< what it changes (and what does not work)
  std::string_view evidence;
};

/// Every row of Remedies.def, in table order.
std::span<const Remedy> allRemedies();

/// The remedies that apply to finding `f`, in table order.
std::vector<const Remedy *> remediesFor(const Finding &f);

/// The remedies of `rule` for any finding (match ignored), in table order.
std::vector<const Remedy *> remediesFor(RuleId rule);

/// A keyword argument a remedy sets: `name=value`, the value as the user
/// writes it in Python ("False", "[\"aten.embedding.default\"]",
/// "ct.ComputeUnit.CPU_AND_NE").
struct RemedyArgument {
  std::string_view name;
  std::string_view value;
};

/// The keyword arguments of a Partitioner remedy ("CoreMLPartitioner(a=1,
/// b=[2, 3])": a and b) or a CompileSpec remedy ("compute_unit=..."), in
/// order; empty for other remedies. The one reader of those settings.
std::vector<RemedyArgument> remedyArguments(const Remedy &r);

/// One line for `fix` refusing a rewrite that moves Core ML states of an
/// ExecuTorch program: the export-time setting that leaves none.
std::string stateRemedyText();

} // namespace anefit::ane
