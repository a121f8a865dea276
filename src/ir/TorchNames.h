//===- TorchNames.h - PyTorch node names carried by op names ----*- C++ -*-===//
//
// coremltools names each op after the PyTorch node it was converted from
// ("aten_index_put_default_3") and appends suffixes of its own: dtype casts
// ("_cast_fp16", "_to_int32", a bare "_cast"). The checker reports the node
// behind a finding; split turns nodes into the aten op names ExecuTorch's
// CoreMLPartitioner takes ("aten.index_put.default"). Both read names here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

namespace anefit {

/// The PyTorch node an op name carries, coremltools' suffixes removed:
/// "aten_mul_tensor_7_cast_fp16" -> "aten_mul_tensor_7"; empty when the
/// name carries no node (no "aten_", "aten::", "executorch_" or
/// "quantized_decomposed_" prefix).
std::string torchNodeOf(std::string_view opName);

/// The aten op an op name carries, in ExecuTorch's spelling:
/// "aten_index_put_default_3" -> "aten.index_put.default",
/// "aten_prod_dim_int_0" -> "aten.prod.dim_int"; empty if the name carries
/// no aten node.
std::string atenOpOf(std::string_view opName);

} // namespace anefit
