//===- Profile.h - Time per op type of interpreter runs ---------*- C++ -*-===//
//
// `anefit run --profile` asks the interpreter to time every op it runs and
// adds the times up per op type: how many ops of the type ran, how long they
// took, what share of the runs that is, and for ops that read weights how many
// weight bytes they read and at what rate. The interpreter records through
// RunOptions::profile; without one it reads no clock.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace anefit {
struct Operation;
}

namespace anefit::runtime {

/// Constants an op reads below this many bytes in all (axes, shapes,
/// scalars) are parameters, not weights, for OpProfile::Row::weightBytes.
inline constexpr uint64_t kMinProfiledWeightBytes = 1024;

/// Time per op type, summed over every run recorded into it.
class OpProfile {
public:
  struct Row {
    std::string opType;
    /// Ops of this type the runs went through (a value computed from
    /// constants alone and kept from an earlier run counts, at no time).
    uint64_t count = 0;
    double seconds = 0;
    /// Bytes of weights the ops read, as stored (compressed weights at their
    /// compressed size); 0 for ops that read none and for data-movement ops,
    /// which read only part of a constant (gather's embedding rows).
    uint64_t weightBytes = 0;
  };

  /// The row of `opType`, created empty the first time; indices are stable.
  size_t rowOf(std::string_view opType);
  /// Keeps the first run recorded out of the table: only its total time is
  /// kept (firstRunSeconds). The first step of a decode loop reads every
  /// weight page from the file and computes the values kept for later steps;
  /// the steps after it are what a loop repeats.
  void keepFirstRunApart() { firstApart_ = true; }
  /// Also adds every op up in a second table, by `key(op)` ("short_conv.py:77
  /// layers.*.conv" for `run --profile --etrecord`), headed `heading`. Call
  /// before the interpreter that records into it is made.
  void groupBy(std::string heading, std::function<std::string(const Operation &)> key) {
    groupHeading_ = std::move(heading);
    groupKey_ = std::move(key);
  }
  static constexpr size_t kNoGroup = size_t(-1);
  /// The group row of `op`, created empty the first time; kNoGroup without
  /// groupBy.
  size_t groupOf(const Operation &op);
  /// Adds one op of row `row` (and of group row `group`) that took `seconds`
  /// and read `weightBytes`.
  void record(size_t row, double seconds, uint64_t weightBytes, size_t group = kNoGroup) {
    if (firstApart_ && !firstDone_)
      return;
    for (Row *r : {&rows_[row], group == kNoGroup ? nullptr : &groups_[group]})
      if (r) {
        ++r->count;
        r->seconds += seconds;
        r->weightBytes += weightBytes;
      }
  }
  /// Adds one whole run (binding inputs, every op, handing outputs back),
  /// of which `setup` went to taking the run's threads and binding the
  /// inputs and `outputs` to handing the outputs back in their declared dtypes.
  void recordRun(double seconds, double setup = 0, double outputs = 0) {
    if (firstApart_ && !firstDone_) {
      firstDone_ = true;
      firstRunSeconds_ = seconds;
      return;
    }
    ++runs_;
    runSeconds_ += seconds;
    setupSeconds_ += setup;
    outputSeconds_ += outputs;
  }

  /// Rows in the order first seen.
  const std::vector<Row> &rows() const { return rows_; }
  /// The groupBy table's rows in the order first seen (Row::opType holds
  /// the key), and its heading.
  const std::vector<Row> &groups() const { return groups_; }
  const std::string &groupHeading() const { return groupHeading_; }
  /// Rows by decreasing time (then by name).
  std::vector<Row> sortedRows() const;
  /// Runs in the table (the first one not counted when kept apart).
  uint64_t runs() const { return runs_; }
  /// Whether the first run was kept apart, and its time.
  bool firstRunApart() const { return firstApart_ && firstDone_; }
  double firstRunSeconds() const { return firstRunSeconds_; }
  double runSeconds() const { return runSeconds_; }
  /// Time of the runs spent outside any op's kernel (binding, outputs,
  /// the interpreter's own work between ops).
  double outsideOpsSeconds() const;
  double setupSeconds() const { return setupSeconds_; }
  double outputSeconds() const { return outputSeconds_; }
  /// outsideOpsSeconds() less setup and outputs: freeing values, keeping
  /// folded ones, fp16 rounding and the loop itself.
  double betweenOpsSeconds() const;

  /// The table, one row per op type by decreasing time, rows for the time
  /// outside ops (setup and inputs, returning outputs, between ops) and a total; the header says
  /// how many runs it sums, naming a run `unit` ("step" for `anefit run`). With groupBy, the
  /// group table after it, by decreasing time.
  std::string formatText(std::string_view unit = "run") const;
  /// The same as a JSON object: {"runs", "total_ms", "outside_ops_ms",
  /// "setup_inputs_ms", "returning_outputs_ms", "between_ops_ms", "ops": [{"op_type", "count",
  /// "total_ms", "percent", "weight_bytes", "gb_per_s"}]} ("weight_bytes" and "gb_per_s" only for
  /// ops reading weights); with groupBy also "groups": {"by": heading, "rows": [{"key", "count",
  /// ...}]}.
  std::string formatJson() const;

private:
  std::vector<Row> rows_;
  std::unordered_map<std::string, size_t> index_;
  std::string groupHeading_;
  std::function<std::string(const Operation &)> groupKey_;
  std::vector<Row> groups_;
  std::unordered_map<std::string, size_t> groupIndex_;
  uint64_t runs_ = 0;
  double runSeconds_ = 0;
  bool firstApart_ = false, firstDone_ = false;
  double firstRunSeconds_ = 0;
  double setupSeconds_ = 0;
  double outputSeconds_ = 0;
};

} // namespace anefit::runtime
