//===- NpyTest.cpp - .npy / .npz reading and writing ----------------------===//
#include "RuntimeTestUtil.h"

#include "runtime/Npy.h"
#include "support/Error.h"
#include "support/FileSystem.h"

#include <cstring>

using namespace anefit;
using namespace anefit::test;

namespace {

/// A hand-made .npy of version `major` holding int32 [2] = {7, -1}.
std::vector<uint8_t> handNpy(int major) {
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  uint32_t len = static_cast<uint32_t>(header.size());
  out.push_back(len & 0xff);
  out.push_back(len >> 8);
  if (major > 1)
    out.push_back(0), out.push_back(0);
  out.insert(out.end(), header.begin(), header.end());
  int32_t v[2] = {7, -1};
  const uint8_t *p = reinterpret_cast<const uint8_t *>(v);
  out.insert(out.end(), p, p + 8);
  return out;
}

TEST(Npy, ReadsVersions1To3) {
  for (int major : {1, 2, 3}) {
    Tensor t = runtime::parseNpy(handNpy(major), "x.npy");
    EXPECT_EQ(t.dtype(), DType::I32);
    expectInts(t, {7, -1}, {2});
  }
}

TEST(Npy, RoundTripsEveryShapeKind) {
  for (const Shape &shape : {Shape{}, Shape{3}, Shape{2, 3}}) {
    std::vector<float> v(static_cast<size_t>(runtime::numElementsOf(shape)), 1.5f);
    Tensor back = runtime::parseNpy(runtime::encodeNpy(Tensor::fromF32(v, shape)), "t");
    expectNear(back, v, shape);
  }
  Tensor h = Tensor::fromF32({1, 2}, {2}).convertTo(DType::F16);
  Tensor back = runtime::parseNpy(runtime::encodeNpy(h), "t");
  EXPECT_EQ(back.dtype(), DType::F16);
  std::vector<uint8_t> bytes = runtime::encodeNpy(h);
  EXPECT_EQ((bytes.size() - 2 * 2) % 64, 0u); // data aligned like numpy's
}

TEST(Npy, MalformedFilesAreInputErrors) {
  std::vector<uint8_t> good = handNpy(1);
  std::vector<uint8_t> truncated(good.begin(), good.end() - 3);
  EXPECT_THROW(runtime::parseNpy(truncated, "t.npy"), InputError);
  std::vector<uint8_t> bad = good;
  bad[1] = 'X';
  EXPECT_THROW(runtime::parseNpy(bad, "t.npy"), InputError);
  // A huge shape with few bytes must be refused before any allocation.
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000), }";
  std::vector<uint8_t> huge = {
      0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(header.size()), 0};
  huge.insert(huge.end(), header.begin(), header.end());
  try {
    runtime::parseNpy(huge, "huge.npy");
    FAIL();
  } catch (const InputError &e) {
    EXPECT_NE(std::string(e.what()).find("huge.npy"), std::string::npos);
  }
  std::string fortran = "{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }";
  std::vector<uint8_t> f = {
      0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(fortran.size()), 0};
  f.insert(f.end(), fortran.begin(), fortran.end());
  f.resize(f.size() + 8);
  EXPECT_THROW(runtime::parseNpy(f, "f.npy"), InputError);
}

TEST(Npz, WriteThenReadKeepsNamesAndOrder) {
  std::string path = ::testing::TempDir() + "/anefit-npz-test.npz";
  std::vector<runtime::NamedTensor> in = {{"step0/out", Tensor::fromF32({1, 2}, {2})},
                                          {"b", Tensor::fromI32({3}, {1})}};
  runtime::writeNpz(path, in);
  auto back = runtime::readNpz(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].name, "step0/out");
  expectNear(back[0].tensor, {1, 2}, {2});
  EXPECT_EQ(back[1].name, "b");
  expectInts(back[1].tensor, {3}, {1});
  // Corrupting a data byte breaks the CRC.
  std::vector<uint8_t> bytes;
  {
    FILE *f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    int c;
    while ((c = std::fgetc(f)) != EOF)
      bytes.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
  }
  // The first member's .npy starts after its 30-byte local header and name.
  bytes[30 + std::strlen("step0/out.npy") + 100] ^= 0xff;
  EXPECT_THROW(runtime::parseNpz(bytes, "x.npz"), InputError);
  std::remove(path.c_str());
  EXPECT_THROW(runtime::parseNpz(std::vector<uint8_t>(10, 0), "short.npz"), InputError);
}

TEST(Npz, MoreMembersThanZip32HoldsGetAZip64EndRecord) {
  // 70,000 arrays (a long stepped run with -o) overflow the 16-bit member
  // count of a plain zip end record.
  std::string path = ::testing::TempDir() + "/anefit-npz-zip64.npz";
  constexpr int kMembers = 70000;
  {
    runtime::NpzWriter w(path);
    for (int i = 0; i < kMembers; ++i)
      w.add("step" + std::to_string(i) + "/x", Tensor::fromI32({i}, {1}));
    EXPECT_EQ(w.size(), uint64_t(kMembers));
    w.finish();
  }
  auto back = runtime::readNpz(path);
  ASSERT_EQ(back.size(), size_t(kMembers));
  for (int i : {0, 65534, 65535, 65536, kMembers - 1}) {
    EXPECT_EQ(back[i].name, "step" + std::to_string(i) + "/x");
    expectInts(back[i].tensor, {i}, {1});
  }
  std::remove(path.c_str());
}

TEST(Npz, AnUnfinishedWriterLeavesNothing) {
  std::string path = ::testing::TempDir() + "/anefit-npz-unfinished.npz";
  std::remove(path.c_str());
  {
    runtime::NpzWriter w(path);
    w.add("x", Tensor::fromF32({1, 2}, {2}));
  }
  EXPECT_EQ(fileKindOf(path), FileKind::Missing);
}

} // namespace

namespace {

TEST(Npz, MutatedArchivesNeverCrash) {
  // Every single-byte change and every truncation of a small archive either
  // parses or raises InputError: nothing else may escape.
  std::string path = ::testing::TempDir() + "/anefit-npz-mutate.npz";
  runtime::writeNpz(path,
                    {{"x", Tensor::fromF32({1, 2, 3}, {3})}, {"y", Tensor::fromI32({4}, {1})}});
  std::vector<uint8_t> good;
  {
    FILE *f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    int c;
    while ((c = std::fgetc(f)) != EOF)
      good.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
  }
  std::remove(path.c_str());
  int errors = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t v : {uint8_t(0x00), uint8_t(0xff), uint8_t(good[i] ^ 0x80)}) {
      std::vector<uint8_t> bad = good;
      bad[i] = v;
      try {
        runtime::parseNpz(bad, "m.npz");
      } catch (const InputError &) {
        ++errors;
      }
    }
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(i));
    EXPECT_THROW(runtime::parseNpz(cut, "cut.npz"), InputError) << "truncated at " << i;
  }
  EXPECT_GT(errors, 0);
}

} // namespace
