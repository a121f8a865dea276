//===- RunCommand.cpp - anefit run: execute a model on the CPU ------------===//
//
// Parses the options, reads .npy/.npz inputs and runs one function with
// runtime::ModelRun (inputs bound per step or at random, Core ML states and
// the state map's carries kept between steps); prints a summary of every
// output (or, with --json, one JSON document), with --profile the time per
// op type (runtime::OpProfile), and optionally writes outputs and states to
// an .npz archive.
//
//===----------------------------------------------------------------------===//
#include "Command.h"
#include "fix/Quality.h"

#include "io/ETRecord.h"
#include "io/ModelIO.h"
#include "report/Sources.h"
#include "runtime/ExecuTorch.h"
#include "runtime/ModelRun.h"
#include "runtime/Npy.h"
#include "runtime/Profile.h"
#include "runtime/ThreadPool.h"
#include "runtime/kernels/Isa.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <unistd.h>

namespace anefit::cli {
namespace {

using runtime::NamedTensor;
using runtime::Tensor;
using json = nlohmann::ordered_json;

struct RunCliOptions {
  std::string model;
  std::string function;
  std::vector<std::string> inputs;
  std::string inputsNpz;
  bool random = false;
  uint64_t seed = 0;
  int64_t steps = 0;
  std::vector<std::string> states;
  std::string precision = "fp32";
  int threads = 0;
  bool noSpin = false;
  bool exactProducts = false;
  std::string output;
  bool force = false;
  std::string maxMemory;
  bool json = false;
  bool profile = false;
  std::string etrecord;
  std::string sourceRoot;
  std::string engine = "interpreter";
  std::string perplexity;
  std::string tokenizer;
  int64_t maxTokens = kDefaultMaxTextTokens;
  int64_t window = 0;
};

/// `--perplexity TEXT --tokenizer TOKENIZER`: the text's tokens teacher-forced
/// through the model at fp32 and fp16 (fix/Quality.h).
int runPerplexity(const RunCliOptions &opts) {
  for (auto [given, flag] : {std::pair{!opts.inputs.empty(), "--input"},
                             {!opts.inputsNpz.empty(), "--inputs"},
                             {opts.random, "--random"},
                             {opts.steps != 0, "--steps"},
                             {!opts.states.empty(), "--state"},
                             {!opts.output.empty(), "--output"},
                             {opts.profile, "--profile"},
                             {opts.engine != "interpreter", "--engine"}})
    if (given)
      failExpected("", flag, "no inputs, steps or outputs of its own with --perplexity",
                   std::string(flag));
  if (opts.tokenizer.empty())
    failExpected("", "--perplexity", "--tokenizer TOKENIZER.json", "no --tokenizer");
  applyMaxMemory(opts.maxMemory);
  runtime::checkThreadCount(opts.threads, "--threads");
  QualityOptions q;
  q.function = opts.function;
  readTextTokens(q, opts.perplexity, opts.tokenizer, opts.maxTokens);
  q.window = opts.window;
  q.threads = opts.threads;
  q.exactProducts = opts.exactProducts;
  std::unique_ptr<Model> model = loadModel(opts.model);
  bool tty = !opts.json && isatty(STDERR_FILENO);
  q.progress = [&](size_t run, int64_t done, int64_t total) {
    if (tty && (done % 16 == 0 || done == total))
      std::cerr << "\r" << (run == 0 ? "fp32" : "fp16") << ": " << done << "/" << total << " tokens"
                << (done == total ? "\n" : "") << std::flush;
  };
  QualityResult r = measureQuality(*model, q);
  auto name = [](runtime::Precision p) { return p == runtime::Precision::FP16 ? "fp16" : "fp32"; };
  if (opts.json) {
    json runs = json::array();
    for (const QualityRun &run : r.runs)
      runs.push_back(
          {{"precision", name(run.precision)},
           {"perplexity", std::isfinite(run.perplexity) ? json(run.perplexity) : json(nullptr)},
           {"nll", std::isfinite(run.nll) ? json(run.nll) : json(nullptr)},
           {"top1Correct", run.top1Correct},
           {"top1AgreeWithFp32", run.agreeWithFirst},
           {"nonFiniteSteps", run.nonFiniteSteps}});
    json j = {{"schema", "anefit.perplexity/1"},
              {"model", opts.model},
              {"text", opts.perplexity},
              {"tokenizer", opts.tokenizer},
              {"function", r.function},
              {"tokenInput", r.tokenInput},
              {"positionInput", r.positionInput},
              {"logits", r.logitsOutput},
              {"vocab", r.vocab},
              {"tokens", r.predicted + r.windows},
              {"windows", r.windows},
              {"predicted", r.predicted},
              {"runs", runs}};
    std::cout << dumpJson(j, 2) << "\n";
    return kExitOk;
  }
  std::cout << "perplexity: " << opts.model << " on " << opts.perplexity << " ("
            << r.predicted + r.windows << " tokens, "
            << (r.windows > 1 ? "in " + std::to_string(r.windows) + " windows of at most " +
                                    std::to_string(q.window) + ", "
                              : std::string())
            << r.predicted << " predicted, teacher-forced; '" << r.tokenInput << "'"
            << (r.positionInput.empty() ? "" : " at '" + r.positionInput + "'") << " -> '"
            << r.logitsOutput << "')\n";
  for (const QualityRun &run : r.runs) {
    char buf[300];
    std::snprintf(buf, sizeof buf, "  %s: perplexity %.4g, top-1 is the next token on %zu/%lld",
                  name(run.precision), run.perplexity, run.top1Correct,
                  static_cast<long long>(r.predicted));
    std::cout << buf;
    if (&run != &r.runs.front())
      std::cout << "; top-1 agrees with fp32 on " << run.agreeWithFirst << "/" << r.predicted;
    if (run.nonFiniteSteps)
      std::cout << "; " << run.nonFiniteSteps << " steps with inf or NaN logits";
    std::cout << "\n";
  }
  return kExitOk;
}

/// Splits "NAME=FILE".
std::pair<std::string, std::string> splitAssignment(const std::string &s, const char *flag) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw InputError(std::string(flag) + ": expected NAME=FILE.npy, found '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

std::string typeText(const Tensor &t) {
  std::string s = "(";
  for (int64_t d : t.shape())
    s += std::to_string(d) + ", ";
  return s + std::string(dtypeName(t.dtype())) + ")";
}

/// "name (1, 8, fp32)  min -1.2 max 3.4 mean 0.01  nan 0 inf 0".
void printSummary(std::ostream &os, const std::string &name, const Tensor &t,
                  const runtime::TensorStats &s) {
  char buf[256];
  if (s.finite + s.infs == 0)
    std::snprintf(buf, sizeof buf, "  %s %s  no finite values  nan %lld inf %lld", name.c_str(),
                  typeText(t).c_str(), (long long)s.nans, (long long)s.infs);
  else
    std::snprintf(buf, sizeof buf, "  %s %s  min %.6g max %.6g mean %.6g  nan %lld inf %lld",
                  name.c_str(), typeText(t).c_str(), s.min, s.max, s.mean, (long long)s.nans,
                  (long long)s.infs);
  os << buf << "\n";
}

/// {"name", "shape", "dtype", "min", "max", "mean", "nans", "infs"} (min,
/// max and mean null without finite values).
json summaryJson(const std::string &name, const Tensor &t, const runtime::TensorStats &s) {
  bool any = s.finite + s.infs > 0;
  auto number = [&](double v) { return any && std::isfinite(v) ? json(v) : json(nullptr); };
  return json{{"name", name},         {"shape", t.shape()},   {"dtype", dtypeName(t.dtype())},
              {"min", number(s.min)}, {"max", number(s.max)}, {"mean", number(s.mean)},
              {"nans", s.nans},       {"infs", s.infs}};
}

/// ", kernels ISA" for the summary line, and where linears declared fp16 put
/// x on 16-bit grids for their int4 products, that too.
std::string kernelsSaid(bool exactProducts, runtime::Precision precision) {
  std::string s = std::string(", kernels ") + runtime::kernelIsaName(runtime::kernelIsa());
  if (exactProducts)
    return s;
  if (precision == runtime::Precision::FP16 && runtime::roundedProductsTakeGrid16())
    s += " (int4 products of fp16 linears: x on 16-bit grids, the weights' fp16 values exact; "
         "--exact-products: exact)";
  else if (precision == runtime::Precision::FP32 && runtime::kernelsTakeGrid16())
    s += " (int4 products of fp16 linears on 16-bit grids; --exact-products: fp32-grade)";
  return s;
}

/// The same for --json: "kernels" and "int4_products".
void addKernels(json &j, bool exactProducts, runtime::Precision precision) {
  j["kernels"] = runtime::kernelIsaName(runtime::kernelIsa());
  bool grid = !exactProducts &&
              (precision == runtime::Precision::FP16 ? runtime::roundedProductsTakeGrid16()
                                                     : runtime::kernelsTakeGrid16());
  j["int4_products"] = grid ? "16-bit grid in fp16 linears" : "fp32-grade";
}

/// `run --engine executorch`: the whole program in ExecuTorch's runtime, its
/// Core ML delegates on the interpreter (runtime/ExecuTorch.h). A method's
/// inputs have no names in a .pte: they are input0, input1, ... in order.
int runInExecuTorch(const RunCliOptions &opts) {
  auto [path, selector] = splitPteSelector(opts.model);
  if (detectFormat(path) != ModelFormat::Pte || selector)
    throw InputError("--engine executorch: expected an ExecuTorch program (a .pte, without #N), "
                     "found '" +
                     opts.model + "'");
  if (opts.profile || !opts.states.empty() || !opts.etrecord.empty())
    throw InputError(std::string("--engine executorch: ") +
                     (opts.profile             ? "--profile"
                      : !opts.etrecord.empty() ? "--etrecord"
                                               : "--state") +
                     " applies to the interpreter's own run (--engine interpreter)");
  std::string why;
  std::shared_ptr<runtime::ExecuTorchEngine> engine = runtime::ExecuTorchEngine::load(&why);
  if (!engine)
    throw InputError("--engine executorch: " + why);
  std::string method = opts.function.empty() ? "forward" : opts.function;
  runtime::RunInputs given;
  if (!opts.inputsNpz.empty())
    given.addArchive(runtime::readNpz(opts.inputsNpz), opts.inputsNpz);
  for (const std::string &s : opts.inputs) {
    auto [name, file] = splitAssignment(s, "--input");
    given.shared[name] = runtime::readNpy(file);
  }
  given.checkSteps(opts.steps);
  int64_t steps = opts.steps ? opts.steps : std::max<int64_t>(1, given.perStepCount());
  OutputOptions outputPolicy;
  outputPolicy.force = opts.force;
  // ExecuTorch's loader reads the program, not anefit's tracked inputs: the
  // output is kept clear of it before anything runs or is printed.
  outputPolicy.alsoAvoid = {path};
  if (!opts.output.empty())
    checkOutput(opts.output, outputPolicy);

  // --random follows ExecuTorch's LLM conventions (runtime::llmDecodeInput).
  int64_t vocab = opts.random ? engine->metadataInt(path, "get_vocab_size").value_or(0) : 0;
  runtime::LlmDecodeInputs random(vocab, opts.seed);
  auto input = [&](int64_t step, const runtime::DeclaredInput &in) -> Tensor {
    std::string name = "input" + std::to_string(in.index);
    auto per = given.perStep.find(step);
    if (per != given.perStep.end() && per->second.count(name))
      return per->second.at(name);
    if (given.shared.count(name))
      return given.shared.at(name);
    if (opts.random)
      return random(step, in);
    std::string shape;
    for (int64_t d : in.shape)
      shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw InputError("missing input '" + name + "' (" + std::string(dtypeName(in.dtype)) + ", (" +
                     shape + ")) for step " + std::to_string(step) + "; give it with --input " +
                     name + "=FILE.npy, --inputs FILE.npz or --random");
  };
  runtime::RunOptions run;
  run.precision = runtime::parsePrecision(opts.precision);
  run.threads = opts.threads;
  run.exactProducts = opts.exactProducts;
  auto started = std::chrono::steady_clock::now();
  std::vector<std::vector<Tensor>> results = engine->run(path, method, steps, run, input);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  std::ostream text(opts.json ? nullptr : std::cout.rdbuf());
  text << "ExecuTorch " << engine->version() << " runtime, Core ML delegates on anefit's "
       << "interpreter: method " << method << ", " << steps << (steps == 1 ? " step" : " steps")
       << ", precision " << opts.precision << kernelsSaid(opts.exactProducts, run.precision)
       << "\n";
  std::optional<runtime::NpzWriter> archive;
  if (!opts.output.empty())
    archive.emplace(opts.output, outputPolicy);
  json steps_ = json::array();
  for (size_t k = 0; k < results.size(); ++k) {
    std::string prefix = steps > 1 ? "step" + std::to_string(k) + "/" : "";
    if (steps > 1)
      text << "step " << k << "\n";
    json step{{"step", k}, {"outputs", json::array()}};
    for (size_t o = 0; o < results[k].size(); ++o) {
      std::string name = "output" + std::to_string(o);
      runtime::TensorStats st = runtime::statsOf(results[k][o]);
      if (opts.json)
        step["outputs"].push_back(summaryJson(name, results[k][o], st));
      else
        printSummary(text, name, results[k][o], st);
      if (archive)
        archive->add(prefix + name, results[k][o]);
    }
    steps_.push_back(std::move(step));
  }
  if (archive) {
    archive->finish();
    text << "wrote " << archive->size() << " arrays to " << opts.output << "\n";
  }
  char timing[120];
  std::snprintf(timing, sizeof timing, "%.1f ms per step (program load included)",
                1000.0 * seconds / double(steps));
  text << timing << "\n";
  if (opts.json) {
    json j{
        {"schema", "anefit.run/1"},     {"engine", "executorch"}, {"executorch", engine->version()},
        {"function", method},           {"steps", steps},         {"precision", opts.precision},
        {"results", std::move(steps_)}, {"states", json::array()}};
    addKernels(j, opts.exactProducts, run.precision);
    if (!opts.output.empty())
      j["output"] = opts.output;
    std::cout << dumpJson(j, 2) << "\n";
  }
  return kExitOk;
}

int runRun(const RunCliOptions &opts) {
  if (!opts.perplexity.empty())
    return runPerplexity(opts);
  if (!opts.tokenizer.empty())
    failExpected("", "--tokenizer", "--perplexity TEXT", "no --perplexity");
  if (opts.engine == "executorch")
    return runInExecuTorch(opts);
  if (opts.engine != "interpreter")
    throw InputError("--engine: expected interpreter or executorch, found '" + opts.engine + "'");
  applyMaxMemory(opts.maxMemory);
  runtime::ModelRunOptions options;
  options.run.precision = runtime::parsePrecision(opts.precision);
  if (!opts.etrecord.empty() && !opts.profile)
    failExpected("", "--etrecord", "--profile (the ETRecord groups its table by source line)",
                 "no --profile");
  if (!opts.sourceRoot.empty() && opts.etrecord.empty())
    failExpected("", "--source-root", "--etrecord", "no --etrecord");
  std::unique_ptr<Model> model = loadModel(opts.model);
  std::optional<ETRecord> record;
  std::optional<report::SourceJoin> join;
  if (!opts.etrecord.empty()) {
    record = readETRecord(opts.etrecord);
    join.emplace(*model, *record, opts.sourceRoot, opts.model);
  }

  // Inputs: per step from --inputs (step<k>/NAME or NAME), for every step
  // from --input, the rest at random with --random.
  options.function = opts.function;
  if (!opts.inputsNpz.empty())
    options.inputs.addArchive(runtime::readNpz(opts.inputsNpz), opts.inputsNpz);
  for (const std::string &s : opts.inputs) {
    auto [name, file] = splitAssignment(s, "--input");
    options.inputs.shared[name] = runtime::readNpy(file);
  }
  for (const std::string &s : opts.states) {
    auto [name, file] = splitAssignment(s, "--state");
    options.initialStates[name] = runtime::readNpy(file);
  }
  // Every input has been read: refuse a bad output before running.
  OutputOptions outputPolicy;
  outputPolicy.force = opts.force;
  // An archive written to standard output (-o -) keeps it to itself: the
  // summary goes to standard error, and --json, which has no other place,
  // is refused.
  bool archiveOnStdout = false;
  if (!opts.output.empty()) {
    OutputTarget target = checkOutput(opts.output, outputPolicy);
    archiveOnStdout = target.mode == OutputMode::Stream && target.streamFd == STDOUT_FILENO;
    if (archiveOnStdout && opts.json)
      throw InputError("--json and -o " + opts.output +
                       " both write to standard output; write the archive to a file");
  }
  options.random = opts.random;
  options.seed = opts.seed;
  options.steps = opts.steps;
  options.missingInputHint = "give it with --input NAME=FILE.npy, --inputs FILE.npz or --random";

  options.run.threads = opts.threads;
  options.run.spin = !opts.noSpin;
  options.run.exactProducts = opts.exactProducts;
  runtime::OpProfile profile;
  if (opts.profile)
    options.run.profile = &profile;
  if (join)
    profile.groupBy("source line (--etrecord)", [&join](const Operation &op) {
      ane::Finding::Source src = join->of(op);
      std::string key = report::sourceLine(src);
      if (!src.module.empty())
        key += "  " + report::moduleGroup(src.module);
      return key;
    });
  bool tty = isatty(fileno(stderr));
  auto started = std::chrono::steady_clock::now();
  if (tty)
    options.run.progress = [&, last = std::chrono::steady_clock::time_point()](
                               size_t done, size_t total) mutable {
      auto now = std::chrono::steady_clock::now();
      if (now - started < std::chrono::seconds(1) || now - last < std::chrono::milliseconds(200))
        return;
      last = now;
      std::fprintf(stderr, "\r  running op %zu/%zu", done, total);
      if (done == total)
        std::fprintf(stderr, "\r%40s\r", "");
    };
  runtime::ModelRun run(*model, std::move(options));
  // Several steps: the table shows the steps a loop repeats, the first apart.
  if (run.steps() > 1)
    profile.keepFirstRunApart();
  size_t moved = 0, writtenBack = 0;
  for (const runtime::Carry &c : run.carries())
    ++(c.source == "state map" ? moved : writtenBack);
  // Text goes to `text`: stdout (stderr when the archive goes there), or
  // nowhere with --json.
  std::ostream text(opts.json ? nullptr : archiveOnStdout ? std::cerr.rdbuf() : std::cout.rdbuf());
  if (moved)
    text << "state map: carrying " << moved
         << " moved state(s) from output to input, starting from zeros\n";
  if (writtenBack)
    text << "ExecuTorch write-back: carrying " << writtenBack
         << " delegate output(s) into their buffer inputs between steps, starting from "
            "zeros\n";

  // Arrays go to the archive as each step ends: a long run holds one step's.
  std::optional<runtime::NpzWriter> archive;
  if (!opts.output.empty())
    archive.emplace(opts.output, outputPolicy);
  json results = json::array(), finalStates = json::array();
  text << "function " << run.function().name << ", " << run.steps()
       << (run.steps() == 1 ? " step" : " steps") << ", precision " << opts.precision
       << kernelsSaid(opts.exactProducts, options.run.precision) << "\n";
  while (!run.done()) {
    runtime::StepRecord r = run.next();
    std::string prefix = run.stepped() ? "step" + std::to_string(r.step) + "/" : "";
    if (run.stepped())
      text << "step " << r.step << "\n";
    json step{{"step", r.step}, {"outputs", json::array()}};
    for (NamedTensor &o : r.outputs) {
      runtime::TensorStats s = runtime::statsOf(o.tensor);
      if (opts.json)
        step["outputs"].push_back(summaryJson(o.name, o.tensor, s));
      else
        printSummary(text, o.name, o.tensor, s);
      if (archive)
        archive->add(prefix + o.name, o.tensor);
    }
    for (NamedTensor &st : r.states) {
      if (run.done()) {
        runtime::TensorStats s = runtime::statsOf(st.tensor);
        if (opts.json)
          finalStates.push_back(summaryJson(st.name, st.tensor, s));
        else
          printSummary(text, "state " + st.name, st.tensor, s);
      }
      if (archive)
        archive->add(prefix + "state/" + st.name, st.tensor);
    }
    // Only what is asked for is kept from step to step: a long run without
    // -o and --json holds one step's values at a time.
    if (opts.json)
      results.push_back(std::move(step));
  }
  if (archive) {
    archive->finish();
    text << "wrote " << archive->size() << " arrays to " << opts.output << "\n";
  }
  if (opts.profile)
    text << profile.formatText("step");
  if (opts.json) {
    json j{{"schema", "anefit.run/1"},      {"function", run.function().name},
           {"steps", run.steps()},          {"precision", opts.precision},
           {"results", std::move(results)}, {"states", std::move(finalStates)}};
    addKernels(j, opts.exactProducts, options.run.precision);
    if (!opts.output.empty())
      j["output"] = opts.output;
    if (opts.profile)
      j["profile"] = json::parse(profile.formatJson());
    std::cout << dumpJson(j, 2) << "\n";
  }
  return kExitOk;
}

} // namespace

void registerRun(CLI::App &verb, VerbResult &result) {
  auto opts = std::make_shared<RunCliOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("MODEL", opts->model, modelArgumentHelp())->required();
  cmd->add_option("--function", opts->function, "Function to run (default: the model's default)");
  cmd->add_option("--input", opts->inputs, "Input from a .npy file: NAME=FILE.npy (repeatable)");
  cmd->add_option("--inputs", opts->inputsNpz,
                  ".npz of inputs: NAME, or step<k>/NAME for step k of a --steps run");
  cmd->add_flag("--random", opts->random, "Fill inputs not given with random values");
  cmd->add_option("--seed", opts->seed, "Seed for --random (default 0)")
      ->check(unsignedIn(0, UINT64_MAX));
  cmd->add_option("--steps", opts->steps,
                  "Run N steps, carrying Core ML states from step to step (default: 1, or the "
                  "number of step<k>/ groups in --inputs)")
      ->check(integerIn(0, kMaxSteps));
  cmd->add_option("--state", opts->states,
                  "Initial value of a state: NAME=FILE.npy (repeatable; default zeros)");
  cmd->add_option("--precision", opts->precision,
                  "fp32 (default) or fp16: round every op's float result to fp16 like the ANE");
  cmd->add_option("--threads", opts->threads,
                  "Threads the interpreter uses (default 0: every core; at most " +
                      std::to_string(runtime::kMaxThreads) + ")")
      ->check(integerIn(0, runtime::kMaxThreads));
  cmd->add_flag("--no-spin", opts->noSpin,
                "Idle threads sleep at once between parallel ops instead of polling for up to "
                "50 us: no CPU time spent waiting, for a wake-up per parallel op (about 20 us "
                "on a virtual machine); for a machine shared with other work");
  cmd->add_flag(
      "--exact-products", opts->exactProducts,
      "Keep every product with int4 weights fp32-grade. Without it, on CPUs with AVX2 "
      "but neither AVX-512 nor AVX-VNNI, a linear whose result the model declares fp16 puts x on a "
      "16-bit grid per block of 32 weights (each x off by at most 2^-15 of its "
      "block's largest |x|), which made the linears of a 4w export 1.26x faster; with "
      "--precision fp16, on CPUs with AVX2 but not AVX-512, the same grid with each weight "
      "the fp16 value the device holds (the exact form looks each weight up in a table)");
  cmd->add_option("-o,--output", opts->output,
                  "Write outputs (and states) to an .npz: NAME, or step<k>/NAME and "
                  "step<k>/state/NAME for stepped runs");
  cmd->add_flag("--force", opts->force, "Replace the output file if it exists (never an input)");
  cmd->add_flag("--profile", opts->profile,
                "Time every op and print a table per op type: count, total ms, % of the run, "
                "weight bytes read and GB/s (summed over --steps; with several steps the "
                "first, which reads the weights in, is timed apart)");
  cmd->add_option("--etrecord", opts->etrecord,
                  "With --profile: the export's ETRecord (export_llm "
                  "+debug.generate_etrecord=true); the time is also added up by PyTorch source "
                  "line and module (layers.*.conv: every layer's as one), so the table names "
                  "the lines of model code that cost the time");
  cmd->add_option("--source-root", opts->sourceRoot,
                  "With --etrecord: show source paths relative to this directory");
  cmd->add_flag("--json", opts->json,
                "Print JSON (schema anefit.run/1, see docs/run.md) instead of text");
  cmd->add_option("--engine", opts->engine,
                  "interpreter (default): the model's function on anefit's interpreter; "
                  "executorch: a whole .pte in ExecuTorch's own runtime (its memory planning, "
                  "ops and buffer write-back), each Core ML delegate on the interpreter. A "
                  "method's inputs are input0, input1, ... ; --function names the method "
                  "(default forward); --random gives an LLM program random token ids below its "
                  "get_vocab_size and the step as position");
  cmd->add_option("--perplexity", opts->perplexity,
                  "Measure an LLM decode program on this text file instead: its tokens "
                  "(--tokenizer) teacher-forced at positions 0, 1, ..., at fp32 and at the "
                  "ANE's fp16: perplexity, top-1 next-token hits, fp16's top-1 agreement with "
                  "fp32")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "With --perplexity: the model's tokenizer.json (byte-level BPE: GPT-2, "
                  "SmolLM, Llama 3, Qwen 2)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--max-tokens", opts->maxTokens,
                  "With --perplexity: tokens of the text used (default " +
                      std::to_string(kDefaultMaxTextTokens) + ")")
      ->check(integerIn(2, kMaxSteps));
  cmd->add_option("--window", opts->window,
                  "With --perplexity: read the text in windows of this many tokens, each from "
                  "position 0 with fresh caches (a text longer than the program's context; "
                  "default: one window)")
      ->check(integerIn(2, kMaxSteps));
  addMaxMemoryOption(cmd, opts->maxMemory);
  cmd->footer("Exit codes: 0 ran, 2 bad model, bad input or an op without a kernel.");
  cmd->callback([opts, &result] { result.exitCode = runGuarded([&] { return runRun(*opts); }); });
}

} // namespace anefit::cli
