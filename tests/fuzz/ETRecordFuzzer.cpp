//===- ETRecordFuzzer.cpp - Fuzz the ETRecord reader ----------------------===//
//
// parseETRecord must accept or reject any bytes with an InputError; in an
// accepted record every debug handle indexes a node, and looking up an
// origin by any handle stays inside the record.
//
// The reader checks each member's CRC, so a mutation inside a member's JSON
// is refused by the zip layer before the JSON is read. Inputs that start
// with "{" are therefore JSON, packed here into an archive with the right
// CRCs: the text up to the first NUL is the edge program
// (edge_dialect_exported_program/forward), what follows it the delegate
// map. Every other input is an archive as it is (corpus/etrecord).
//
//===----------------------------------------------------------------------===//
#include "io/ETRecord.h"

#include "support/Error.h"
#include "support/Zip.h"

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace anefit;

namespace {

void put16(std::string &out, uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}

void put32(std::string &out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

/// A zip archive of stored members (no data descriptors, no zip64).
std::string storedZip(const std::vector<std::pair<std::string, std::string_view>> &members) {
  std::string out, central;
  for (const auto &[name, data] : members) {
    uint32_t crc = crc32Of({reinterpret_cast<const uint8_t *>(data.data()), data.size()});
    auto size = static_cast<uint32_t>(data.size());
    auto offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    put16(out, 20), put16(out, 0), put16(out, 0), put16(out, 0), put16(out, 0);
    put32(out, crc), put32(out, size), put32(out, size);
    put16(out, static_cast<uint32_t>(name.size())), put16(out, 0);
    out += name;
    out += data;
    put32(central, 0x02014b50);
    put16(central, 20), put16(central, 20), put16(central, 0), put16(central, 0);
    put16(central, 0), put16(central, 0);
    put32(central, crc), put32(central, size), put32(central, size);
    put16(central, static_cast<uint32_t>(name.size()));
    put16(central, 0), put16(central, 0), put16(central, 0), put16(central, 0);
    put32(central, 0), put32(central, offset);
    central += name;
  }
  auto at = static_cast<uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0), put16(out, 0);
  put16(out, static_cast<uint32_t>(members.size())),
      put16(out, static_cast<uint32_t>(members.size()));
  put32(out, static_cast<uint32_t>(central.size())), put32(out, at);
  put16(out, 0);
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string packed;
  std::span<const uint8_t> bytes{data, size};
  if (size > 0 && data[0] == '{') {
    std::string_view text(reinterpret_cast<const char *>(data), size);
    size_t nul = text.find('\0');
    std::vector<std::pair<std::string, std::string_view>> members = {
        {"ETRECORD_V0", ""}, {"edge_dialect_exported_program/forward", text.substr(0, nul)}};
    if (nul != std::string_view::npos)
      members.emplace_back("delegate_map", text.substr(nul + 1));
    packed = storedZip(members);
    bytes = {reinterpret_cast<const uint8_t *>(packed.data()), packed.size()};
  }
  try {
    ETRecord rec = parseETRecord(bytes, "etrecord");
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
