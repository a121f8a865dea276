//===- AnefitBench.cpp - Google Benchmark driver for the interpreter ------===//
//
// Times what `bench/run_lfm2_350m.py` compares:
//   read_bandwidth  streaming through a buffer far larger than the caches:
//                   the memory-bandwidth bound of a decode step, on 1, 2, 4,
//                   ... threads of the interpreter's pool (read_bandwidth/
//                   threads:N), each thread taking 4 MB chunks as the kernels
//                   take rows.
//   step            one step of a model as a host steps it (runtime::Stepper
//                   with the carries the model declares: an ExecuTorch .pte's
//                   write-back of delegate outputs into its buffers, a fixed
//                   model's state map), with one set of inputs; carried
//                   inputs the set gives are their first values. The model
//                   is loaded and stepped once before timing; the peak
//                   resident memory of the process and the bytes of the model
//                   mapped with 2 MB pages are counters.
//
//   anefit-bench --benchmark_filter=read_bandwidth/threads:2 --benchmark_format=json
//   anefit-bench --model M.mil --inputs I.npz|random [--threads N] [--no-spin]
//                [--exact-products] [--precision fp32|fp16] [--steps N] [--isa
//                portable|avx2|avx2vnni|avx512|avx512vnni|best]
//                [--prefetch auto|on|off]
//                --benchmark_filter=step --benchmark_format=json
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"
#include "runtime/Interpreter.h"
#include "runtime/Npy.h"
#include "runtime/RandomInput.h"
#include "runtime/Stepper.h"
#include "runtime/ThreadPool.h"
#include "runtime/kernels/Lazy.h"
#include "support/Error.h"

#include <benchmark/benchmark.h>

#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <sys/resource.h>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using namespace anefit;

/// Bytes streamed per pass: far beyond any last-level cache.
constexpr size_t kBandwidthBytes = size_t(512) << 20;

/// Sums a buffer as 64-bit integers with four independent chains, bound by
/// memory, not by the adds. The AVX2 form reads 128 bytes per iteration, as
/// the interpreter's weight kernels do.
uint64_t streamReadPortable(const uint64_t *p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t streamReadAvx2(const uint64_t *p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 16 <= n; i += 16) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i *>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

uint64_t streamRead(const uint64_t *p, size_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2"))
    return streamReadAvx2(p, n);
#endif
  return streamReadPortable(p, n);
}

/// Bytes one thread streams before it takes the next chunk.
constexpr size_t kBandwidthChunk = size_t(4) << 20;

void readBandwidth(benchmark::State &state) {
  runtime::ThreadScope threads(static_cast<int>(state.range(0)));
  constexpr int64_t chunkWords = kBandwidthChunk / sizeof(uint64_t);
  std::unique_ptr<uint64_t, decltype(&std::free)> buf(
      static_cast<uint64_t *>(std::aligned_alloc(64, kBandwidthBytes)), &std::free);
  std::memset(buf.get(), 1, kBandwidthBytes);
  std::atomic<uint64_t> sink{0};
  for (auto _ : state)
    runtime::parallelFor(kBandwidthBytes / kBandwidthChunk, 1, [&](int64_t c0, int64_t c1) {
      sink += streamRead(buf.get() + c0 * chunkWords, size_t(c1 - c0) * chunkWords);
    });
  benchmark::DoNotOptimize(sink.load());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBandwidthBytes));
}

/// Peak resident memory of this process image (VmHWM: unlike getrusage's
/// maxrss it does not carry over the parent's peak across exec).
double peakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stod(line.substr(6)) * 1024.0;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

/// Bytes of the model's files (the file, the package, or for MIL text the
/// files beside it) this process maps with 2 MB pages (FilePmdMapped in
/// /proc/self/smaps): weights the page cache holds in 2 MB folios stream
/// faster than in 4 KB pages.
double pmdMappedBytes(const std::string &path) {
  std::error_code ec;
  std::filesystem::path model = std::filesystem::weakly_canonical(path, ec);
  std::string root = model.extension() == ".mil" ? model.parent_path().string() : model.string();
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool ours = false;
  double bytes = 0;
  while (std::getline(smaps, line)) {
    size_t slash = line.find(" /");
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') < 17) {
      ours = slash != std::string::npos && line.compare(slash + 1, root.size(), root) == 0;
    } else if (ours && line.rfind("FilePmdMapped:", 0) == 0) {
      bytes += std::stod(line.substr(14)) * 1024.0;
    }
  }
  return bytes;
}

struct StepArgs {
  std::string model, inputs;
  int threads = 1;
  bool spin = true;
  bool exactProducts = false;
  runtime::Precision precision = runtime::Precision::FP32;
  int64_t steps = 0;
};

