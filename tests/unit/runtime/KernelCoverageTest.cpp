//===- KernelCoverageTest.cpp - Every kernel is run by a runtime test -----===//
//
// A kernel no test runs is a kernel nobody knows works. Each op type in
// Kernels.def must be named by a runtime test: quoted in a gtest under
// tests/unit/runtime ("acos") or called in a program under tests/lit/runtime
// (= acos(...)). Adding a kernel without its test fails here, naming it.
//
//===----------------------------------------------------------------------===//
#include "runtime/Interpreter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

using namespace anefit;
namespace fs = std::filesystem;

namespace {

std::string readAll(const fs::path &dir, const std::vector<std::string> &extensions,
                    const std::string &skip) {
  std::string text;
  for (const auto &entry : fs::recursive_directory_iterator(dir)) {
    const fs::path &p = entry.path();
    if (!entry.is_regular_file() || p.filename() == skip)
      continue;
    if (std::find(extensions.begin(), extensions.end(), p.extension().string()) == extensions.end())
      continue;
    std::ifstream in(p);
    std::ostringstream os;
    os << in.rdbuf();
    text += os.str();
    text += '\n';
  }
  return text;
}

} // namespace

TEST(KernelCoverage, EveryKernelIsNamedByARuntimeTest) {
  fs::path tests(ANEFIT_TEST_DATA_DIR);
  std::string unit = readAll(tests / "unit" / "runtime", {".cpp", ".h"}, "KernelCoverageTest.cpp");
  std::string lit = readAll(tests / "lit" / "runtime", {".mil", ".test"}, "");
  ASSERT_FALSE(unit.empty());
  ASSERT_FALSE(lit.empty());
  std::vector<std::string> kernels = runtime::kernelOpTypes();
  ASSERT_GT(kernels.size(), 100u);
  std::vector<std::string> untested;
  for (const std::string &op : kernels) {
    bool quoted = unit.find("\"" + op + "\"") != std::string::npos;
    bool called = std::regex_search(lit, std::regex("=\\s*" + op + "\\("));
    if (!quoted && !called)
      untested.push_back(op);
  }
  std::string list;
  for (const std::string &op : untested)
    list += (list.empty() ? "" : ", ") + op;
  EXPECT_TRUE(untested.empty()) << "kernels no runtime test runs: " << list
                                << " (add a case under tests/unit/runtime or tests/lit/runtime)";
}
