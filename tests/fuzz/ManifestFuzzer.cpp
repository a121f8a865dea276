//===- ManifestFuzzer.cpp - Fuzz the Manifest.json reader -----------------===//
//
// parseManifest must accept or reject any text with an InputError; an
// accepted manifest must name a root item whose path cannot leave Data/.
//
//===----------------------------------------------------------------------===//
#include "io/Package.h"

#include "support/Error.h"

#include <cstdlib>
#include <string_view>

using namespace anefit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  try {
    Manifest m = parseManifest(text, "Manifest.json");
    for (const Manifest::Item &item : m.items) {
      std::string_view p = item.path;
      // The property the reader promises: nothing accepted can escape.
      if (p.empty() || p.front() == '/' || p == ".." || p.starts_with("../") ||
          p.find("/../") != std::string_view::npos || p.ends_with("/.."))
        std::abort();
    }
    (void)m.rootItem();
  } catch (const InputError &) {
  }
  return 0;
}
