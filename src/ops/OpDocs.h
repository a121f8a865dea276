//===- OpDocs.h - The op table as a reference page -------------*- C++ -*-===//
//
// Renders the op registry as markdown; committed as docs/ops.md and checked
// for staleness by a unit test.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace anefit {

/// docs/ops.md: every row of the op table with its parameters and inference rule.
std::string opsMarkdown();

} // namespace anefit
