//===- Requantize.h - The forms per-block weights are requantized to -*- C++ -*-===//
//
// The rows of RequantizeForms.def, for the fix driver, the CLI and Python
// to list and validate `--requantize` values from one table.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace anefit {

struct RequantizeForm {
  std::string_view name;
  bool lossy;
  std::string_view help;
};

/// Every form, in table order.
std::span<const RequantizeForm> requantizeForms();

/// The form named `name`; null if none.
const RequantizeForm *findRequantizeForm(std::string_view name);

/// The names joined for messages: "fp16, c8w, ..., lut8 or auto" (or, with
/// other separators, "fp16|c8w|...|auto").
std::string requantizeFormNames(std::string_view sep = ", ", std::string_view last = " or ");

} // namespace anefit
