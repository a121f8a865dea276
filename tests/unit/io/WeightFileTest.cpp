//===- WeightFileTest.cpp - weight.bin reading and writing ----------------===//
//
// Checks the writer byte for byte against the worked example of formats.md §4
// and feeds the reader corrupted copies of it: every corruption must become
// an InputError naming the file and the blob, never a crash.
//
//===----------------------------------------------------------------------===//
#include "io/WeightFile.h"

#include "support/Error.h"
#include "support/TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

using namespace anefit;
using anefit::test::ScratchDir;
using ::testing::HasSubstr;

namespace {

void putU32(std::vector<uint8_t> &b, size_t at, uint32_t v) {
  if (b.size() < at + 4)
    b.resize(at + 4);
  std::memcpy(&b[at], &v, 4);
}

void putU64(std::vector<uint8_t> &b, size_t at, uint64_t v) {
  if (b.size() < at + 8)
    b.resize(at + 8);
  std::memcpy(&b[at], &v, 8);
}

/// The file of formats.md §4: fp32[1,2,3], fp16[1..5], uint4[1..5].
std::vector<uint8_t> workedExample() {
  std::vector<uint8_t> b(0x183, 0);
  putU32(b, 0, 3);
  putU32(b, 4, 2);
  // Blob 0: fp32 at 0x40, data at 0x80.
  putU32(b, 0x40, 0xDEADBEEF);
  putU32(b, 0x44, 2);
  putU64(b, 0x48, 12);
  putU64(b, 0x50, 0x80);
  const uint8_t f32[] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40};
  std::memcpy(&b[0x80], f32, sizeof f32);
  // Blob 1: fp16 at 0xc0, data at 0x100.
  putU32(b, 0xc0, 0xDEADBEEF);
  putU32(b, 0xc4, 1);
  putU64(b, 0xc8, 10);
  putU64(b, 0xd0, 0x100);
  const uint8_t f16[] = {0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44, 0x00, 0x45};
  std::memcpy(&b[0x100], f16, sizeof f16);
  // Blob 2: uint4 at 0x140, data at 0x180, 4 padding bits.
  putU32(b, 0x140, 0xDEADBEEF);
  putU32(b, 0x144, 11);
  putU64(b, 0x148, 3);
  putU64(b, 0x150, 0x180);
  putU64(b, 0x158, 4);
  const uint8_t u4[] = {0x21, 0x43, 0x05};
  std::memcpy(&b[0x180], u4, sizeof u4);
  return b;
}

/// Writes `bytes` to a file in `dir` and expects open()+records() or
/// blobData() to throw an InputError containing every `needles`.
void expectBad(const ScratchDir &dir, const std::vector<uint8_t> &bytes,
               const std::vector<std::string> &needles, uint64_t offset = 0,
               DType expected = DType::F32) {
  std::string path = dir.file("bad.bin");
  test::writeBytes(path, bytes);
  try {
    auto file = WeightFile::open(path);
    if (offset)
      file->blobData(offset, expected);
    else
      file->records();
    FAIL() << "no error for corrupted weight file";
  } catch (const InputError &e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_THAT(what, HasSubstr(path));
    for (const std::string &n : needles)
      EXPECT_THAT(what, HasSubstr(n));
  }
}

TEST(WeightWriterTest, MatchesWorkedExampleByteForByte) {
  ScratchDir dir;
  std::string path = dir.file("weight.bin");
  WeightWriter w(path);
  float f32[] = {1.0f, 2.0f, 3.0f};
  uint16_t f16[5];
  for (int i = 0; i < 5; ++i)
    f16[i] = floatToHalf(static_cast<float>(i + 1));
  const uint8_t u4[] = {0x21, 0x43, 0x05};
  EXPECT_EQ(w.append(DType::F32, {reinterpret_cast<const uint8_t *>(f32), sizeof f32}), 64u);
  EXPECT_EQ(w.append(DType::F16, {reinterpret_cast<const uint8_t *>(f16), sizeof f16}), 192u);
  EXPECT_EQ(w.append(DType::U4, u4, 4), 320u);
  EXPECT_EQ(w.count(), 3u);
  w.finish();
  EXPECT_EQ(test::readBytes(path), workedExample());
}

TEST(WeightWriterTest, EmptyFileIsValid) {
  ScratchDir dir;
  std::string path = dir.file("weight.bin");
  WeightWriter w(path);
  w.finish();
  auto file = WeightFile::open(path);
  EXPECT_EQ(file->blobCount(), 0u);
  EXPECT_TRUE(file->records().empty());
  EXPECT_EQ(file->size(), 64u);
}

TEST(WeightWriterTest, RejectsTypesWithoutBlobCode) {
  ScratchDir dir;
  WeightWriter w(dir.file("weight.bin"));
  const uint8_t data[8] = {};
  EXPECT_THROW(w.append(DType::I64, data), InputError);
  EXPECT_THROW(w.append(DType::U4, data, 8), InputError);
  EXPECT_THROW(w.append(DType::F16, data, 1), InputError);
}

TEST(WeightWriterTest, CannotCreateInMissingDirectory) {
  ScratchDir dir;
  EXPECT_THROW(WeightWriter(dir.file("missing/weight.bin")), InputError);
}

