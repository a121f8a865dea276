//===- ThreadPool.h - The interpreter's worker threads ----------*- C++ -*-===//
//
// One pool of worker threads for the whole process. Kernels split their work
// with parallelFor; the calling thread takes part, and work is handed out in
// shrinking ranges: long runs of rows per thread, and a thread that starts
// late (its core busy with another process) simply takes less. Between the
// parallel ops of a run an idle worker either polls for the next op for at
// most 50 us before it sleeps on a futex (spinning, the default) or sleeps at
// once. BLAS calls run inside those ranges, so OpenBLAS is told to use one
// thread and its own threads are ended: they would compete with these for the
// same cores.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace anefit::runtime {

/// Most threads a run may use. More than the cores gain nothing, and each
/// worker holds a stack; this bounds what a mistyped count can cost.
constexpr int kMaxThreads = 1024;

/// Throws InputError, naming the setting as `what` (`--threads`, `threads`),
/// unless 0 <= requested <= kMaxThreads.
void checkThreadCount(int64_t requested, std::string_view what);

/// Number of threads `requested` means: itself when positive, else every
/// core the process may run on; never more than kMaxThreads.
int resolveThreads(int requested);

/// Runs parallelFor work with up to `threads` threads (the caller and
/// threads - 1 workers) while in scope; nested scopes restore the outer
/// settings. Without a scope, parallelFor runs on the calling thread.
///
/// `spin` lets idle threads poll for the next parallel op for up to 50 us
/// before they sleep. Without it they sleep at once: no CPU time between ops,
/// but each parallel op then waits for a wake-up (11-20 us on a virtual
/// machine, as long as the gap between two products of a decode step). With
/// more threads than cores nobody spins: a polling thread would take a core
/// from one with work.
class ThreadScope {
public:
  explicit ThreadScope(int threads, bool spin = true);
  ~ThreadScope();
  ThreadScope(const ThreadScope &) = delete;
  ThreadScope &operator=(const ThreadScope &) = delete;

private:
  int previous_;
  bool previousSpin_;
};

/// Threads parallelFor uses on this thread right now (1 outside a ThreadScope).
int currentThreads();

/// What the pool's workers have done since the process started.
struct PoolCounters {
  /// Times a worker polled for the next job after one ended.
  uint64_t polls = 0;
  /// Times a worker went to sleep until woken.
  uint64_t sleeps = 0;
  /// Times a worker woken on its caller's CPU moved itself to another.
  uint64_t moves = 0;
};
PoolCounters poolCounters();

/// Calls body(begin, end) on disjoint ranges covering [0, n) and returns when
/// all are done. With several threads the ranges are taken in increasing order
/// by whichever thread is free, each 1/threads of what is left and at least
/// `grain` long (only a range ending at n may be shorter); with one
/// thread, n <= grain, or while the pool runs another caller's job, the calling
/// thread runs body(0, n) alone. Workers the system will not start (no memory
/// for a stack, a thread limit) are done without: the job runs on those that
/// did start. An exception from `body` is rethrown here
/// after the other ranges finish.
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &body);

} // namespace anefit::runtime
