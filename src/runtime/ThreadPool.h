//===- ThreadPool.h - The interpreter's worker threads ----------*- C++ -*-===//
//
// One pool of worker threads for the whole process. Kernels split their work
// with parallelFor; the calling thread takes part, idle workers poll for the
// next op for at most 50 us and then sleep on a futex, and work is handed out
// in shrinking ranges: long runs of rows per thread, and a thread that starts
// late (its core busy with another process) simply takes less. BLAS calls run
// inside those ranges, so OpenBLAS is told to use one thread and its own
// threads are ended: they would compete with these for the same cores.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>

namespace anefit::runtime {

/// Number of threads `requested` means: itself when positive, else every
/// core the process may run on.
int resolveThreads(int requested);

/// Runs parallelFor work with up to `threads` threads (the caller and
/// threads - 1 workers) while in scope; nested scopes restore the outer count.
/// Without a scope, parallelFor runs on the calling thread.
class ThreadScope {
public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope &) = delete;
  ThreadScope &operator=(const ThreadScope &) = delete;

private:
  int previous_;
};

/// Threads parallelFor uses on this thread right now (1 outside a ThreadScope).
int currentThreads();

/// Calls body(begin, end) on disjoint ranges covering [0, n) and returns when
/// all are done. With several threads the ranges are taken in increasing order
/// by whichever thread is free, each 1/threads of what is left and at least
/// `grain` long (only a range ending at n may be shorter); with one
/// thread, n <= grain, or while the pool runs another caller's job, the calling
/// thread runs body(0, n) alone. An exception from `body` is rethrown here
/// after the other ranges finish.
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &body);

} // namespace anefit::runtime