TEST(WeightFileTest, ReadsWorkedExample) {
  ScratchDir dir;
  std::string path = dir.file("weight.bin");
  test::writeBytes(path, workedExample());
  auto file = WeightFile::open(path);
  EXPECT_EQ(file->blobCount(), 3u);
  std::vector<BlobRecord> records = file->records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].metadataOffset, 64u);
  EXPECT_EQ(records[1].metadataOffset, 192u);
  EXPECT_EQ(records[2].metadataOffset, 320u);
  EXPECT_EQ(records[2].dtype, DType::U4);
  EXPECT_EQ(records[2].paddingBits, 4u);
  EXPECT_EQ(records[1].dataOffset, 0x100u);

  std::span<const uint8_t> f32 = file->blobData(64, DType::F32);
  ASSERT_EQ(f32.size(), 12u);
  float v[3];
  std::memcpy(v, f32.data(), 12);
  EXPECT_EQ(v[2], 3.0f);

  // A blob constant reads through the store without copying.
  Constant c = Constant::fromBlob(Type::tensor(DType::U4, std::vector<int64_t>{5}),
                                  BlobRef{"@model_path/weights/weight.bin", 320, file});
  EXPECT_EQ(c.asInts(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(c.data().data(), file->blobData(320, DType::U4).data());
}

TEST(WeightFileTest, MissingFile) {
  ScratchDir dir;
  try {
    WeightFile::open(dir.file("nope.bin"));
    FAIL();
  } catch (const InputError &e) {
    EXPECT_THAT(e.what(), HasSubstr("nope.bin: no such file or directory"));
  }
}

TEST(WeightFileTest, CorruptedSentinel) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU32(b, 0x40, 0);
  expectBad(dir, b, {"blob at offset 64: expected sentinel 0xdeadbeef, found 0x0"});
}

TEST(WeightFileTest, SentinelAtOffset4096) {
  // The message format of the brief: a record that lies in the file but holds zeros.
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  b.resize(4096 + 128, 0);
  expectBad(dir, b, {"blob at offset 4096: expected sentinel 0xdeadbeef, found 0x0"}, 4096);
}

TEST(WeightFileTest, DTypeMismatch) {
  ScratchDir dir;
  expectBad(dir, workedExample(), {"blob at offset 192", "expected data type fp32", "found fp16"},
            192, DType::F32);
}

TEST(WeightFileTest, UnknownDTypeCode) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU32(b, 0xc4, 99);
  expectBad(dir, b, {"blob at offset 192", "blob data type code", "found 99"});
}

TEST(WeightFileTest, OffsetPastEnd) {
  ScratchDir dir;
  expectBad(dir, workedExample(), {"blob at offset 1024", "metadata record inside the file"}, 1024);
}

TEST(WeightFileTest, UnalignedOffset) {
  ScratchDir dir;
  expectBad(dir, workedExample(), {"blob at offset 65", "64-byte aligned"}, 65);
}

TEST(WeightFileTest, DataOffsetNotAfterRecord) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU64(b, 0x50, 0x0);
  expectBad(dir, b, {"blob at offset 64", "expected data offset 128, found 0"});
}

TEST(WeightFileTest, TruncatedFile) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  b.resize(0x181); // cuts the last blob's data short
  expectBad(dir, b, {"blob at offset 320", "data within the file"});
}

TEST(WeightFileTest, TruncatedHeader) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  b.resize(10);
  expectBad(dir, b, {"storage header", "at least 64 bytes", "found 10 bytes"});
}

TEST(WeightFileTest, WrongVersion) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU32(b, 4, 1);
  expectBad(dir, b, {"storage header", "expected version 2, found version 1"});
}

TEST(WeightFileTest, AbsurdSize) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU64(b, 0x48, UINT64_MAX - 8);
  expectBad(dir, b, {"blob at offset 64", "data within the file"});
}

TEST(WeightFileTest, AbsurdCount) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU32(b, 0, 0xFFFFFFFF);
  expectBad(dir, b, {"storage header", "blob count of at most 5 for a file of 387 bytes"});
}

TEST(WeightFileTest, CountLargerThanBlobs) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU32(b, 0, 4);
  expectBad(dir, b, {"expected 4 blobs, found end of file after 3"});
}

TEST(WeightFileTest, SubBytePaddingTooLarge) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU64(b, 0x158, 8);
  expectBad(dir, b, {"blob at offset 320", "fewer than 8 padding bits", "found 8"});
}

TEST(WeightFileTest, PaddingOnWholeByteType) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU64(b, 0xd8, 3);
  expectBad(dir, b, {"blob at offset 192", "0 padding bits for fp16"});
}

TEST(WeightFileTest, SizeNotMultipleOfElement) {
  ScratchDir dir;
  std::vector<uint8_t> b = workedExample();
  putU64(b, 0x48, 11);
  expectBad(dir, b, {"blob at offset 64", "multiple of 4 bytes", "found 11 bytes"});
}

TEST(WeightFileTest, DirectoryIsNotAWeightFile) {
  ScratchDir dir;
  EXPECT_THROW(WeightFile::open(dir.path().string()), InputError);
}

} // namespace
