//===- FileSystemTest.cpp - Inputs, the output policy, atomic writes ------===//
//
// The promises of support/FileSystem.h, each against the hostile case that
// broke it: FIFOs and devices as inputs (no hang, named correctly), links
// inside a model directory, outputs over, inside or around an input, special
// files as outputs (written through, errors reported), interrupts and
// concurrent writers (no temporary left, no failure).
//
//===----------------------------------------------------------------------===//
#include "support/FileSystem.h"

#include "TestSupport.h"
#include "support/Error.h"
#include "support/TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace anefit;
using anefit::test::errorOf;
using anefit::test::listDir;
using anefit::test::ScratchDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

TEST(MappedFile, ReadsARegularFile) {
  ScratchDir dir;
  test::writeText(dir.file("a.txt"), "hello");
  auto f = MappedFile::open(dir.file("a.txt"));
  EXPECT_EQ(f->text(), "hello");
  test::writeText(dir.file("empty"), "");
  EXPECT_EQ(MappedFile::open(dir.file("empty"))->size(), 0u);
}

/// VmFlags of the mapping that starts at `at`, from /proc/self/smaps ("" if
/// none is found).
std::string vmFlagsAt(const void *at) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 && line.find(' ') < 40)
      inside = start == reinterpret_cast<uintptr_t>(at);
    else if (inside && line.rfind("VmFlags:", 0) == 0)
      return line;
  }
  return "";
}

/// Weights stream faster through 2 MB TLB entries: a large file is mapped with
/// huge pages advised ("hg"), a small one is left alone.
TEST(MappedFile, AdvisesHugePagesForLargeFiles) {
  if (!fs::exists("/sys/kernel/mm/transparent_hugepage") || !fs::exists("/proc/self/smaps"))
    GTEST_SKIP() << "no transparent huge pages in this kernel";
  ScratchDir dir;
  test::writeText(dir.file("large.bin"), std::string(size_t(9) << 20, 'w'));
  test::writeText(dir.file("small.bin"), std::string(size_t(1) << 20, 'w'));
  auto large = MappedFile::open(dir.file("large.bin"));
  auto small = MappedFile::open(dir.file("small.bin"));
  EXPECT_THAT(vmFlagsAt(large->bytes().data()), HasSubstr(" hg"));
  std::string smallFlags = vmFlagsAt(small->bytes().data());
  ASSERT_THAT(smallFlags, HasSubstr("VmFlags:"));
  EXPECT_THAT(smallFlags, ::testing::Not(HasSubstr(" hg")));
}

/// A FIFO named as an input used to block the reader forever.
TEST(MappedFile, RefusesAFifoWithoutBlocking) {
  ScratchDir dir;
  ASSERT_EQ(::mkfifo(dir.file("pipe.npz").c_str(), 0600), 0);
  EXPECT_THAT(errorOf([&] { MappedFile::open(dir.file("pipe.npz")); }),
              HasSubstr("pipe.npz: expected a regular file, found a FIFO"));
  EXPECT_THAT(errorOf([&] { readFileBytes(dir.file("pipe.npz")); }), HasSubstr("found a FIFO"));
}

TEST(MappedFile, NamesWhatItFound) {
  ScratchDir dir;
  EXPECT_THAT(errorOf([&] { MappedFile::open(dir.path().string()); }),
              HasSubstr("expected a regular file, found a directory"));
  EXPECT_THAT(errorOf([&] { MappedFile::open("/dev/null"); }),
              HasSubstr("expected a regular file, found a character device"));
  EXPECT_THAT(errorOf([&] { MappedFile::open(dir.file("nothing")); }),
              HasSubstr("nothing: no such file or directory"));
  test::writeText(dir.file("big"), std::string(100, 'x'));
  InputOptions small;
  small.maxBytes = 10;
  EXPECT_THAT(errorOf([&] { readFileBytes(dir.file("big"), small); }),
              HasSubstr("expected at most 10 bytes, found 100 bytes"));
}

