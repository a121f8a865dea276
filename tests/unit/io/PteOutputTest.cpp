//===- PteOutputTest.cpp - Writing a .pte leaves nothing but the output ---===//
//
// savePteModels builds each new payload's weight file before it writes the
// program. Whatever stops it - an interrupt at any point, a write error, a
// refused rewrite - the output's directory holds nothing it did not hold
// before: no scratch file, no temporary, no half-written program. An
// interrupt at a chosen point comes from a file-size limit: the write that
// crosses it raises SIGXFSZ, whose handler sends SIGINT, as Ctrl-C would.
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"

#include "TestSupport.h"
#include "ir/Model.h"
#include "support/Error.h"
#include "support/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace anefit;
using anefit::test::errorOf;
using anefit::test::listDir;
using anefit::test::ScratchDir;
namespace fs = std::filesystem;

namespace {

const std::string kFixture =
    std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/lfm2_remedy_c4w.pte";

/// Limits the size of every file this process writes to `bytes`.
void limitFileSize(uint64_t bytes) {
  struct rlimit limit {};
  limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(bytes);
  ::setrlimit(RLIMIT_FSIZE, &limit);
}

extern "C" void interruptOnFileSizeLimit(int) { ::raise(SIGINT); }

/// The size of the fixture's rewrite, written once.
uint64_t outputSize(const Model &model) {
  ScratchDir dir;
  savePteModels(kFixture, {&model}, dir.file("y.pte"));
  return fs::file_size(dir.file("y.pte"));
}

/// Ctrl-C while the payload's weights are written and while the program is
/// written: the scratch directory the payload used to be built in was left
/// beside the output (`.y.pte.payload-*`, 1 in 4 kills of `anefit fix`).
TEST(PteOutput, AnInterruptLeavesNothingBehind) {
  auto models = loadPteModels(kFixture);
  ASSERT_EQ(models.size(), 1u);
  const Model &model = *models[0].model;
  uint64_t size = outputSize(model);
  ASSERT_GT(size, 100000u);
  // In the weight file, early in the program, at its very end.
  for (uint64_t limit : {uint64_t(4096), size / 2, size - 1}) {
    ScratchDir dir;
    std::string out = dir.file("y.pte");
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::signal(SIGINT, SIG_DFL); // a test runner may start us with SIGINT ignored
      ::signal(SIGXFSZ, interruptOnFileSizeLimit);
      limitFileSize(limit);
      try {
        savePteModels(kFixture, {&model}, out);
      } catch (...) {
      }
      ::_exit(0); // not reached: the limit is below the output's size
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "limit " << limit;
    EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{}) << "limit " << limit;
  }
}

/// A write error (here: the file-size limit, as a full disk) is one error
/// naming the output, and nothing is left.
TEST(PteOutput, AWriteErrorLeavesNothingBehind) {
  auto models = loadPteModels(kFixture);
  ASSERT_EQ(models.size(), 1u);
  const Model &model = *models[0].model;
  uint64_t size = outputSize(model);
  for (uint64_t limit : {uint64_t(4096), size - 1}) {
    ScratchDir dir;
    std::string out = dir.file("y.pte");
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::signal(SIGXFSZ, SIG_IGN); // writes past the limit fail with EFBIG
      limitFileSize(limit);
      try {
        savePteModels(kFixture, {&model}, out);
      } catch (const InputError &e) {
        std::string what = e.what();
        bool named = what.rfind(out, 0) == 0 && what.find("cannot write") != std::string::npos &&
                     what.find('\n') == std::string::npos;
        ::_exit(named ? 0 : 3);
      } catch (...) {
        ::_exit(4);
      }
      ::_exit(5);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status)) << "limit " << limit;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "limit " << limit << " (3: message, 5: no error)";
    EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{}) << "limit " << limit;
  }
}

/// A model refused once its payload's scratch file exists (a value defined
/// twice, which no reader would accept) leaves nothing.
TEST(PteOutput, ARefusedModelLeavesNothingBehind) {
  auto models = loadPteModels(kFixture);
  ASSERT_EQ(models.size(), 1u);
  Model &model = *models[0].model;
  Operation &op = *model.program->functions[0]->body->ops.back();
  op.addOutput(op.outputs[0]->name, op.outputs[0]->type);
  ScratchDir dir;
  std::string out = dir.file("y.pte");
  std::string what = errorOf([&] { savePteModels(kFixture, {&model}, out); });
  EXPECT_NE(what.find("cannot write this model"), std::string::npos) << what;
  EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{});
}

} // namespace
