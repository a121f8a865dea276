//===- ThreadPool.cpp - The interpreter's worker threads ------------------===//
//
// A job is (body, n, grain) plus two counters that carry the job's generation
// in their high bits: the first index not yet handed out and the workers that
// joined. A worker that wakes late sees another generation in them and leaves
// without touching the job, so a job never waits for a worker that is not
// running.
//
// Ranges are guided: each thread takes 1/threads of what is left, never less
// than grain (on a 4w LFM2 step this beat 1/(2 * threads) by ~15 %). Weight
// rows are then read in a few long runs per thread (a stream the hardware
// prefetchers follow from start to end) rather than in many short ones each
// thread starts cold, and the shrinking tail still evens out a thread that
// started late. (The price: a worker preempted in the middle of a large range
// holds the job until it runs again.)
//
// A worker with no job polls for the next one for a short while (kSpinMicros)
// before it blocks in futex(2) (a condition variable elsewhere): the ops of a
// decode step follow each other within microseconds, and on a virtual machine
// a wake-up costs the caller a system call (6.5 us measured) and the worker a
// halted vCPU's restart (11-20 us before it runs, about the average gap between
// the parallel ops of an LFM2 decode step). The caller makes the call only
// when a worker is blocked. A job says whether its threads may poll
// (ThreadScope's `spin`); without polling, a decode step pays a wake-up at
// every parallel op and uses no less CPU time (bench/run_exports.py --spin
// on,off).
//
// Nobody works or polls on the caller's CPU. Linux often wakes a worker on
// its waker's CPU, even with another CPU idle (on the 2-vCPU machines we
// measure on, 2000 wake-ups out of 2000), where it would only share the
// caller's core until the load balancer moved it. A worker that finds itself
// there moves itself to another CPU it may run on (two sched_setaffinity
// calls, the second giving back its whole mask) before it takes a range; if
// it cannot, it sleeps instead of polling, and the caller sleeps instead of
// polling for its range.
//
//===----------------------------------------------------------------------===//
#include "runtime/ThreadPool.h"

#include "support/Error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <sched.h>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if __has_include(<cblas.h>)
#include <cblas.h>
#endif

#if defined(OPENBLAS_VERSION)
/// Ends a threaded OpenBLAS's server threads (weak: absent from a serial
/// OpenBLAS).
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));
#endif

namespace anefit::runtime {
namespace {

/// Sleeping on and waking a 32-bit word.
class Futex {
public:
  void wait(std::atomic<uint32_t> &word, uint32_t seen) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAIT_PRIVATE, seen, nullptr,
            nullptr, 0);
#else
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return word.load() != seen; });
#endif
  }
  void wake(std::atomic<uint32_t> &word, int count) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAKE_PRIVATE, count, nullptr,
            nullptr, 0);
#else
    std::lock_guard<std::mutex> lock(mutex_);
    cv_.notify_all();
#endif
  }

private:
#if !defined(__linux__)
  std::mutex mutex_;
  std::condition_variable cv_;
#endif
};

/// The CPU the calling thread runs on (-1 where unknown): a vDSO read, no
/// system call.
inline int currentCpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

inline void cpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

/// How long an idle worker polls for the next job before it blocks: longer
/// than most gaps between the parallel ops of a decode step (the small
/// element-wise ops between two products; 18 us on average in an LFM2 step),
/// short enough that an idle interpreter costs nothing measurable. On a 4w
/// LFM2-350M step, 0 -> 30 us took two threads from 1.13x to 1.36x one
/// thread; 100 and 300 us gave no more.
constexpr int64_t kSpinMicros = 50;

constexpr int kGenShift = 40;
constexpr uint64_t kIndexMask = (uint64_t(1) << kGenShift) - 1;

class Pool {
public:
  static Pool &get() {
    static Pool *pool = new Pool(); // never destroyed: workers may outlive static destructors
    return *pool;
  }

  PoolCounters counters() const {
    return {counters_.polls.load(std::memory_order_relaxed),
            counters_.sleeps.load(std::memory_order_relaxed),
            counters_.moves.load(std::memory_order_relaxed)};
  }