/// A linked directory inside a package used to be read from wherever it led.
TEST(MappedFile, WithinRefusesLinksOnTheWay) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "pkg/Data/weights");
  fs::create_directories(dir.path() / "elsewhere");
  test::writeText(dir.file("pkg/Data/weights/w.bin"), "w");
  test::writeText(dir.file("elsewhere/w.bin"), "secret");
  InputOptions in;
  in.within = dir.file("pkg");
  EXPECT_EQ(MappedFile::open(dir.file("pkg/Data/weights/w.bin"), in)->text(), "w");

  fs::create_directory_symlink(dir.path() / "elsewhere", dir.path() / "pkg/Data/linked");
  EXPECT_THAT(errorOf([&] { MappedFile::open(dir.file("pkg/Data/linked/w.bin"), in); }),
              HasSubstr("found a symbolic link"));
  fs::create_symlink(dir.path() / "elsewhere/w.bin", dir.path() / "pkg/Data/weights/l.bin");
  EXPECT_THAT(errorOf([&] { MappedFile::open(dir.file("pkg/Data/weights/l.bin"), in); }),
              HasSubstr("found a symbolic link"));
  // The directory named by the user may itself be a link.
  fs::create_directory_symlink(dir.path() / "pkg", dir.path() / "alias");
  InputOptions viaAlias;
  viaAlias.within = dir.file("alias");
  EXPECT_EQ(MappedFile::open(dir.file("alias/Data/weights/w.bin"), viaAlias)->text(), "w");
}

TEST(OutputPolicy, RefusesOverInsideAndAroundInputs) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "M.mlpackage/Data");
  test::writeText(dir.file("in.npz"), "x");
  InputScope scope;
  trackInput(dir.file("M.mlpackage"));
  MappedFile::open(dir.file("in.npz"));
  EXPECT_THAT(errorOf([&] { checkOutput(dir.file("in.npz"), OutputOptions::replacing()); }),
              HasSubstr("refusing to write over the input"));
  EXPECT_THAT(errorOf([&] { checkOutput(dir.file("M.mlpackage/Data/x.mil")); }),
              HasSubstr("refusing to write inside the input"));
  OutputOptions pkg = OutputOptions::replacing();
  pkg.kind = OutputKind::Directory;
  EXPECT_THAT(errorOf([&] { checkOutput(dir.path().string(), pkg); }),
              HasSubstr("refusing to write around the input"));
  // A link to an input is the input.
  fs::create_symlink(dir.path() / "in.npz", dir.path() / "alias.npz");
  EXPECT_THAT(errorOf([&] { checkOutput(dir.file("alias.npz"), OutputOptions::replacing()); }),
              HasSubstr("refusing to write over the input"));
  EXPECT_NO_THROW(checkOutput(dir.file("other.npz")));
}

TEST(OutputPolicy, InputsAreForgottenWhenTheScopeEnds) {
  ScratchDir dir;
  test::writeText(dir.file("in.npz"), "x");
  {
    InputScope scope;
    MappedFile::open(dir.file("in.npz"));
    EXPECT_EQ(trackedInputs().size(), 1u);
  }
  EXPECT_TRUE(trackedInputs().empty());
  EXPECT_NO_THROW(checkOutput(dir.file("in.npz"), OutputOptions::replacing()));
}

