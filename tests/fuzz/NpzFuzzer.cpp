//===- NpzFuzzer.cpp - Fuzz the .npz and .npy readers ---------------------===//
//
// Arbitrary bytes as an .npz archive and as an .npy file, with a memory
// budget of 64 MiB: every read gives tensors or throws InputError, never
// allocates past the budget (libFuzzer's -malloc_limit_mb watches the rest)
// and never reads outside the input.
//
//===----------------------------------------------------------------------===//
#include "runtime/Npy.h"

#include "support/Error.h"

#include <span>

using namespace anefit;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  runtime::MemoryBudget::setLimit(uint64_t(64) << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  try {
    for (const runtime::NamedTensor &nt : runtime::parseNpz(bytes, "fuzz.npz"))
      if (!nt.tensor.valid())
        __builtin_trap();
  } catch (const InputError &) {
  }
  try {
    runtime::Tensor t = runtime::parseNpy(bytes, "fuzz.npy");
    // Every element must be readable.
    if (t.numElements() > 0)
      (void)t.floatAt(t.numElements() - 1);
  } catch (const InputError &) {
  }
  if (runtime::MemoryBudget::used() != 0)
    __builtin_trap(); // a tensor outlived its read: a leak of budget
  return 0;
}
