//===- Bindings.h - Shared pieces of the anefit._core module ----*- C++ -*-===//
//
// The extension is split by area (models, checks, runs); each area adds its
// classes and functions to the module. A loaded model is shared: every object
// that views into it (a Function, a Report, a Session) holds the model, so
// the model and its memory-mapped weights live as long as any of them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"

#include <nanobind/nanobind.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

namespace anefit::ane {
struct CheckReport;
struct CheckOptions;
} // namespace anefit::ane

namespace anefit::python {

namespace nb = nanobind;

/// A model as Python sees it.
struct PyModel {
  std::shared_ptr<const Model> model;
  /// False when loaded without its weight files (checks only).
  bool weightsOpen = true;
  /// A .pte delegate's compile specs (compute_units, ...); empty otherwise.
  std::map<std::string, std::string> compileSpecs;
};

/// Loads the model at `path` ("model.pte#1" selects a delegate) without the
/// GIL. Throws InputError.
PyModel loadPyModel(const std::string &path, bool openWeights);

/// A path from a str or os.PathLike, kept as text ("x.pte#1" stays whole).
std::string pathText(const std::filesystem::path &path);

/// The function of `m` named `name`, or its default function for an empty
/// name. Throws InputError naming the functions when there is none such.
const Function &functionOf(const PyModel &m, const std::string &name);

/// A Report object over `report`, made by checking `model` (whose ops the
/// report points at, so the Report keeps it alive).
nb::object reportObject(ane::CheckReport report, std::shared_ptr<const Model> model);

/// `chip`, `os` and `compute_units` of check and fix into `options`; throws
/// InputError naming the argument for an unknown spelling.
void applyTarget(const std::string &chip, const std::string &os, const std::string &computeUnits,
                 ane::CheckOptions &options);

void bindModel(nb::module_ &m);
void bindCheck(nb::module_ &m);
void bindRun(nb::module_ &m);
void bindTransform(nb::module_ &m);

} // namespace anefit::python