TEST(OutputPolicy, ExistingOutputsNeedForce) {
  ScratchDir dir;
  test::writeText(dir.file("out.mil"), "old");
  EXPECT_THAT(errorOf([&] { checkOutput(dir.file("out.mil")); }),
              HasSubstr("output already exists; use --force to replace it"));
  EXPECT_EQ(checkOutput(dir.file("out.mil"), OutputOptions::replacing()).mode, OutputMode::Replace);
  EXPECT_EQ(checkOutput(dir.file("new.mil")).mode, OutputMode::Create);
  EXPECT_THAT(errorOf([&] { checkOutput(dir.path().string(), OutputOptions::replacing()); }),
              HasSubstr("expected a file path, found a directory"));
  EXPECT_THAT(errorOf([&] { checkOutput(dir.file("no/such/out.mil")); }),
              HasSubstr("directory " + dir.file("no/such") + " does not exist"));
  fs::create_symlink(dir.path() / "missing", dir.path() / "dangling");
  EXPECT_THAT(errorOf([&] { checkOutput(dir.file("dangling")); }),
              HasSubstr("found a symbolic link to a missing file"));
}

TEST(OutputPolicy, StreamsAreWrittenThrough) {
  EXPECT_EQ(checkOutput("/dev/null").mode, OutputMode::Stream);
  EXPECT_EQ(checkOutput("-").streamFd, 1);
  EXPECT_EQ(checkOutput("/dev/stdout").streamFd, 1);
  EXPECT_EQ(checkOutput("/dev/fd/2").streamFd, 2);
  OutputOptions fileOnly;
  fileOnly.allowStream = false;
  EXPECT_THAT(errorOf([&] { checkOutput("/dev/null", fileOnly); }),
              HasSubstr("expected a file path, found a character device"));
  OutputOptions pkg;
  pkg.kind = OutputKind::Directory;
  EXPECT_THAT(errorOf([&] { checkOutput("/dev/stdout", pkg); }),
              HasSubstr("found a standard stream"));
  // Writing to /dev/null replaces nothing: /dev/null stays a device.
  writeFileAtomically("/dev/null", "discarded");
  EXPECT_EQ(fileKindOf("/dev/null"), FileKind::CharDevice);
}

/// The rename-into-place writer used to report success for a full device.
TEST(OutputPolicy, AFullDeviceIsAnError) {
  if (fileKindOf("/dev/full") != FileKind::CharDevice)
    GTEST_SKIP() << "no /dev/full on this system";
  EXPECT_THAT(errorOf([&] { writeFileAtomically("/dev/full", "data"); }),
              HasSubstr("/dev/full: cannot write: No space left on device"));
}

TEST(OutputPolicy, AFifoGetsTheBytes) {
  ScratchDir dir;
  std::string fifo = dir.file("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = test::readText(fifo); });
  writeFileAtomically(fifo, "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_EQ(fileKindOf(fifo), FileKind::Fifo);
}

TEST(AtomicFile, ReplacesWholeAndKeepsLinksAndMode) {
  ScratchDir dir;
  test::writeText(dir.file("target.json"), "old");
  ::chmod(dir.file("target.json").c_str(), 0640);
  fs::create_symlink(dir.path() / "target.json", dir.path() / "link.json");
  writeFileAtomically(dir.file("link.json"), "new", OutputOptions::replacing());
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link.json"));
  EXPECT_EQ(test::readText(dir.file("target.json")), "new");
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("target.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(listDir(dir.path()), (std::vector<std::string>{"link.json", "target.json"}));
}

TEST(AtomicFile, AbortLeavesNothing) {
  ScratchDir dir;
  {
    AtomicFile f(dir.file("out.bin"));
    f.write("partial");
    EXPECT_TRUE(fs::exists(f.tempPath()));
  }
  EXPECT_TRUE(listDir(dir.path()).empty());
  AtomicFile g(dir.file("gap.bin"));
  const uint8_t one[1] = {7};
  g.writeAt(100, one);
  g.commit();
  EXPECT_EQ(fs::file_size(dir.path() / "gap.bin"), 101u);
}

TEST(AtomicFile, CommitAsNewNeverReplaces) {
  ScratchDir dir;
  test::writeText(dir.file("w.bin"), "taken");
  std::string placed;
  {
    AtomicFile f(dir.file("w.bin"), OutputOptions::replacing());
    f.write("mine");
    placed = f.commitAsNew([](int attempt) {
      return attempt == 0 ? std::string("w.bin") : "w-" + std::to_string(attempt) + ".bin";
    });
    EXPECT_EQ(placed, dir.file("w-1.bin"));
    EXPECT_EQ(test::readText(placed), "mine");
  }
  // Not kept: gone with the object.
  EXPECT_FALSE(fs::exists(placed));
  EXPECT_EQ(test::readText(dir.file("w.bin")), "taken");
  AtomicFile f(dir.file("w.bin"), OutputOptions::replacing());
  f.write("kept");
  placed = f.commitAsNew([](int a) { return "k" + std::to_string(a) + ".bin"; });
  f.keep();
  EXPECT_EQ(test::readText(placed), "kept");
}

/// One in twenty concurrent `convert --force` used to fail with "Directory
/// not empty" and leave ".old-*" behind.
TEST(AtomicDirectory, ConcurrentReplacementsAllSucceed) {
  ScratchDir dir;
  std::string out = dir.file("Out.mlpackage");
  std::atomic<int> failures{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        try {
          AtomicDirectory d(out, OutputOptions::replacing());
          d.addFile("Data/model.mlmodel", "writer " + std::to_string(t));
          d.addFile("Manifest.json", "{}");
          d.commit();
        } catch (const InputError &e) {
          ++failures;
          ADD_FAILURE() << e.what();
        }
      }
    });
  for (auto &w : writers)
    w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{"Out.mlpackage"});
  EXPECT_EQ(listDir(out), (std::vector<std::string>{"Data", "Manifest.json"}));
}

