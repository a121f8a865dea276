//===- PteFuzzer.cpp - Fuzz the ExecuTorch .pte reader --------------------===//
//
// Feeds arbitrary bytes to PteFile as an in-memory program: read the table,
// then every delegate's payload, and unpack Core ML payloads as flattened
// directories. Anything but success or InputError is a bug.
//
//===----------------------------------------------------------------------===//
#include "io/Pte.h"

#include "support/Error.h"

#include <cstdint>
#include <span>

using namespace anefit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    auto pte = PteFile::fromBytes(std::span<const uint8_t>(data, size), "fuzz.pte");
    for (const PteDelegate &d : pte->delegates()) {
      try {
        std::span<const uint8_t> payload = pte->payload(d);
        if (d.isCoreML())
          for (const FlatFile &f : readFlattenedDirectory(payload, "fuzz.pte"))
            if (!f.data.empty() && f.data.data() < data)
              __builtin_trap(); // a file must lie inside the input
      } catch (const InputError &) {
      }
    }
  } catch (const InputError &) {
  }
  return 0;
}
