//===- ETRecordFuzzer.cpp - Fuzz the ETRecord reader ----------------------===//
//
// parseETRecord must accept or reject any bytes with an InputError; in an
// accepted record every debug handle indexes a node, and looking up an
// origin by any handle stays inside the record.
//
//===----------------------------------------------------------------------===//
#include "io/ETRecord.h"

#include "support/Error.h"

#include <cstdlib>

using namespace anefit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    ETRecord rec = parseETRecord({data, size}, "etrecord");
    for (const auto &[handle, nodes] : rec.byHandle) {
      for (size_t i : nodes)
        if (i >= rec.nodes.size() || rec.nodes[i].debugHandle != handle)
          std::abort();
      SourceOrigin o = rec.originOf({handle});
      if (!o.node)
        std::abort();
    }
    for (const auto &[name, path] : rec.buffers)
      (void)rec.bufferPath(name + "_to_fp16");
  } catch (const InputError &) {
  }
  return 0;
}