TEST(AtomicDirectory, UncommittedTreesVanish) {
  ScratchDir dir;
  {
    AtomicDirectory d(dir.file("P.mlpackage"));
    d.addFile("Data/a/b.bin", "x");
  }
  EXPECT_TRUE(listDir(dir.path()).empty());
  AtomicDirectory d(dir.file("P.mlpackage"));
  d.addFile("Manifest.json", "{}");
  d.commit();
  EXPECT_THAT(errorOf([&] { AtomicDirectory again(dir.file("P.mlpackage")); }),
              HasSubstr("output already exists"));
}

/// Ctrl-C in the middle of a write used to leave temporaries behind.
TEST(AtomicWrites, AnInterruptRemovesTemporaries) {
  ScratchDir dir;
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGINT, SIG_DFL); // a test runner may start us with SIGINT ignored
    AtomicFile f(dir.file("out.mil"));
    f.write("half");
    AtomicDirectory d(dir.file("Out.mlpackage"));
    d.addFile("Data/com.apple.CoreML/weights/weight.bin", "w");
    d.addFile("Manifest.json", "{}");
    AtomicFile w(dir.file("w.bin"));
    w.write("placed");
    w.commitAsNew([](int) { return std::string("w.bin"); });
    ::raise(SIGINT);
    ::_exit(0); // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
  EXPECT_TRUE(listDir(dir.path()).empty());
}

/// A package saved into a tree being assembled (a probe kit's models)
/// unregisters its files when it is committed; a signal after that used to
/// leave the tree behind, since only registered files were removed and the
/// tree's directory was not empty. The tree's root is removed whole, without
/// following a link inside it.
TEST(AtomicWrites, AnInterruptRemovesATreeWithCommittedPackagesInside) {
  ScratchDir dir;
  fs::create_directory(dir.file("outside"));
  std::ofstream(dir.file("outside/keep.txt")) << "kept";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGTERM, SIG_DFL);
    AtomicDirectory kit(dir.file("kit"));
    kit.addDirectory("models");
    for (const char *name : {"a", "b"}) {
      AtomicDirectory package(kit.tempPath(std::string("models/") + name + ".mlpackage"));
      package.addFile("Data/com.apple.CoreML/model.mlmodel", "m");
      package.addFile("Manifest.json", "{}");
      package.commit();
    }
    fs::create_directory_symlink(dir.file("outside"), kit.tempPath("models/link"));
    ::raise(SIGTERM);
    ::_exit(0); // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{"outside"});
  EXPECT_EQ(listDir(dir.file("outside")), std::vector<std::string>{"keep.txt"});
}

