//===- CoreMLBackend.h - anefit as ExecuTorch's Core ML backend -*- C++ -*-===//
//
// A shared library that implements ExecuTorch's backend interface with the
// reference interpreter and registers it under "CoreMLBackend", the name the
// Core ML delegates of a .pte ask for. Loaded into a process that holds
// ExecuTorch's runtime (libexecutorch.so: the Python package's runtime, its
// LLM runner, or a C++ program), it makes that runtime execute Core ML
// programs on any CPU: ExecuTorch loads the program, plans its memory, runs
// its other ops and writes buffers back; each Core ML delegate call runs here.
//
//   init     reads the payload (readCoreMLPayload: weights read where the
//            runtime holds them, never copied) and prepares the interpreter;
//            a payload it cannot run fails here with one line in ExecuTorch's
//            log and an ExecuTorch error code
//   execute  binds the delegate's arguments by metadata.json's names (inputs,
//            then outputs), converting dtypes at the boundary as Core ML's
//            backend does (int64 -> int32, fp32 <-> fp16); keeps Core ML
//            states per delegate; with an event tracer, one profiling event
//            per op under its "<MIL output>:<MIL op>" debug key
//   destroy  frees the delegate and releases the payload
//
// The functions below are the library's C interface (the Python package
// calls them through ctypes).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/ExecuTorchAbi.h"

#include <cstddef>
#include <cstdint>

#define ANEFIT_EXECUTORCH_API extern "C" __attribute__((visibility("default")))

/// Registers the backend under "CoreMLBackend" in the ExecuTorch runtime this
/// library is linked to, or updates its options when it is registered
/// already. `precision` is "fp32" or "fp16" (Precision of the interpreter:
/// fp16 rounds every float result as the Neural Engine's pipeline does);
/// `threads` the interpreter's threads (0: every core); `exactProducts`
/// non-zero: RunOptions::exactProducts (products fp32-grade, no grid for
/// speed; fix proves fp16 mode with it). Returns 0 when the
/// backend is registered (now or before) and writes nothing; otherwise 2 and
/// one line into `message` (a precision not known, another backend holding
/// the name, the registry full).
ANEFIT_EXECUTORCH_API int anefit_executorch_register(const char *precision, int threads,
                                                     int exactProducts, char *message,
                                                     size_t messageSize);

/// The ExecuTorch version whose headers and runtime the library was built
/// against ("1.5.1").
ANEFIT_EXECUTORCH_API const char *anefit_executorch_version();

/// Runs `method` of the program at `program` for `steps` steps in ExecuTorch's
/// runtime (its Module, the program memory-mapped), the Core ML delegates on
/// this backend (registered with `precision`, `threads` and `exactProducts`
/// first): each step
/// asks `input` for every method input and hands every tensor output to
/// `output`. Returns 0; 1 when `input` stopped the run; 2 with one line in
/// `message` when ExecuTorch or the backend failed (the error code's name and
/// the backend's own message).
ANEFIT_EXECUTORCH_API int anefit_executorch_run(const char *program, const char *method,
                                                int64_t steps, const char *precision, int threads,
                                                int exactProducts, anefit_et_input_fn input,
                                                anefit_et_output_fn output, void *context,
                                                char *message, size_t messageSize);

/// Delegates initialized and not yet destroyed, and execute calls served
/// since the library was loaded (for tests and diagnostics).
ANEFIT_EXECUTORCH_API long anefit_executorch_live_delegates();
ANEFIT_EXECUTORCH_API long anefit_executorch_calls();
