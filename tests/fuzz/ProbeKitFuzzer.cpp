//===- ProbeKitFuzzer.cpp - Fuzz the probe kit writer ---------------------===//
//
// MIL text through writeProbeKit (probe/Probe.h), twice into one directory
// (the second with force, which replaces the first kit whole). Either call
// gives a kit or throws InputError. A kit holds exactly what its plan names
// (no package of the first kit stays beside the second plan), its plan reads
// back the same, its README holds no control character but newlines, and
// nothing is left beside it (no temporary). Links planted in the first kit
// point outside; what they point to must survive the replacement.
//
// The kits are written under $ANEFIT_FUZZ_DIR, else /dev/shm where there is
// one, else the temporary directory: on a memory-backed file system the
// writer's fsync(2) calls return at once, which is most of an execution's
// time on a disk. The writer is the same code either way.
//
//===----------------------------------------------------------------------===//
#include "probe/Probe.h"

#include "support/Error.h"
#include "support/FileSystem.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <unistd.h>

using namespace anefit;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "%s: %s\n", what, detail.substr(0, 2000).c_str());
  __builtin_trap();
}

/// Every file and directory below `root`, relative, links not followed.
std::set<std::string> listing(const fs::path &root) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    out.insert(fs::relative(it->path(), root).string());
  return out;
}

std::string fileText(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void checkKit(const fs::path &kit, const probe::ProbeResult &result) {
  std::set<std::string> expected = {"models", "plan.json", "README.md", "run_probe.py"};
  for (const std::string &w : result.written)
    if (w.starts_with("models/"))
      expected.insert(w);
  for (const std::string &entry : listing(kit)) {
    bool named = expected.count(entry);
    for (const std::string &w : result.written)
      named = named || entry.starts_with(w + "/");
    if (!named)
      fail("the kit holds what its plan does not name", entry);
  }
  ane::ProbePlan plan = ane::readProbePlan((kit / "plan.json").string());
  if (ane::renderProbePlan(plan) != ane::renderProbePlan(result.plan))
    fail("plan.json does not read back", fileText(kit / "plan.json"));
  for (unsigned char c : fileText(kit / "README.md"))
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
      fail("a control character in README.md", std::to_string(c));
}

/// Where each execution makes its directory.
const std::string &scratchRoot() {
  static const std::string root = [] {
    if (const char *env = std::getenv("ANEFIT_FUZZ_DIR"); env && *env)
      return std::string(env);
    std::error_code ec;
    if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0)
      return std::string("/dev/shm");
    return fs::temp_directory_path(ec).string();
  }();
  return root;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string pattern = scratchRoot() + "/anefit-fuzz-kit-XXXXXX";
  if (!::mkdtemp(pattern.data()))
    return 0;
  fs::path dir(pattern);
  fs::path model = dir / "model.mil", kit = dir / "kit", outside = dir / "outside";
  {
    std::ofstream out(model, std::ios::binary);
    out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
  }
  fs::create_directory(outside);
  std::ofstream(outside / "keep.txt") << "kept";
  try {
    InputScope inputs;
    probe::ProbeResult first = probe::writeProbeKit(model.string(), kit.string());
    checkKit(kit, first);
    // Links planted where the next kit writes.
    std::error_code ec;
    fs::remove_all(kit / "models" / "original.mlpackage", ec);
    fs::create_directory_symlink(outside, kit / "models" / "original.mlpackage", ec);
    fs::remove(kit / "README.md", ec);
    fs::create_symlink(outside / "keep.txt", kit / "README.md", ec);
    probe::ProbeOptions force;
    force.force = true;
    probe::ProbeResult second = probe::writeProbeKit(model.string(), kit.string(), force);
    checkKit(kit, second);
  } catch (const InputError &) {
  }
  if (listing(outside) != std::set<std::string>{"keep.txt"} ||
      fileText(outside / "keep.txt") != "kept")
    fail("a link in the old kit was followed", "outside/");
  for (const std::string &entry : listing(dir))
    if (entry.find(".tmp-") != std::string::npos)
      fail("a temporary was left", entry);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
