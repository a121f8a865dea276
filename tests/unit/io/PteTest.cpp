//===- PteTest.cpp - ExecuTorch .pte container and Core ML payloads -------===//
//
// Builds small .pte images with a forward-writing flatbuffer builder (parents
// before children, so every offset points forward as the format requires)
// and checks the reader on them and on corrupt variants of them.
//
//===----------------------------------------------------------------------===//
#include "io/Pte.h"

#include "TestSupport.h"
#include "io/ModelIO.h"
#include "ir/Model.h"
#include "support/Error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace anefit;
using anefit::test::errorOf;

namespace {

/// A flatbuffer object to be written: a table, string, byte vector or vector of tables.
struct FbNode {
  enum class Kind { Table, String, Bytes, TableVector, Ints } kind = Kind::Table;
  // Table fields by id: scalar bytes, or a child node (written as a uoffset).
  struct Field {
    int id;
    std::vector<uint8_t> scalar;
    std::shared_ptr<FbNode> child;
  };
  std::vector<Field> fields;
  std::string text;                           // String / Bytes
  std::vector<std::shared_ptr<FbNode>> items; // TableVector
};
using FbRef = std::shared_ptr<FbNode>;

FbRef table(std::vector<FbNode::Field> fields) {
  auto n = std::make_shared<FbNode>();
  n->fields = std::move(fields);
  return n;
}
FbRef str(std::string s, FbNode::Kind k = FbNode::Kind::String) {
  auto n = std::make_shared<FbNode>();
  n->kind = k;
  n->text = std::move(s);
  return n;
}
FbRef vec(std::vector<FbRef> items) {
  auto n = std::make_shared<FbNode>();
  n->kind = FbNode::Kind::TableVector;
  n->items = std::move(items);
  return n;
}
template <typename T> FbNode::Field scalar(int id, T v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return {id, b, nullptr};
}
FbNode::Field ref(int id, FbRef child) { return {id, {}, std::move(child)}; }

class FbWriter {
public:
  std::vector<uint8_t> buf;
  void pad4() {
    while (buf.size() % 4)
      buf.push_back(0);
  }
  void patch(size_t at, size_t target) {
    uint32_t off = static_cast<uint32_t>(target - at);
    std::memcpy(&buf[at], &off, 4);
  }
  /// Writes `n` and returns its position (for tables: the table start).
  size_t write(const FbNode &n) {
    pad4();
    switch (n.kind) {
    case FbNode::Kind::String:
    case FbNode::Kind::Bytes: {
      size_t at = buf.size();
      uint32_t len = static_cast<uint32_t>(n.text.size());
      buf.resize(at + 4);
      std::memcpy(&buf[at], &len, 4);
      buf.insert(buf.end(), n.text.begin(), n.text.end());
      buf.push_back(0);
      return at;
    }
    case FbNode::Kind::Ints: {
      size_t at = buf.size();
      uint32_t len = static_cast<uint32_t>(n.text.size() / 4);
      buf.resize(at + 4);
      std::memcpy(&buf[at], &len, 4);
      buf.insert(buf.end(), n.text.begin(), n.text.end());
      return at;
    }
    case FbNode::Kind::TableVector: {
      size_t at = buf.size();
      uint32_t len = static_cast<uint32_t>(n.items.size());
      buf.resize(at + 4 + 4 * n.items.size());
      std::memcpy(&buf[at], &len, 4);
      for (size_t i = 0; i < n.items.size(); ++i)
        patch(at + 4 + 4 * i, write(*n.items[i]));
      return at;
    }
    case FbNode::Kind::Table:
      break;
    }
    int maxId = -1;
    for (auto &f : n.fields)
      maxId = std::max(maxId, f.id);
    // vtable, then the table: soffset (4) + fields, each 8-byte slot.
    size_t vt = buf.size();
    uint16_t vtSize = static_cast<uint16_t>(4 + 2 * (maxId + 1));
    uint16_t tableSize = static_cast<uint16_t>(4 + 8 * n.fields.size());
    buf.resize(vt + vtSize, 0);
    pad4();
    size_t t = buf.size();
    std::memcpy(&buf[vt], &vtSize, 2);
    std::memcpy(&buf[vt + 2], &tableSize, 2);
    buf.resize(t + tableSize, 0);
    int32_t soff = static_cast<int32_t>(t - vt);
    std::memcpy(&buf[t], &soff, 4);
    std::vector<std::pair<size_t, const FbNode *>> pending;
    for (size_t i = 0; i < n.fields.size(); ++i) {
      size_t at = t + 4 + 8 * i;
      uint16_t off = static_cast<uint16_t>(at - t);
      std::memcpy(&buf[vt + 4 + 2 * n.fields[i].id], &off, 2);
      if (n.fields[i].child)
        pending.emplace_back(at, n.fields[i].child.get());
      else
        std::memcpy(&buf[at], n.fields[i].scalar.data(), n.fields[i].scalar.size());
    }
    for (auto &[at, child] : pending)
      patch(at, write(*child));
    return t;
  }
};

/// An inmemoryfs flattened directory with the given files at the root.
std::string flatten(const std::vector<std::pair<std::string, std::string>> &files) {
  std::string data;
  std::string nodes;
  std::string children;
  for (size_t i = 0; i < files.size(); ++i) {
    size_t off = data.size();
    data += files[i].second;
    nodes += "{\"children\":{},\"dataRegion\":{\"offset\":" + std::to_string(off) +
             ",\"size\":" + std::to_string(files[i].second.size()) + "},\"kind\":0,\"name\":\"" +
             files[i].first + "\"},";
    children += (i ? "," : "") + ("\"" + files[i].first + "\":" + std::to_string(i));
  }
  nodes += "{\"children\":{" + children +
           "},\"dataRegion\":{\"offset\":0,\"size\":0},\"kind\":1,\"name\":\"lowered_module\"}";
  std::string json = "{\"nodes\":[" + nodes + "]}";
  return data + std::string(json.rbegin(), json.rend()) + std::string(1, '\0');
}

struct PteImage {
  std::vector<uint8_t> bytes;
};

/// A program with one method "forward" holding one Core ML delegate whose
/// payload is in segment 0, plus an XNNPACK delegate inline.
std::vector<uint8_t> buildPte(const std::string &coremlPayload, bool extendedHeader = true) {
  auto spec = [](std::string k, std::string v) {
    return table({ref(0, str(std::move(k))), ref(1, str(std::move(v), FbNode::Kind::Bytes))});
  };
  auto coreml = table(
      {ref(0, str("CoreMLBackend")), ref(1, table({scalar<uint8_t>(0, 1), scalar<uint32_t>(1, 0)})),
       ref(2, vec({spec("compute_units", "cpu_and_ne"), spec("min_deployment_target", "9")}))});
  auto xnn = table({ref(0, str("XnnpackBackend")),
                    ref(1, table({scalar<uint8_t>(0, 0), scalar<uint32_t>(1, 0)}))});
  auto plan = table({ref(0, str("forward")), ref(7, vec({coreml, xnn}))});
  auto program = table(
      {scalar<uint32_t>(0, 0), ref(1, vec({plan})),
       ref(3, vec({table({ref(0, str("XNNPAYLOAD", FbNode::Kind::Bytes))})})),
       ref(4, vec({table({scalar<uint64_t>(0, 0), scalar<uint64_t>(1, coremlPayload.size())})}))});
  FbWriter w;
  // Header: root offset (patched), identifier, extended header (32 bytes).
  w.buf.resize(extendedHeader ? 40 : 8, 0);
  std::memcpy(&w.buf[4], "ET12", 4);
  size_t root = w.write(*program);
  uint32_t rootOff = static_cast<uint32_t>(root);
  std::memcpy(&w.buf[0], &rootOff, 4);
  if (!extendedHeader)
    return w.buf;
  while (w.buf.size() % 128)
    w.buf.push_back(0);
  uint64_t programSize = w.buf.size(), base = w.buf.size();
  std::memcpy(&w.buf[8], "eh00", 4);
  uint32_t len = 32;
  std::memcpy(&w.buf[12], &len, 4);
  std::memcpy(&w.buf[16], &programSize, 8);
  std::memcpy(&w.buf[24], &base, 8);
  uint64_t segSize = coremlPayload.size();
  std::memcpy(&w.buf[32], &segSize, 8);
  w.buf.insert(w.buf.end(), coremlPayload.begin(), coremlPayload.end());
  return w.buf;
}

/// A program whose Core ML delegate is a CMJR reference into named data
/// (ExecuTorch's multi-method weight sharing): the payload lives in segment 0
/// under key `key`.
std::vector<uint8_t> buildCmjrPte(const std::string &payload, const std::string &key,
                                  const std::string &namedKey) {
  std::string reference =
      "CMJR{\"version\": 1, \"key\": \"" + key + "\", \"functionName\": \"decode\"}";
  auto coreml = table({ref(0, str("CoreMLBackend")),
                       ref(1, table({scalar<uint8_t>(0, 0), scalar<uint32_t>(1, 0)}))});
  auto plan = table({ref(0, str("decode")), ref(7, vec({coreml}))});
  auto program = table(
      {ref(1, vec({plan})), ref(3, vec({table({ref(0, str(reference, FbNode::Kind::Bytes))})})),
       ref(4, vec({table({scalar<uint64_t>(0, 0), scalar<uint64_t>(1, payload.size())})})),
       ref(7, vec({table({ref(0, str(namedKey)), scalar<uint32_t>(1, 0)})}))});
  FbWriter w;
  w.buf.resize(40, 0);
  std::memcpy(&w.buf[4], "ET12", 4);
  uint32_t rootOff = static_cast<uint32_t>(w.write(*program));
  std::memcpy(&w.buf[0], &rootOff, 4);
  while (w.buf.size() % 128)
    w.buf.push_back(0);
  uint64_t base = w.buf.size();
  std::memcpy(&w.buf[8], "eh00", 4);
  uint32_t len = 32;
  std::memcpy(&w.buf[12], &len, 4);
  std::memcpy(&w.buf[16], &base, 8);
  std::memcpy(&w.buf[24], &base, 8);
  w.buf.insert(w.buf.end(), payload.begin(), payload.end());
  return w.buf;
}

/// A program whose Core ML delegate 0 has its payload in segment
/// `coremlSegment` of `segments`, laid out as ExecuTorch does (segment base
/// aligned to 128, each segment at the next multiple of `alignment`).
/// DataSegment fields holding the default 0 are left out of the flatbuffer,
/// as flatbuffer builders do.
std::vector<uint8_t> buildSegmentedPte(const std::vector<std::string> &segments,
                                       uint32_t coremlSegment, uint64_t alignment = 128) {
  std::vector<uint64_t> offsets;
  uint64_t end = 0;
  for (const std::string &s : segments) {
    uint64_t off = (end + alignment - 1) / alignment * alignment;
    offsets.push_back(off);
    end = off + s.size();
  }
  std::vector<FbRef> segTables;
  for (size_t i = 0; i < segments.size(); ++i) {
    std::vector<FbNode::Field> f;
    if (offsets[i] != 0)
      f.push_back(scalar<uint64_t>(0, offsets[i]));
    if (!segments[i].empty())
      f.push_back(scalar<uint64_t>(1, segments[i].size()));
    segTables.push_back(table(f));
  }
  auto coreml = table({ref(0, str("CoreMLBackend")),
                       ref(1, table({scalar<uint8_t>(0, 1), scalar<uint32_t>(1, coremlSegment)}))});
  auto plan = table({ref(0, str("forward")), ref(7, vec({coreml}))});
  auto program = table({ref(1, vec({plan})), ref(4, vec(segTables))});
  FbWriter w;
  w.buf.resize(40, 0);
  std::memcpy(&w.buf[4], "ET12", 4);
  uint32_t rootOff = static_cast<uint32_t>(w.write(*program));
  std::memcpy(&w.buf[0], &rootOff, 4);
  uint64_t programSize = w.buf.size();
  while (w.buf.size() % 128)
    w.buf.push_back(0);
  uint64_t base = w.buf.size();
  std::memcpy(&w.buf[8], "eh00", 4);
  uint32_t len = 32;
  std::memcpy(&w.buf[12], &len, 4);
  std::memcpy(&w.buf[16], &programSize, 8);
  std::memcpy(&w.buf[24], &base, 8);
  std::memcpy(&w.buf[32], &end, 8);
  for (size_t i = 0; i < segments.size(); ++i) {
    w.buf.resize(base + offsets[i], 0);
    w.buf.insert(w.buf.end(), segments[i].begin(), segments[i].end());
  }
  return w.buf;
}

} // namespace

