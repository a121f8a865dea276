//===- PassImpl.h - What pass implementations need -------------*- C++ -*-===//
//
// Declares the factory of every pass in Passes.def (create<Id>Pass), which
// each pass's .cpp defines and the registry calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "transforms/Pass.h"

#include <memory>

namespace anefit {

#define PASS(Id, CliName, Summary, Description, Before, After)                                     \
  std::unique_ptr<Pass> create##Id##Pass(const PassOptions &options);
#include "transforms/Passes.def"

} // namespace anefit
