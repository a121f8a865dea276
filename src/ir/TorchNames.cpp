//===- TorchNames.cpp - PyTorch node names carried by op names ------------===//
#include "ir/TorchNames.h"

#include "support/DType.h"
#include "support/Text.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace anefit {
namespace {

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// Removes one trailing "_cast_<dtype>", "_to_<dtype>" or "_cast" from `name`.
bool stripCast(std::string &name) {
  for (std::string_view marker : {"_cast_", "_to_"}) {
    size_t at = name.rfind(marker);
    if (at == std::string::npos || at == 0)
      continue;
    if (dtypeFromName(std::string_view(name).substr(at + marker.size()))) {
      name.resize(at);
      return true;
    }
  }
  if (endsWith(name, "_cast")) {
    name.resize(name.size() - 5);
    return true;
  }
  return false;
}

} // namespace

std::string torchNodeOf(std::string_view opName) {
  static constexpr std::string_view kPrefixes[] = {"aten_", "aten::", "executorch_",
                                                   "quantized_decomposed_"};
  if (std::none_of(std::begin(kPrefixes), std::end(kPrefixes),
                   [&](std::string_view p) { return opName.rfind(p, 0) == 0; }))
    return {};
  std::string node(opName);
  while (stripCast(node)) {
  }
  return node;
}

std::string atenOpOf(std::string_view opName) {
  std::string name = asciiLower(torchNodeOf(opName));
  if (name.rfind("aten_", 0) != 0)
    return "";
  // Uniquing counters ("_3"), and casts behind them.
  for (bool changed = true; changed;) {
    changed = stripCast(name);
    size_t u = name.rfind('_');
    if (u != std::string::npos && u + 1 < name.size() &&
        std::all_of(name.begin() + u + 1, name.end(), [](char c) { return std::isdigit(c); })) {
      name.resize(u);
      changed = true;
    }
  }
  std::string body = name.substr(5);
  // Overload names of aten ops, longest first (lower case, as ExecuTorch compares them).
  static constexpr std::array<std::string_view, 21> kOverloads = {
      "scalar_tensor", "tensor_tensor", "tensor_scalar",
      "dim_intlist",   "tensor_mode",   "scalar_mode",
      "using_ints",    "dim_int",       "tensor_out",
      "scalar_out",    "default",       "tensor",
      "scalar",        "intlist",       "int",
      "dim",           "self",          "src",
      "value",         "str",           "out"};
  for (std::string_view ov : kOverloads) {
    std::string suffix = "_" + std::string(ov);
    if (body.size() > suffix.size() && body.ends_with(suffix))
      return "aten." + body.substr(0, body.size() - suffix.size()) + "." + std::string(ov);
  }
  return "aten." + body + ".default";
}

} // namespace anefit