TEST(Pte, ReadsMethodsDelegatesAndPayloads) {
  std::string payload =
      flatten({{"metadata.json", "{\"identifier\":\"executorch_x\"}"}, {"model.bin", "MODEL"}});
  auto bytes = buildPte(payload);
  auto pte = PteFile::fromBytes(bytes, "t.pte");
  EXPECT_EQ(pte->fileIdentifier(), "ET12");
  ASSERT_EQ(pte->methods().size(), 1u);
  EXPECT_EQ(pte->methods()[0], "forward");
  ASSERT_EQ(pte->delegates().size(), 2u);
  const PteDelegate &d = pte->delegates()[0];
  EXPECT_TRUE(d.isCoreML());
  EXPECT_EQ(d.location, "segment");
  EXPECT_EQ(d.compileSpecs.at("compute_units"), "cpu_and_ne");
  EXPECT_EQ(d.label(), "forward/delegate 0 (CoreMLBackend)");
  auto raw = pte->payload(d);
  EXPECT_EQ(std::string(raw.begin(), raw.end()), payload);
  auto inl = pte->payload(pte->delegates()[1]);
  EXPECT_EQ(std::string(inl.begin(), inl.end()), "XNNPAYLOAD");

  auto files = readFlattenedDirectory(raw, "t.pte");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1].path, "model.bin");
  EXPECT_EQ(std::string(files[1].data.begin(), files[1].data.end()), "MODEL");
}

