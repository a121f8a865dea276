//===- PlanJson.h - The split plan as JSON and as an ExecuTorch snippet -*- C++ -*-===//
//
// What `anefit split` prints and writes: the plan in the documented JSON
// schema "anefit.split/1" (docs/split.md), the CoreMLPartitioner snippet
// with skip_ops_for_coreml_delegation, and the file names of emitted region
// models. The HTML report embeds the same JSON, so it lives in the library.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/Weights.h"
#include "partition/Partitioner.h"

#include <string>
#include <utility>
#include <vector>

namespace anefit::partition {

/// The JSON schema id written into every plan.
inline constexpr std::string_view kPlanSchema = "anefit.split/1";

/// "<function>_region<k>_<ane|cpu>.mlpackage", the name of an emitted region model.
std::string regionFileName(const FunctionPlan &fp, const Region &r);

/// The plan as "anefit.split/1" JSON (pretty-printed when `indent` >= 0,
/// compact with -1). With `withFiles`, each region names its model file.
std::string renderPlanJson(const Plan &plan, const CostModel &cost, bool withFiles = false,
                           int indent = 2);

/// The weights a region's ops read, stored and dense (ops/Weights.h).
WeightCount regionWeights(const Region &r);

/// Python for ExecuTorch's CoreMLPartitioner keeping the plan's skip ops out
/// of the Core ML delegate, each commented with the rules that blamed it.
std::string skipListSnippet(const Plan &plan);

/// The keyword arguments of CoreMLPartitioner that skipListSnippet writes,
/// as (name, value as Python source): skip_ops_for_coreml_delegation (always;
/// a list literal of the skip ops), then every partitioner argument of the
/// plan. Python's anefit.executorch.partitioner_kwargs is this, evaluated.
std::vector<std::pair<std::string, std::string>> partitionerKeywords(const Plan &plan);

} // namespace anefit::partition
