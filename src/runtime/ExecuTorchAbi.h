//===- ExecuTorchAbi.h - The C interface of anefit's ExecuTorch backend -*- C++ -*-===//
//
// The backend library (src/executorch, libanefit_executorch.so) is built
// only where ExecuTorch's runtime is, and is loaded at run time: by the
// Python package into a process that imported ExecuTorch, and by anefit's
// own programs (runtime/ExecuTorch.h) to run a .pte through ExecuTorch. This
// header is the one statement of what crosses between them: plain C types,
// dtypes by their names in DTypes.def ("fp32", "int64").
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

/// A tensor lent across the interface: contiguous, row-major.
struct anefit_et_tensor {
  const char *dtype; ///< a DTypes.def name
  int64_t rank;
  const int64_t *shape;
  const void *data;
};

/// Gives input `index` of step `step`. `declared` is the program's input as
/// its method declares it (data null). Fills `given` (its memory must stay
/// valid until the step's outputs were delivered) and returns 0; or returns
/// nonzero to stop the run (the caller keeps its own message).
typedef int (*anefit_et_input_fn)(void *context, int64_t step, size_t index,
                                  const anefit_et_tensor *declared, anefit_et_tensor *given);
/// Receives output `index` of step `step` (valid during the call only).
typedef void (*anefit_et_output_fn)(void *context, int64_t step, size_t index,
                                    const anefit_et_tensor *value);

/// See src/executorch/CoreMLBackend.h for each function.
typedef int (*anefit_et_register_fn)(const char *precision, int threads, int exactProducts,
                                     char *message, size_t messageSize);
typedef const char *(*anefit_et_version_fn)();
typedef int (*anefit_et_run_fn)(const char *program, const char *method, int64_t steps,
                                const char *precision, int threads, int exactProducts,
                                anefit_et_input_fn input, anefit_et_output_fn output, void *context,
                                char *message, size_t messageSize);
typedef int (*anefit_et_inputs_fn)(const char *program, const char *method,
                                   void (*each)(void *context, const anefit_et_tensor *declared),
                                   void *context, char *message, size_t messageSize);
}