TEST(Pte, FollowsCmjrReferencesIntoNamedData) {
  std::string payload = flatten({{"metadata.json", "{}"}});
  auto bytes = buildCmjrPte(payload, "coreml_executorch_1", "coreml_executorch_1");
  auto pte = PteFile::fromBytes(bytes, "t.pte");
  ASSERT_EQ(pte->delegates().size(), 1u);
  const PteDelegate &d = pte->delegates()[0];
  EXPECT_EQ(d.location, "named-data");
  EXPECT_EQ(d.namedDataKey, "coreml_executorch_1");
  EXPECT_EQ(d.functionName, "decode");
  auto raw = pte->payload(d);
  EXPECT_EQ(std::string(raw.begin(), raw.end()), payload);

  auto dangling = buildCmjrPte(payload, "coreml_executorch_2", "coreml_executorch_1");
  EXPECT_NE(errorOf([&] { PteFile::fromBytes(dangling, "t.pte"); })
                .find("CMJR reference names 'coreml_executorch_2', which is not in the program's "
                      "named data"),
            std::string::npos);
}

TEST(Pte, RejectsBadMagic) {
  auto bytes = buildPte(flatten({{"a", "b"}}));
  std::memcpy(&bytes[4], "XX12", 4);
  EXPECT_NE(errorOf([&] {
              PteFile::fromBytes(bytes, "t.pte");
            }).find("expected the ExecuTorch identifier 'ET' + 2 digits, found 'XX12'"),
            std::string::npos);
  EXPECT_NE(errorOf([&] {
              PteFile::fromBytes(std::vector<uint8_t>(3), "t.pte");
            }).find("expected at least 8 bytes"),
            std::string::npos);
}

TEST(Pte, RejectsTruncatedSegments) {
  auto bytes = buildPte(flatten({{"model.bin", std::string(1000, 'x')}}));
  bytes.resize(bytes.size() - 500);
  std::string err = errorOf([&] {
    auto pte = PteFile::fromBytes(bytes, "t.pte");
    pte->payload(pte->delegates()[0]);
  });
  EXPECT_NE(err.find("runs past the end of the file"), std::string::npos) << err;
}

