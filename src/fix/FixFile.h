//===- FixFile.h - Fix a model file into a model file -----------*- C++ -*-===//
//
// `anefit fix IN -o OUT` as one call: reads IN, rewrites and proves it with
// fixModel (Fix.h) and writes OUT under the output policy of
// support/FileSystem.h, with the state map beside it when states moved.
//
// For a .pte output (read from a .pte): every Core ML delegate of the
// program, or the one of "IN.pte#N", is fixed and proven as a model of its
// own, ExecuTorch's buffer write-back carried between the steps of the
// proof. A delegate's rewrite must keep its interface (the program around it
// binds inputs and outputs by position); the rewritten payloads go into a
// copy of the program in which every other byte is kept (io/ModelIO.h
// savePteModels).
//
// Nothing is printed: a callback sees each model as it is fixed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "fix/Fix.h"
#include "support/FileSystem.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace anefit {

/// One model fixFile rewrote: the model of a file, or one Core ML delegate
/// of a .pte.
struct FixedModel {
  /// Where the model was read: the path, or "x.pte#N" for a delegate.
  std::string where;
  /// A delegate's "forward/delegate 0 (CoreMLBackend)"; empty otherwise.
  std::string label;
  std::shared_ptr<const Model> original;
  FixResult result;
};

/// A fixed .pte held against its original in ExecuTorch's own runtime
/// (runtime/ExecuTorch.h: ExecuTorch loads both programs, plans their
/// memory, runs their ops and writes their buffers back; the Core ML
/// delegates run on the interpreter): the same steps, inputs and precision
/// as the proof of each delegate, method `forward`'s outputs compared. Where
/// anefit was built without ExecuTorch's runtime it is skipped, saying so.
struct ProgramProof {
  enum class Status {
    NotRun,    ///< not a .pte, verification off or not run, nothing written
    Skipped,   ///< no ExecuTorch, or it cannot run the original: skipReason
    Same,      ///< every output within the verification's tolerance
    Different, ///< an exact rewrite, yet outside it: firstMismatch; output removed
    /// A lossy rewrite outside it (or rewrites equal at no one precision,
    /// `mixedPrecisions`): the difference is measured, not judged.
    Measured,
  };
  Status status = Status::NotRun;
  std::string skipReason;
  std::string engine; ///< "ExecuTorch 1.5.1"
  int64_t steps = 0;
  /// Both programs ran with every float result rounded to fp16 (the
  /// verification's precision, or fp16 after requantize to fp16).
  bool fp16 = false;
  size_t compared = 0;
  /// Values NaN (or the same infinity) in both programs, not compared, and
  /// the first of them (runtime::Comparison::bothNonFinite).
  size_t nonFinite = 0;
  std::string firstNonFinite;
  double maxAbsDiff = 0;
  std::string firstMismatch;
  /// Weights written as the device rounds them (equal in fp16) and a pass
  /// equal only in fp32 together: why the run is Measured.
  bool mixedPrecisions = false;
};

struct FixFileOptions {
  /// Replace an existing output (and its state map); never an input.
  bool force = false;
  /// Called after each model is fixed, before fixFile judges the result
  /// (where a caller reports it); may be empty.
  std::function<void(const FixedModel &)> onFixed;
};

struct FixFileResult {
  /// The models fixed, in order. Fixing stops after the first one whose
  /// result is not ok(); nothing is written then.
  std::vector<FixedModel> models;
  /// The file written; empty when nothing was.
  std::string output;
  /// The state map written beside a model file; empty when no state moved,
  /// for a .pte, or when nothing was written.
  std::string stateMapPath;
  /// The output is an ExecuTorch program whose Core ML payloads were
  /// rewritten.
  bool program = false;
  /// For a program: the original and the output run in ExecuTorch's runtime.
  ProgramProof executorch;

  /// Every rewrite verifies and gives the same outputs: the output was written.
  bool ok() const { return !output.empty(); }
};

/// The output policy of fix writing `output` from `input` ("x.pte#N" stands
/// for x.pte): never over, inside or around the input, an existing output
/// only with `force`, a file or a directory as the output's format is.
/// Throws InputError when the output's folder is or lies inside the input.
OutputOptions fixOutputPolicy(const std::string &input, const std::string &output, bool force);

/// Creates the folder of `output` and checks `output` against `policy`
/// (support/FileSystem.h checkOutput), before any work is done.
void prepareFixOutput(const std::string &output, const OutputOptions &policy);

/// Writes `result.fixed` to `output` under `policy` (made by
/// fixOutputPolicy, prepared by prepareFixOutput) and, when states moved,
/// the state map beside it (ir/StateMap.h stateMapPathFor); returns the
/// state map's path, or "" when none was written. The caller writes only a
/// result that is ok(). Throws InputError.
std::string writeFixedModel(const FixResult &result, const std::string &output,
                            const OutputOptions &policy);

/// Reads `input`, fixes it with `options` and writes `output` when every
/// rewrite is ok(). Throws InputError on bad input or options, an output the
/// policy refuses, a .pte output from anything but a .pte, a delegate
/// selector out of range, and a delegate rewrite that changes the delegate's
/// interface (the message names the change and the export-time remedy).
FixFileResult fixFile(const std::string &input, const std::string &output,
                      const FixOptions &options, const FixFileOptions &file = {});

} // namespace anefit
