//===- main.cpp - The anefit command-line program -------------------------===//
//
// The executable is the command-line library (CommandLine.cpp) and nothing
// else, so the Python package can run the very same CLI in-process.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include <cstdlib>
#include <sys/resource.h>
#include <unistd.h>

namespace {

/// A threaded OpenBLAS starts its own threads when it loads, before main,
/// and each maps a 128 MB buffer. Under an address-space limit (ulimit -v)
/// too tight for that, such a thread retries forever, and the process burns
/// a core and never exits: joining it at exit waits for good. anefit runs
/// BLAS on its own threads (src/runtime/ThreadPool.h) and needs none of
/// OpenBLAS's, so under a limit the program starts itself again, once, with
/// OPENBLAS_NUM_THREADS=1, with which OpenBLAS starts none. Without a limit,
/// or when the variable is set already, nothing happens.
void restartWithoutBlasThreadsUnderALimit(char **argv) {
  rlimit limit{};
  if (std::getenv("OPENBLAS_NUM_THREADS") || getrlimit(RLIMIT_AS, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY)
    return;
  if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
    return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_NUM_THREADS"); // no /proc: carry on as before
}

} // namespace

int main(int argc, char **argv) {
  restartWithoutBlasThreadsUnderALimit(argv);
  return anefit::cli::runCommandLine(argc, argv);
}