TEST(Pte, RejectsPayloadIndexOutOfRange) {
  auto bytes = buildPte(flatten({{"a", "b"}}));
  // Make the Core ML delegate point at segment 7: find its index field (the
  // only uint32 value 0 directly after the location byte 1 in a 2-field table).
  auto pte = PteFile::fromBytes(bytes, "t.pte");
  PteDelegate d = pte->delegates()[0];
  d.dataIndex = 7;
  EXPECT_NE(errorOf([&] { pte->payload(d); }).find("segment index 7 out of range (1 segments)"),
            std::string::npos);
  d.location = "inline";
  EXPECT_NE(errorOf([&] { pte->payload(d); }).find("inline payload index 7 out of range"),
            std::string::npos);
}

TEST(Pte, CorruptReversedIndex) {
  std::string good = flatten({{"a", "bc"}});
  // Break the JSON: drop its first (reversed: last) brace.
  std::string cut = good.substr(0, good.size() - 2) + std::string(1, '\0');
  std::span<const uint8_t> s(reinterpret_cast<const uint8_t *>(cut.data()), cut.size());
  EXPECT_NE(errorOf([&] { readFlattenedDirectory(s, "p"); }).find("directory index"),
            std::string::npos);
  std::string garbage = "hello world";
  std::span<const uint8_t> g(reinterpret_cast<const uint8_t *>(garbage.data()), garbage.size());
  EXPECT_NE(errorOf([&] { readFlattenedDirectory(g, "p"); }).find("expected a reversed JSON index"),
            std::string::npos);
  // A data region pointing into the index.
  std::string json = "{\"nodes\":[{\"children\":{},\"dataRegion\":{\"offset\":0,\"size\":999},"
                     "\"kind\":0,\"name\":\"f\"},{\"children\":{\"f\":0},\"dataRegion\":{"
                     "\"offset\":0,\"size\":0},\"kind\":1,\"name\":\"r\"}]}";
  std::string over = "ab" + std::string(json.rbegin(), json.rend());
  std::span<const uint8_t> o(reinterpret_cast<const uint8_t *>(over.data()), over.size());
  EXPECT_NE(errorOf([&] { readFlattenedDirectory(o, "p"); }).find("runs into the index"),
            std::string::npos);
  // A cycle: the root lists itself.
  std::string cyc = "{\"nodes\":[{\"children\":{\"me\":0},\"dataRegion\":{\"offset\":0,\"size\":0},"
                    "\"kind\":1,\"name\":\"r\"}]}";
  std::string c = std::string(cyc.rbegin(), cyc.rend());
  std::span<const uint8_t> cs(reinterpret_cast<const uint8_t *>(c.data()), c.size());
  EXPECT_NE(errorOf([&] { readFlattenedDirectory(cs, "p"); }).find("cycle"), std::string::npos);
}

TEST(Pte, NoExtendedHeaderMeansNoSegments) {
  auto bytes = buildPte(flatten({{"a", "b"}}), /*extendedHeader=*/false);
  // Segments are located by the extended header; a file listing segments
  // without one is corrupt.
  EXPECT_NE(errorOf([&] { PteFile::fromBytes(bytes, "t.pte"); }).find("no extended header"),
            std::string::npos);
}

TEST(Pte, CorruptOffsetsNeverCrash) {
  auto bytes = buildPte(flatten({{"metadata.json", "{}"}, {"m", std::string(64, 'z')}}));
  // Flip every byte of the flatbuffer region in turn: each variant either
  // parses or raises InputError, never crashes.
  size_t limit = std::min<size_t>(bytes.size(), 600);
  size_t rejected = 0;
  for (size_t i = 0; i < limit; ++i) {
    auto copy = bytes;
    copy[i] ^= 0xFF;
    try {
      auto pte = PteFile::fromBytes(copy, "t.pte");
      for (const auto &d : pte->delegates()) {
        auto p = pte->payload(d);
        if (d.isCoreML())
          readFlattenedDirectory(p, "t.pte");
      }
    } catch (const InputError &) {
      ++rejected;
    }
  }
  // Most single-byte corruptions of offsets and the magic must be caught.
  EXPECT_GT(rejected, 20u);
}

#ifdef ANEFIT_TEST_DATA_DIR
// Real exports made by scripts/export_executorch_fixtures.py with ExecuTorch's
// CoreMLPartitioner (iOS 18, cpu_and_ne, fp16).
TEST(Pte, ReadsRealExecuTorchExports) {
  for (const char *name : {"lfm2_coreml_states", "lfm2_coreml_nostate", "llama_coreml_static"}) {
    SCOPED_TRACE(name);
    std::string path = std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/" + name + ".pte";
    auto pte = PteFile::open(path);
    EXPECT_EQ(pte->fileIdentifier().substr(0, 2), "ET");
    ASSERT_EQ(pte->methods().size(), 1u);
    EXPECT_EQ(pte->methods()[0], "forward");
    const PteDelegate *coreml = nullptr;
    for (const auto &d : pte->delegates())
      if (d.isCoreML())
        coreml = &d;
    ASSERT_NE(coreml, nullptr);
    EXPECT_EQ(coreml->compileSpecs.at("compute_units"), "cpu_and_ne");
    EXPECT_EQ(coreml->compileSpecs.at("min_deployment_target"), "9");
    EXPECT_EQ(coreml->location, "segment");
    auto files = readFlattenedDirectory(pte->payload(*coreml), path);
    std::vector<std::string> paths;
    for (const auto &f : files)
      paths.push_back(f.path);
    for (const char *expected : {"metadata.json", "model.mlpackage/Manifest.json",
                                 "model.mlpackage/Data/com.apple.CoreML/model.mlmodel",
                                 "model.mlpackage/Data/com.apple.CoreML/weights/weight.bin"})
      EXPECT_NE(std::find(paths.begin(), paths.end(), expected), paths.end()) << expected;
  }
}
#endif

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