  void run(int threads, bool spin, int64_t n, int64_t grain,
           const std::function<void(int64_t, int64_t)> &body) {
    int64_t chunks = (n + grain - 1) / grain;
    std::unique_lock<std::mutex> busy(dispatch_, std::try_to_lock);
    if (!busy.owns_lock() || threads <= 1 || chunks <= 1 || n > int64_t(kIndexMask)) {
      body(0, n);
      return;
    }
    int wanted = static_cast<int>(std::min<int64_t>(threads - 1, chunks - 1));
    int helpers = std::min(wanted, ensureWorkers(wanted));
    if (helpers == 0) {
      body(0, n);
      return;
    }
    uint64_t gen = (gen_.load(std::memory_order_relaxed) + 1) & 0xffffff;
    // Close the previous job's cursor before its parameters change. A worker
    // that joined it but ran late may still read the parameters below and
    // then try to claim a range under the old generation; with the cursor
    // left open (every index handed out, but fewer than this job's n) it
    // would run this job's body under the old count, and its done_ would
    // finish this job early, with a range not yet written. The fence pairs
    // with the one in work(): a worker that sees any parameter of this job
    // then fails its claim.
    next_.store(gen << kGenShift | kIndexMask, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    body_.store(&body, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    grain_.store(grain, std::memory_order_relaxed);
    share_.store(helpers + 1, std::memory_order_relaxed);
    spin_.store(spin, std::memory_order_relaxed);
    callerCpu_.store(currentCpu(), std::memory_order_relaxed);
    sharedCpu_.store(false, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    joined_.store(gen << kGenShift | uint64_t(helpers), std::memory_order_relaxed);
    next_.store(gen << kGenShift, std::memory_order_release);
    // seq_cst against the sleepers_ count a worker raises before it blocks:
    // either it sees this generation or this sees it asleep.
    gen_.store(static_cast<uint32_t>(gen), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0)
      futex_.wake(gen_, helpers);
    work(gen);
    // The caller has no range left; the last ones are running on workers.
    for (int polls = 0; done_.load(std::memory_order_acquire) < n; ++polls) {
      if (spin && polls < 2000 && !sharedCpu_.load(std::memory_order_relaxed)) {
        cpuRelax();
        continue;
      }
      uint32_t seen = doneWord_.load(std::memory_order_acquire);
      if (done_.load(std::memory_order_acquire) >= n)
        break;
      callerWaiting_.store(true, std::memory_order_seq_cst);
      if (done_.load(std::memory_order_seq_cst) < n)
        futex_.wait(doneWord_, seen);
      callerWaiting_.store(false, std::memory_order_relaxed);
    }
    if (error_)
      std::rethrow_exception(error_);
  }

private:
  Pool() = default;

  /// Starts workers until there are `count`; returns how many there are
  /// (fewer when the system refuses a thread).
  int ensureWorkers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      try {
        workers_.emplace_back([this] { loop(); });
      } catch (const std::system_error &) {
        break;
      }
    }
    return static_cast<int>(workers_.size());
  }

  void loop() {
    uint32_t seen = 0;
    bool spin = false;
    int callerCpu = -1;
    for (;;) {
      uint32_t gen = gen_.load(std::memory_order_acquire);
      if (gen == seen && !(spin && currentCpu() != callerCpu && poll(seen))) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (gen_.load(std::memory_order_seq_cst) == seen) {
          counters_.sleeps.fetch_add(1, std::memory_order_relaxed);
          futex_.wait(gen_, seen);
        }
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        continue;
      }
      gen = gen_.load(std::memory_order_acquire);
      seen = gen;
      // The settings of this job, or of a later one: either is current.
      spin = spin_.load(std::memory_order_relaxed);
      callerCpu = callerCpu_.load(std::memory_order_relaxed);
      // Join if the job still wants helpers; leave a stale or full job alone.
      uint64_t j = joined_.load(std::memory_order_acquire);
      bool joined = false;
      while ((j >> kGenShift) == gen && (j & kIndexMask) > 0)
        if (joined_.compare_exchange_weak(j, j - 1, std::memory_order_acq_rel)) {
          joined = true;
          break;
        }
      if (joined) {
        if (callerCpu >= 0 && currentCpu() == callerCpu) {
          if (moveOff(callerCpu))
            counters_.moves.fetch_add(1, std::memory_order_relaxed);
          else
            sharedCpu_.store(true, std::memory_order_relaxed);
        }
        work(gen);
      }
    }
  }

