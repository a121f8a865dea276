//===- Internal.h - What the backend and the program runner share -*- C++ -*-===//
#pragma once

#include "support/DType.h"

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <optional>
#include <string>

namespace anefit::executorch_backend {

/// anefit's element type of an ExecuTorch scalar type; nullopt for one a
/// Core ML delegate cannot take.
std::optional<DType> dtypeOf(executorch::aten::ScalarType t);
/// The inverse of dtypeOf.
std::optional<executorch::aten::ScalarType> scalarTypeOf(DType t);
/// Writes `text` into the caller's `message` buffer (truncated to fit,
/// terminated) and returns 2, the C interface's failure.
int failWith(const std::string &text, char *message, size_t messageSize);
/// "ExecuTorch error 0x20 (Error::NotFound)".
std::string errorText(executorch::runtime::Error e);
/// The last error the backend reported on this thread (ExecuTorch's error
/// codes carry no text), for the runner's message.
extern thread_local std::string lastError;

} // namespace anefit::executorch_backend