std::string tempPath(const std::string &name) {
  return (std::filesystem::temp_directory_path() /
          ("anefit-pte-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

std::vector<uint8_t> readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::string text(std::span<const uint8_t> s) { return std::string(s.begin(), s.end()); }

ByteChunks chunk(std::string s) {
  ByteChunks c;
  c.addOwned(std::move(s));
  return c;
}

} // namespace

TEST(PteWriter, FlattenedDirectoryRoundTrips) {
  std::vector<FlatFileOut> files;
  for (auto [path, data] : std::vector<std::pair<std::string, std::string>>{
           {"metadata.json", "{\"identifier\":\"executorch_a\"}"},
           {"model.mlpackage/Manifest.json", "{}"},
           {"model.mlpackage/Data/com.apple.CoreML/model.mlmodel", "MODEL"},
           {"model.mlpackage/Data/com.apple.CoreML/weights/weight.bin", std::string(300, 'w')},
           {"debug_info.json", "{\"x\": \"{ } \\\" }\"}"}}) {
    FlatFileOut f{path, {}};
    f.data.addOwned(data);
    files.push_back(std::move(f));
  }
  ByteChunks flat = writeFlattenedDirectory("lowered_module", files);
  std::string path = tempPath("flat.bin");
  {
    AtomicFile out(path, OutputOptions::replacing());
    flat.writeTo(out);
    out.commit();
  }
  auto written = readAll(path);
  std::filesystem::remove(path);
  std::string bytes(written.begin(), written.end());
  EXPECT_EQ(bytes.size(), flat.size());
  std::span<const uint8_t> s(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  EXPECT_EQ(flattenedDirectoryRootName(s, "p"), "lowered_module");
  auto back = readFlattenedDirectory(s, "p");
  ASSERT_EQ(back.size(), 5u);
  std::map<std::string, std::string> got;
  for (const FlatFile &f : back)
    got[f.path] = text(f.data);
  EXPECT_EQ(got["model.mlpackage/Data/com.apple.CoreML/weights/weight.bin"], std::string(300, 'w'));
  EXPECT_EQ(got["debug_info.json"], "{\"x\": \"{ } \\\" }\"}");
  EXPECT_EQ(got["metadata.json"], "{\"identifier\":\"executorch_a\"}");
  // Files back to back (alignment 1 below 1 GiB), children listed by name.
  EXPECT_EQ(back[0].path, "debug_info.json");
  EXPECT_EQ(back[0].data.data(), s.data());

  std::vector<FlatFileOut> dup(2);
  dup[0].path = dup[1].path = "a";
  EXPECT_NE(errorOf([&] { writeFlattenedDirectory("r", dup); }).find("unique relative path"),
            std::string::npos);
  std::vector<FlatFileOut> dots(1);
  dots[0].path = "a/../b";
  EXPECT_NE(errorOf([&] { writeFlattenedDirectory("r", dots); }).find("'..'"), std::string::npos);
}

TEST(PteWriter, ReplacingASegmentMovesTheLaterOnesKeepingAlignment) {
  std::string payload = flatten({{"metadata.json", "{}"}});
  auto bytes = buildSegmentedPte({std::string(100, 'a'), payload, std::string(10, 'c')}, 1);
  std::string in = tempPath("in.pte"), out = tempPath("out.pte");
  writeAll(in, bytes);
  auto pte = PteFile::open(in);
  ASSERT_EQ(pte->segmentTable().size(), 3u);
  EXPECT_EQ(pte->segmentTable()[2].offset, 256u + 128u * ((payload.size() + 127) / 128 - 1));
  EXPECT_EQ(*pte->payloadSegment(pte->delegates()[0]), 1u);

  std::string bigger = flatten({{"metadata.json", "{}"}, {"w", std::string(700, 'w')}});
  std::map<uint32_t, ByteChunks> repl;
  repl.emplace(1, chunk(bigger));
  writePteWithSegments(*pte, repl, out);
  auto written = readAll(out);
  auto back = PteFile::open(out);
  const auto &segs = back->segmentTable();
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].offset, 0u);
  EXPECT_EQ(segs[1].offset, 128u);
  EXPECT_EQ(segs[1].size, bigger.size());
  EXPECT_EQ(segs[2].offset % 128, 0u);
  EXPECT_GE(segs[2].offset, 128u + bigger.size());
  EXPECT_LT(segs[2].offset, 128u + bigger.size() + 128u);
  EXPECT_EQ(text(back->payload(back->delegates()[0])), bigger);
  uint64_t base = back->segmentBase();
  EXPECT_EQ(base, pte->segmentBase());
  EXPECT_EQ(text(std::span<const uint8_t>(written).subspan(base, 100)), std::string(100, 'a'));
  EXPECT_EQ(text(std::span<const uint8_t>(written).subspan(base + segs[2].offset, 10)),
            std::string(10, 'c'));
  // Extended header: program size and base kept, segment data size recomputed.
  EXPECT_EQ(back->programSize(), pte->programSize());
  EXPECT_EQ(back->segmentDataSize(), segs[2].offset + 10);
  EXPECT_EQ(written.size(), base + segs[2].offset + 10);
  // Every byte before the segments is the input's, except the patched fields.
  std::set<uint64_t> patched;
  for (const PteSegment &s : pte->segmentTable())
    for (uint64_t field : {s.offsetField, s.sizeField})
      for (uint64_t k = 0; field && k < 8; ++k)
        patched.insert(field + k);
  for (uint64_t k = 32; k < 40; ++k)
    patched.insert(k);
  size_t differing = 0;
  for (uint64_t i = 0; i < base; ++i)
    if (bytes[i] != written[i]) {
      ++differing;
      EXPECT_TRUE(patched.count(i)) << "byte " << i << " changed";
    }
  EXPECT_GT(differing, 0u);

  // No replacement: the copy is the input, byte for byte. An existing output
  // is replaced only when asked.
  EXPECT_NE(errorOf([&] { writePteWithSegments(*pte, {}, out); }).find("output already exists"),
            std::string::npos);
  writePteWithSegments(*pte, {}, out, OutputOptions::replacing());
  EXPECT_EQ(readAll(out), bytes);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST(PteWriter, RefusesWhatItCannotPatch) {
  std::string payload = flatten({{"metadata.json", "{}"}});
  std::string in = tempPath("in2.pte"), out = tempPath("out2.pte");
  // A field absent from the flatbuffer (an empty segment's size) cannot be patched.
  writeAll(in, buildSegmentedPte({"", payload}, 0));
  {
    auto pte = PteFile::open(in);
    EXPECT_EQ(pte->segmentTable()[0].sizeField, 0u);
    std::map<uint32_t, ByteChunks> repl;
    repl.emplace(0, chunk(std::string(500, 'x')));
    EXPECT_NE(errorOf([&] {
                writePteWithSegments(*pte, repl, out);
              }).find("segments[0]: the size field is absent"),
              std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  // Bytes after the last segment that nothing describes.
  auto bytes = buildSegmentedPte({payload}, 0);
  bytes.push_back(7);
  writeAll(in, bytes);
  {
    auto pte = PteFile::open(in);
    std::map<uint32_t, ByteChunks> repl;
    repl.emplace(0, chunk(payload));
    EXPECT_NE(errorOf([&] {
                writePteWithSegments(*pte, repl, out);
              }).find("1 bytes after its last segment"),
              std::string::npos);
    repl.clear();
    repl.emplace(5, chunk(payload));
    EXPECT_NE(errorOf([&] { writePteWithSegments(*pte, repl, out); }).find("no segment 5"),
              std::string::npos);
  }
  std::filesystem::remove(in);
}

#ifdef ANEFIT_TEST_DATA_DIR
TEST(PteWriter, RealExportsCopyByteForByte) {
  for (const char *name : {"lfm2_coreml_states", "lfm2_export_llm_fp16", "llama_coreml_static"}) {
    SCOPED_TRACE(name);
    std::string path = std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/" + name + ".pte";
    std::string out = tempPath(std::string(name) + ".pte");
    auto pte = PteFile::open(path);
    writePteWithSegments(*pte, {}, out);
    EXPECT_EQ(readAll(out), readAll(path));
    std::filesystem::remove(out);
  }
}
#endif

#ifdef ANEFIT_TEST_DATA_DIR
namespace {

/// Op count and every constant's bytes, in program order.
std::pair<size_t, std::vector<std::string>> contentsOf(const Model &m) {
  size_t ops = 0;
  std::vector<std::string> blobs;
  for (const auto &f : m.program->functions)
    walk(static_cast<const Block &>(*f->body), [&](const Operation &op) {
      ++ops;
      for (const OpInput &in : op.inputs)
        for (const Binding &b : in.bindings)
          if (b.constant && b.constant->kind == Constant::Kind::Blob)
            blobs.push_back(text(b.constant->data()));
      for (const auto &[k, c] : op.attributes)
        if (c && c->kind == Constant::Kind::Blob)
          blobs.push_back(text(c->data()));
    });
  return {ops, blobs};
}

} // namespace

TEST(PteWriter, SavesModelsIntoTheRealExport) {
  std::string path = std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/lfm2_export_llm_4w.pte";
  std::string out = tempPath("saved.pte");
  auto models = loadPteModels(path);
  ASSERT_EQ(models.size(), 1u);
  savePteModels(path, {models[0].model.get()}, out);

  auto in = PteFile::open(path), back = PteFile::open(out);
  EXPECT_EQ(back->methods(), in->methods());
  ASSERT_EQ(back->delegates().size(), in->delegates().size());
  EXPECT_EQ(back->delegates()[0].compileSpecs, in->delegates()[0].compileSpecs);
  EXPECT_EQ(back->programSize(), in->programSize());
  auto before = readAll(path), after = readAll(out);
  // The flatbuffer is the input's but for the segment table.
  uint64_t differing = 0;
  for (uint64_t i = 0; i < in->segmentBase(); ++i)
    differing += before[i] != after[i];
  EXPECT_LE(differing, 16u);

  auto oldFiles = readFlattenedDirectory(in->payload(in->delegates()[0]), "in");
  auto newFiles = readFlattenedDirectory(back->payload(back->delegates()[0]), "out");
  std::map<std::string, std::string> was, now;
  for (const FlatFile &f : oldFiles)
    was[f.path] = text(f.data);
  for (const FlatFile &f : newFiles)
    now[f.path] = text(f.data);
  EXPECT_EQ(now["debug_info.json"], was["debug_info.json"]);
  EXPECT_EQ(now["model.mlpackage/executorch_debug_handle_mapping.json"],
            was["model.mlpackage/executorch_debug_handle_mapping.json"]);
  ASSERT_TRUE(now.count("model.mlpackage/Data/com.apple.CoreML/weights/weight.bin"));
  // metadata.json: the same argument names, a new identifier (Core ML caches by it).
  auto oldMeta = nlohmann::json::parse(was["metadata.json"]);
  auto newMeta = nlohmann::json::parse(now["metadata.json"]);
  EXPECT_EQ(newMeta["inputNames"], oldMeta["inputNames"]);
  EXPECT_EQ(newMeta["outputNames"], oldMeta["outputNames"]);
  EXPECT_NE(newMeta["identifier"], oldMeta["identifier"]);
  EXPECT_EQ(newMeta["identifier"].get<std::string>().rfind("executorch_", 0), 0u);

  auto reread = loadPteModels(out);
  ASSERT_EQ(reread.size(), 1u);
  EXPECT_EQ(interfaceDifference(*models[0].model, *reread[0].model), "");
  auto [opsA, blobsA] = contentsOf(*models[0].model);
  auto [opsB, blobsB] = contentsOf(*reread[0].model);
  EXPECT_EQ(opsA, opsB);
  EXPECT_EQ(blobsA, blobsB);
  EXPECT_GT(blobsA.size(), 100u);

  // A rewrite that changes the delegate's interface is refused, and nothing is written.
  std::filesystem::remove(out);
  Model &m = *models[0].model;
  m.description.inputs[2].type.shape = {1, 64, 3};
  std::string err = errorOf([&] { savePteModels(path, {&m}, out); });
  EXPECT_NE(err.find("the rewrite changes the delegate's interface (input 2 "
                     "'b_layers_0_conv_conv_state' (1, 64, 2, fp32) became "
                     "'b_layers_0_conv_conv_state' (1, 64, 3, fp32))"),
            std::string::npos)
      << err;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_NE(errorOf([&] { savePteModels(path, {&m}, path); }).find("refusing to write over"),
            std::string::npos);
}
#endif

//===----------------------------------------------------------------------===//
// Write-back: what ExecuTorch copies from delegate outputs into its inputs
//===----------------------------------------------------------------------===//

namespace {

struct TestInstr {
  uint8_t type; // 1 KernelCall, 2 DelegateCall, 3 MoveCall, 4 JumpFalseCall
  int32_t index;
  std::vector<int32_t> args;
};

FbRef intVector(const std::vector<int32_t> &v) {
  std::string bytes(4 * v.size(), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return str(bytes, FbNode::Kind::Ints);
}

/// One method "forward" with `numValues` values, method inputs `inputs`,
/// operators {aten::copy_, aten::add.out}, one Core ML delegate and the
/// given instructions.
std::vector<uint8_t> buildMethodPte(int numValues, const std::vector<int32_t> &inputs,
                                    const std::vector<TestInstr> &instrs) {
  std::vector<FbRef> values;
  for (int i = 0; i < numValues; ++i)
    values.push_back(table({scalar<uint8_t>(0, 5)}));
  std::vector<FbRef> instructions;
  for (const TestInstr &in : instrs) {
    FbRef args;
    if (in.type == 3)
      args = table({scalar<int32_t>(0, in.args[0]), scalar<int32_t>(1, in.args[1])});
    else if (in.type == 4)
      args = table({scalar<int32_t>(0, 0), scalar<int32_t>(1, 0)});
    else
      args = table({scalar<int32_t>(0, in.index), ref(1, intVector(in.args))});
    instructions.push_back(table({scalar<uint8_t>(0, in.type), ref(1, args)}));
  }
  auto chain = table({ref(2, vec(instructions))});
  auto ops = vec(
      {table({ref(0, str("aten::copy_"))}), table({ref(0, str("aten::add")), ref(1, str("out"))})});
  auto coreml = table({ref(0, str("CoreMLBackend")),
                       ref(1, table({scalar<uint8_t>(0, 0), scalar<uint32_t>(1, 0)}))});
  auto plan = table({ref(0, str("forward")), ref(2, vec(values)), ref(3, intVector(inputs)),
                     ref(5, vec({chain})), ref(6, ops), ref(7, vec({coreml}))});
  auto program =
      table({ref(1, vec({plan})), ref(3, vec({table({ref(0, str("P", FbNode::Kind::Bytes))})}))});
  FbWriter w;
  w.buf.resize(8, 0);
  std::memcpy(&w.buf[4], "ET12", 4);
  uint32_t rootOff = static_cast<uint32_t>(w.write(*program));
  std::memcpy(&w.buf[0], &rootOff, 4);
  return w.buf;
}

std::string describe(const PteDelegateIO &io) {
  if (!io.unmappable.empty())
    return "unmappable: " + io.unmappable;
  std::string out;
  for (const PteWriteBack &w : io.writeBacks)
    out += "o" + std::to_string(w.output) + "->i" + std::to_string(w.input) + " v" +
           std::to_string(w.value) + " " + w.via + (w.methodInput ? " (input)" : "") + "; ";
  return out;
}

std::string writeBackOf(int numValues, const std::vector<int32_t> &inputs,
                        const std::vector<TestInstr> &instrs, size_t nIn, size_t nOut) {
  auto bytes = buildMethodPte(numValues, inputs, instrs);
  auto pte = PteFile::fromBytes(bytes, "t.pte");
  return describe(pte->delegateIO(pte->delegates()[0], nIn, nOut));
}

} // namespace

TEST(PteWriteBack, ReadsCopyBackAfterTheDelegateCall) {
  // forward(tokens=v3): delegate(v3, v0, v1) -> (v4, v5, v6); copy_(v0, v4);
  // copy_(v1, v5): two buffers written back, v6 is the logits.
  std::vector<TestInstr> instrs = {
      {2, 0, {3, 0, 1, 4, 5, 6}}, {1, 0, {0, 4, 7, 0}}, {1, 0, {1, 5, 8, 1}}};
  EXPECT_EQ(writeBackOf(9, {3}, instrs, 3, 3), "o0->i1 v0 aten::copy_; o1->i2 v1 aten::copy_; ");
  // A mutable method input written back is carried too, and said so.
  EXPECT_EQ(writeBackOf(9, {3, 0}, instrs, 3, 3),
            "o0->i1 v0 aten::copy_ (input); o1->i2 v1 aten::copy_; ");
  // An output that is the input's own value.
  EXPECT_EQ(writeBackOf(9, {3}, {{2, 0, {3, 0, 0, 6}}}, 2, 2), "o0->i1 v0 alias; ");
  // Other kernels and a delegate that is never called: nothing to carry.
  EXPECT_EQ(writeBackOf(9, {3}, {{1, 1, {3, 3, 4}}}, 2, 2), "");
}

TEST(PteWriteBack, RefusesFormsItCannotMap) {
  EXPECT_EQ(writeBackOf(9, {3}, {{2, 0, {3, 0, 4, 5}}, {2, 0, {3, 0, 4, 5}}}, 2, 2),
            "unmappable: method 'forward' calls the delegate 2 times");
  EXPECT_EQ(writeBackOf(9, {3}, {{2, 0, {3, 0, 4, 5}}}, 1, 2),
            "unmappable: the delegate call passes 4 arguments; its Core ML model has 1 inputs "
            "and 2 outputs");
  EXPECT_EQ(writeBackOf(9, {3}, {{2, 0, {3, 0, 4, 5}}, {4, 0, {}}}, 2, 2),
            "unmappable: method 'forward' has control flow (JumpFalseCall)");
  EXPECT_EQ(writeBackOf(9, {3}, {{2, 0, {3, 0, 4, 5}}, {1, 0, {0, 8, 7, 0}}}, 2, 2),
            "unmappable: aten::copy_ writes delegate input 1 (value 0) from value 8, which the "
            "delegate does not produce");
  EXPECT_EQ(writeBackOf(9, {3}, {{1, 0, {0, 4, 7, 0}}, {2, 0, {3, 0, 4, 5}}}, 2, 2),
            "unmappable: aten::copy_ writes delegate input 1 (value 0) before the delegate call");
  EXPECT_EQ(writeBackOf(9, {3}, {{2, 0, {3, 0, 4, 5}}, {3, 0, {4, 0}}}, 2, 2),
            "unmappable: a MoveCall writes delegate input 1");
  EXPECT_EQ(
      writeBackOf(9, {3}, {{2, 0, {3, 0, 4, 5}}, {1, 0, {0, 4, 7, 0}}, {1, 0, {0, 5, 7, 0}}}, 2, 2),
      "unmappable: delegate input 1 is written back twice");
  EXPECT_EQ(writeBackOf(4, {3}, {{2, 0, {3, 0, 4, 5}}}, 2, 2),
            "unmappable: the delegate call names value 4 of 4");
}

#ifdef ANEFIT_TEST_DATA_DIR
TEST(PteWriteBack, RealExportLlmExport) {
  std::string path = std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/lfm2_export_llm_fp16.pte";
  LoadOptions noWeights;
  noWeights.openWeights = false;
  auto models = loadPteModels(path, noWeights);
  ASSERT_EQ(models.size(), 1u);
  const Model &m = *models[0].model;
  EXPECT_EQ(m.hostWriteBackError, "");
  ASSERT_EQ(m.hostWriteBacks.size(), 22u); // 10 conv states, 12 KV caches
  // Each written-back output is computed from the input it is written into:
  // the conv state's output is a slice of a concat that reads it, the cache's
  // output a slice_update of it.
  const Function &fn = *m.defaultFunction();
  std::map<std::string, const Operation *> producer;
  walk(static_cast<const Block &>(*fn.body), [&](const Operation &op) {
    for (const auto &r : op.outputs)
      producer[r->name] = &op;
  });
  for (const HostWriteBack &w : m.hostWriteBacks) {
    SCOPED_TRACE(w.output + " -> " + w.input);
    EXPECT_EQ(w.function, "main");
    EXPECT_EQ(w.how.rfind("ExecuTorch aten::copy_ into buffer value ", 0), 0u);
    // Walk the output's producers back to the input.
    std::set<std::string> seen;
    std::vector<std::string> todo{w.output};
    bool reaches = false;
    while (!todo.empty() && !reaches) {
      std::string v = todo.back();
      todo.pop_back();
      if (!seen.insert(v).second)
        continue;
      if (v == w.input) {
        reaches = true;
        break;
      }
      auto it = producer.find(v);
      if (it == producer.end())
        continue;
      for (const OpInput &in : it->second->inputs)
        for (const Binding &b : in.bindings)
          if (b.value)
            todo.push_back(b.value->name);
    }
    EXPECT_TRUE(reaches);
    bool isCache = w.input.find("kv_cache") != std::string::npos;
    EXPECT_EQ(w.output.find(isCache ? "index_put" : "slice_copy") != std::string::npos, true);
  }
  // With the buffers taken over as Core ML states there is nothing to write back.
  auto states = loadPteModels(
      std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/lfm2_export_llm_states.pte", noWeights);
  EXPECT_TRUE(states[0].model->hostWriteBacks.empty());
  EXPECT_EQ(states[0].model->hostWriteBackError, "");
}
#endif