  /// Moves the calling worker to another CPU it may run on than `cpu`, and
  /// lets it run anywhere again; false if it could not.
  static bool moveOff(int cpu) {
#if defined(__linux__)
    cpu_set_t mask, others;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0 || !CPU_ISSET(cpu, &mask) ||
        CPU_COUNT(&mask) < 2)
      return false;
    others = mask;
    CPU_CLR(cpu, &others);
    if (sched_setaffinity(0, sizeof others, &others) != 0)
      return false;
    sched_setaffinity(0, sizeof mask, &mask); // it stays where it now runs
    return currentCpu() != cpu;
#else
    (void)cpu;
    return false;
#endif
  }

  /// Polls for a generation other than `seen` for up to kSpinMicros; true
  /// when one came.
  bool poll(uint32_t seen) {
    counters_.polls.fetch_add(1, std::memory_order_relaxed);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (gen_.load(std::memory_order_acquire) != seen)
          return true;
        cpuRelax();
      }
      if (std::chrono::steady_clock::now() >= deadline)
        return false;
    }
  }

  /// Takes ranges of job `gen` until none is left.
  /// A range is claimed with a compare-exchange on next_ that still holds
  /// `gen`, and the job's parameters are read after the cursor and before the
  /// claim, so a claim that succeeds used this job's parameters (see run()).
  void work(uint64_t gen) {
    for (;;) {
      uint64_t c = next_.load(std::memory_order_acquire);
      if ((c >> kGenShift) != gen)
        return;
      const auto *body = body_.load(std::memory_order_relaxed);
      int64_t n = n_.load(std::memory_order_relaxed);
      int64_t grain = grain_.load(std::memory_order_relaxed);
      int64_t share = share_.load(std::memory_order_relaxed);
      int64_t b = int64_t(c & kIndexMask);
      if (b >= n)
        return;
      int64_t e = std::min(n, b + std::max(grain, (n - b) / share));
      if (n - e < grain)
        e = n; // no range shorter than grain left behind
      std::atomic_thread_fence(std::memory_order_acquire);
      if (!next_.compare_exchange_weak(c, (c & ~kIndexMask) | uint64_t(e),
                                       std::memory_order_acq_rel))
        continue;
      try {
        (*body)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(errorMutex_);
        if (!error_)
          error_ = std::current_exception();
      }
      if (done_.fetch_add(e - b, std::memory_order_seq_cst) + (e - b) == n) {
        doneWord_.fetch_add(1, std::memory_order_release);
        if (callerWaiting_.load(std::memory_order_seq_cst))
          futex_.wake(doneWord_, 1);
      }
    }
  }

  std::mutex dispatch_;
  std::vector<std::thread> workers_;
  Futex futex_;
  std::atomic<uint32_t> gen_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<uint32_t> doneWord_{0};
  std::atomic<bool> callerWaiting_{false};
  std::atomic<const std::function<void(int64_t, int64_t)> *> body_{nullptr};
  std::atomic<int64_t> n_{0}, grain_{1}, share_{2}, done_{0};
  std::atomic<bool> spin_{true};
  std::atomic<int> callerCpu_{-1};
  std::atomic<bool> sharedCpu_{false}; // a worker with a range is on callerCpu_
  struct {
    std::atomic<uint64_t> polls{0}, sleeps{0}, moves{0};
  } counters_;
  std::atomic<uint64_t> next_{0}, joined_{0};
  std::mutex errorMutex_;
  std::exception_ptr error_;
};

thread_local int tlsThreads = 1;
thread_local bool tlsSpin = true;

} // namespace

void checkThreadCount(int64_t requested, std::string_view what) {
  if (requested < 0 || requested > kMaxThreads)
    throw InputError(std::string(what) + ": expected a count from 0 (every core) to " +
                     std::to_string(kMaxThreads) + ", found " + std::to_string(requested));
}

int resolveThreads(int requested) {
  if (requested > 0)
    return std::min(requested, kMaxThreads);
  int cores = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    cores = CPU_COUNT(&set);
#endif
  return std::clamp(cores, 1, kMaxThreads);
}

ThreadScope::ThreadScope(int threads, bool spin) : previous_(tlsThreads), previousSpin_(tlsSpin) {
  static const int cores = resolveThreads(0);
  tlsThreads = std::max(1, threads);
  tlsSpin = spin && tlsThreads <= cores;
#if defined(OPENBLAS_VERSION)
  // BLAS runs inside parallelFor chunks: OpenBLAS's own threads would only
  // compete with the pool for the same cores. A threaded OpenBLAS starts them
  // when it loads and they poll for work (about 0.1 s) before they sleep;
  // one thread for BLAS then needs none of them, so they are ended.
  static const bool once = [] {
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_)
      blas_thread_shutdown_();
    return true;
  }();
  (void)once;
#endif
}

ThreadScope::~ThreadScope() {
  tlsThreads = previous_;
  tlsSpin = previousSpin_;
}

int currentThreads() { return tlsThreads; }

PoolCounters poolCounters() { return Pool::get().counters(); }

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  if (tlsThreads <= 1 || n <= grain) {
    body(0, n);
    return;
  }
  Pool::get().run(tlsThreads, tlsSpin, n, grain, body);
}

} // namespace anefit::runtime
