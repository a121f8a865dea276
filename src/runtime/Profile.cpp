//===- Profile.cpp - Time per op type of interpreter runs -----------------===//
#include "runtime/Profile.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace anefit::runtime {

size_t OpProfile::rowOf(std::string_view opType) {
  auto [it, fresh] = index_.emplace(std::string(opType), rows_.size());
  if (fresh)
    rows_.push_back(Row{std::string(opType)});
  return it->second;
}

size_t OpProfile::groupOf(const Operation &op) {
  if (!groupKey_)
    return kNoGroup;
  std::string key = groupKey_(op);
  auto [it, fresh] = groupIndex_.emplace(key, groups_.size());
  if (fresh)
    groups_.push_back(Row{std::move(key)});
  return it->second;
}

namespace {

std::vector<OpProfile::Row> byTime(std::vector<OpProfile::Row> out) {
  std::sort(out.begin(), out.end(), [](const OpProfile::Row &a, const OpProfile::Row &b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.opType < b.opType;
  });
  return out;
}

} // namespace

std::vector<OpProfile::Row> OpProfile::sortedRows() const { return byTime(rows_); }

double OpProfile::outsideOpsSeconds() const {
  double ops = 0;
  for (const Row &r : rows_)
    ops += r.seconds;
  return std::max(0.0, runSeconds_ - ops);
}

double OpProfile::betweenOpsSeconds() const {
  return std::max(0.0, outsideOpsSeconds() - setupSeconds_ - outputSeconds_);
}

namespace {

double percentOf(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

/// Weight bytes per second in GB/s (1e9 bytes), or 0 without time.
double gbPerSecond(uint64_t bytes, double seconds) {
  return seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0;
}

/// One row of a table: its key padded to `width`, count, total ms, share of
/// the runs and, for rows that read weights, MB and GB/s.
std::string rowText(const OpProfile::Row &r, int width, double runSeconds) {
  char line[640];
  if (r.weightBytes)
    std::snprintf(line, sizeof line, "  %-*s %8llu %11.3f %6.1f%% %11.3f %7.1f\n", width,
                  r.opType.c_str(), (unsigned long long)r.count, r.seconds * 1e3,
                  percentOf(r.seconds, runSeconds), double(r.weightBytes) / 1e6,
                  gbPerSecond(r.weightBytes, r.seconds));
  else
    std::snprintf(line, sizeof line, "  %-*s %8llu %11.3f %6.1f%%\n", width, r.opType.c_str(),
                  (unsigned long long)r.count, r.seconds * 1e3, percentOf(r.seconds, runSeconds));
  return line;
}

/// The same as JSON, the key under `keyName`.
nlohmann::ordered_json rowJson(const OpProfile::Row &r, const char *keyName, double runSeconds) {
  nlohmann::ordered_json row{{keyName, r.opType},
                             {"count", r.count},
                             {"total_ms", r.seconds * 1e3},
                             {"percent", percentOf(r.seconds, runSeconds)}};
  if (r.weightBytes) {
    row["weight_bytes"] = r.weightBytes;
    row["gb_per_s"] = gbPerSecond(r.weightBytes, r.seconds);
  }
  return row;
}

} // namespace

std::string OpProfile::formatText(std::string_view unit) const {
  std::string noun(unit);
  std::string out = "profile: " + std::to_string(runs_) + " " + noun + (runs_ == 1 ? "" : "s");
  if (firstRunApart())
    out += " after the first";
  if (runs_ > 1)
    out += ", times summed over the " + noun + "s";
  if (firstRunApart()) {
    char first[96];
    std::snprintf(first, sizeof first,
                  " (the first took %.3f ms: weight pages read, kept values made)",
                  firstRunSeconds_ * 1e3);
    out += first;
  }
  out += "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-28s %8s %11s %7s %11s %7s\n", "op type", "count",
                "total ms", "% run", "weight MB", "GB/s");
  out += line;
  uint64_t count = 0;
  for (const Row &r : sortedRows()) {
    count += r.count;
    out += rowText(r, 28, runSeconds_);
  }
  for (auto [name, seconds] : {std::pair<const char *, double>{"(setup, inputs)", setupSeconds_},
                               {"(returning outputs)", outputSeconds_},
                               {"(between ops)", betweenOpsSeconds()}}) {
    std::snprintf(line, sizeof line, "  %-28s %8s %11.3f %6.1f%%\n", name, "", seconds * 1e3,
                  percentOf(seconds, runSeconds_));
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-28s %8llu %11.3f %6.1f%%\n", "total",
                (unsigned long long)count, runSeconds_ * 1e3, runSeconds_ > 0 ? 100.0 : 0.0);
  out += line;
  if (!groupKey_)
    return out;
  // The keys are source lines and module paths: as wide as the longest.
  int width = 28;
  for (const Row &r : groups_)
    width = std::max(width, int(std::min<size_t>(r.opType.size(), 160)));
  out += "by " + groupHeading_ + ":\n";
  char wide[640];
  std::snprintf(wide, sizeof wide, "  %-*s %8s %11s %7s %11s %7s\n", width, "", "count", "total ms",
                "% run", "weight MB", "GB/s");
  out += wide;
  for (const Row &r : byTime(groups_))
    out += rowText(r, width, runSeconds_);
  return out;
}

std::string OpProfile::formatJson() const {
  using json = nlohmann::ordered_json;
  json j;
  j["runs"] = runs_;
  if (firstRunApart())
    j["first_run_ms"] = firstRunSeconds_ * 1e3;
  j["total_ms"] = runSeconds_ * 1e3;
  j["outside_ops_ms"] = outsideOpsSeconds() * 1e3;
  j["setup_inputs_ms"] = setupSeconds_ * 1e3;
  j["returning_outputs_ms"] = outputSeconds_ * 1e3;
  j["between_ops_ms"] = betweenOpsSeconds() * 1e3;
  j["ops"] = json::array();
  for (const Row &r : sortedRows())
    j["ops"].push_back(rowJson(r, "op_type", runSeconds_));
  if (groupKey_) {
    json rows = json::array();
    for (const Row &r : byTime(groups_))
      rows.push_back(rowJson(r, "key", runSeconds_));
    j["groups"] = {{"by", groupHeading_}, {"rows", std::move(rows)}};
  }
  return dumpJson(j);
}

} // namespace anefit::runtime