/// A fatal signal goes to any thread that does not hold it back, so the
/// cleanup may run on one thread while another creates temporaries: it used
/// to miss those created while it ran (fix -o y.pte killed as its temporary
/// appeared left it behind 11 times in 20). Here the signal is handled on a
/// thread of its own as soon as the first temporary appears, while the main
/// thread goes on creating them.
TEST(AtomicWrites, AnInterruptOnAnotherThreadRemovesTemporaries) {
  for (int round = 0; round < 20; ++round) {
    ScratchDir dir;
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::signal(SIGINT, SIG_DFL);
      int watch = ::inotify_init1(IN_CLOEXEC);
      if (watch < 0 || ::inotify_add_watch(watch, dir.path().c_str(), IN_CREATE) < 0)
        ::_exit(3);
      std::thread interrupter([watch] {
        char event[4096];
        if (::read(watch, event, sizeof event) > 0) // the first temporary is there
          ::pthread_kill(::pthread_self(), SIGINT);
        ::_exit(4); // not reached
      });
      interrupter.detach();
      std::vector<std::unique_ptr<AtomicFile>> files(32);
      for (size_t i = 0;; ++i)
        files[i % files.size()] =
            std::make_unique<AtomicFile>(dir.file("f" + std::to_string(i % files.size())));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "round " << round;
    EXPECT_EQ(listDir(dir.path()), std::vector<std::string>{}) << "round " << round;
  }
}

/// Scratch space has no name: nothing appears beside the path it is made
/// for, bytes come back as written (holes as zeros), and a write error or an
/// unusable directory is one error naming that path.
TEST(ScratchFile, HasNoNameAndReadsBackWhatWasWritten) {
  ScratchDir dir;
  std::string besides = dir.file("y.pte");
  {
    ScratchFile scratch(besides);
    const uint8_t head[] = {1, 2, 3};
    const uint8_t tail[] = {9};
    scratch.writeAt(0, head);
    scratch.writeAt(4096, tail);
    EXPECT_TRUE(listDir(dir.path()).empty());
    std::span<const uint8_t> bytes = scratch.bytes();
    ASSERT_EQ(bytes.size(), 4097u);
    EXPECT_EQ(bytes[0], 1);
    EXPECT_EQ(bytes[2], 3);
    EXPECT_EQ(bytes[3], 0);
    EXPECT_EQ(bytes[4095], 0);
    EXPECT_EQ(bytes[4096], 9);
    EXPECT_THAT(errorOf([&] { scratch.writeAt(0, head); }),
                HasSubstr("y.pte (scratch space): cannot write"));
  }
  EXPECT_TRUE(listDir(dir.path()).empty());
  ScratchFile empty(besides);
  EXPECT_TRUE(empty.bytes().empty());
  EXPECT_THAT(errorOf([&] { ScratchFile nowhere(dir.file("missing/y.pte")); }),
              HasSubstr("missing/y.pte: cannot create a scratch file in"));
}

TEST(SafeFileName, MakesOneHarmlessComponent) {
  EXPECT_EQ(safeFileName("main"), "main");
  EXPECT_EQ(safeFileName("../../../x"), "_._.._.._x");
  EXPECT_EQ(safeFileName("/abs/x"), "_abs_x");
  EXPECT_EQ(safeFileName(".."), "_.");
  EXPECT_EQ(safeFileName(""), "_");
  EXPECT_EQ(safeFileName(std::string("a\0b\x1b[31m", 8)), "a_b_[31m");
  EXPECT_EQ(safeFileName(std::string(500, 'n')).size(), 200u);
}

} // namespace