void registerStep(const StepArgs &args) {
  auto model = std::shared_ptr<Model>(loadModel(args.model));
  const Function *fn = model->defaultFunction();
  if (!fn)
    throw InputError(args.model + ": no function to run");
  runtime::TensorMap feed;
  if (args.inputs == "random") {
    // Every input at random (seeded): to time any model, a real export too.
    std::mt19937_64 rng(0);
    FunctionDescription desc = model->description.describe(fn->name);
    for (const auto &in : fn->inputs) {
      if (in->type.isState())
        continue;
      const FeatureDescription *fd = nullptr;
      for (const FeatureDescription &d : desc.inputs)
        if (d.name == in->name)
          fd = &d;
      feed[in->name] = runtime::randomInput(*in, fd, rng);
    }
  } else {
    for (runtime::NamedTensor &nt : runtime::readNpz(args.inputs))
      feed[nt.name] = std::move(nt.tensor);
  }
  runtime::StepperOptions options;
  options.run.threads = args.threads;
  options.run.spin = args.spin;
  options.run.exactProducts = args.exactProducts;
  options.run.precision = args.precision;
  runtime::CarryMap carries = runtime::hostCarries(*model, *fn);
  for (runtime::Carry &c : carries)
    if (auto it = feed.find(c.input); it != feed.end()) {
      c.initial = it->second;
      feed.erase(it);
    }
  auto stepper = std::make_shared<runtime::Stepper>(*fn, std::move(carries), options);
  stepper->step(feed); // loads weight pages, expands what is expanded once
  std::string path = args.model;
  auto *b =
      benchmark::RegisterBenchmark("step", [model, stepper, feed, path](benchmark::State &state) {
        for (auto _ : state)
          benchmark::DoNotOptimize(stepper->step(feed));
        state.counters["peak_rss_bytes"] = peakRssBytes();
        state.counters["pmd_mapped_bytes"] = pmdMappedBytes(path);
      });
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();
  if (args.steps > 0)
    b->Iterations(args.steps);
}

} // namespace

/// read_bandwidth/threads:N for N = 1, 2, 4, ... and every core.
void registerReadBandwidth() {
  auto *b = benchmark::RegisterBenchmark("read_bandwidth", readBandwidth);
  b->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
  int cores = runtime::resolveThreads(0);
  for (int t = 1; t < cores; t *= 2)
    b->Arg(t);
  b->Arg(cores);
}

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  registerReadBandwidth();
  StepArgs args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "anefit-bench: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      args.model = value();
    else if (a == "--inputs")
      args.inputs = value();
    else if (a == "--threads")
      args.threads = std::atoi(value().c_str());
    else if (a == "--no-spin")
      args.spin = false;
    else if (a == "--exact-products")
      args.exactProducts = true;
    else if (a == "--precision") {
      try {
        args.precision = runtime::parsePrecision(value());
      } catch (const std::exception &e) {
        std::cerr << "anefit-bench: " << e.what() << "\n";
        return 2;
      }
    } else if (a == "--steps")
      args.steps = std::atoll(value().c_str());
    else if (a == "--isa") {
      // The weight kernels' instruction set (default: the best the CPU has).
      std::string isa = value();
      std::optional<runtime::KernelIsa> named = runtime::kernelIsaNamed(isa);
      if (named)
        runtime::setKernelIsaForTesting(*named);
      else if (isa != "best") {
        std::cerr
            << "anefit-bench: --isa: expected portable, neon, avx2, avx2vnni, avx512, avx512vnni "
               "or best, "
               "found '"
            << isa << "'\n";
        return 2;
      }
    } else if (a == "--prefetch") {
      // Whether the AVX-512 kernels prefetch their weight rows (default: as
      // the CPU's choice, runtime::kernelPrefetches()).
      std::string on = value();
      if (on == "on" || on == "off")
        runtime::setKernelPrefetchForTesting(on == "on");
      else if (on != "auto") {
        std::cerr << "anefit-bench: --prefetch: expected auto, on or off, found '" << on << "'\n";
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      std::cout << "usage: anefit-bench [--model MODEL --inputs INPUTS.npz|random] [--threads N] "
                   "[--no-spin] [--exact-products] [--precision fp32|fp16] [--steps N] [--isa "
                   "portable|avx2|avx2vnni|avx512|avx512vnni|best] "
                   "[--prefetch auto|on|off] "
                   "[--benchmark_* flags]\n";
      return 0;
    } else {
      std::cerr << "anefit-bench: unknown argument '" << a << "'\n";
      return 2;
    }
  }
  if (!args.model.empty()) {
    try {
      registerStep(args);
    } catch (const std::exception &e) {
      std::cerr << "anefit-bench: error: " << e.what() << "\n";
      return 2;
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
