//===- CheckBindings.cpp - anefit.check and the Report classes ------------===//
//
// `check(model)` runs the ANE checker the command line runs; `Report` keeps
// the checker's report and renders it with the same code as `anefit check`
// (text, JSON "anefit.check/1", SARIF 2.1.0), so a Python caller and the CLI
// never disagree. Findings, per-op placement and segments are plain objects.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "ane/Observations.h"
#include "fix/Numerics.h"
#include "io/ETRecord.h"
#include "report/Baseline.h"
#include "report/Sources.h"

#include "ane/Checker.h"
#include "ane/Remedies.h"
#include "partition/Partitioner.h"
#include "partition/PlanJson.h"
#include "report/Report.h"
#include "support/Error.h"
#include "support/Text.h"
#include "transforms/Pass.h"

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <variant>

namespace anefit::python {
namespace {

struct PyFinding {
  ane::Finding finding;
  /// The report is on a model read from an ExecuTorch program: the finding
  /// names its export-time remedies (as the JSON report does).
  bool exportRemedies = false;

  const ane::RuleInfo &rule() const { return ane::ruleInfo(finding.rule); }
};

struct PyOpPlacement {
  std::string function;
  ane::OpReport op;
};

struct PySegment {
  std::string function;
  ane::Segment segment;
  std::string firstOp;
  std::string lastOp;
};

/// A check report and the model it was made from.
struct PyReportData {
  ane::CheckReport report;
  std::shared_ptr<const Model> model;
};

struct PyFunctionReport {
  const ane::FunctionReport *report = nullptr;
  std::shared_ptr<const PyReportData> owner; ///< keeps `report` alive
};

struct PyReport {
  std::shared_ptr<const PyReportData> data;
  const ane::CheckReport &report() const { return data->report; }
};

std::string names(std::span<const ane::ChipInfo> chips) {
  std::string s;
  for (const ane::ChipInfo &c : chips)
    s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

std::vector<std::pair<std::string, std::string>>
casesOf(const std::vector<ane::EvidenceCase> &cases) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ane::EvidenceCase &c : cases)
    out.emplace_back(c.url, c.what);
  return out;
}

std::vector<PyOpPlacement> opsOf(const ane::FunctionReport &fr) {
  std::vector<PyOpPlacement> out;
  for (const ane::OpReport &op : fr.ops)
    out.push_back({fr.name, op});
  return out;
}

std::vector<PySegment> segmentsOf(const ane::FunctionReport &fr) {
  std::vector<PySegment> out;
  for (const ane::Segment &s : fr.segments) {
    PySegment p{fr.name, s, "", ""};
    if (s.firstOp < fr.ops.size())
      p.firstOp = fr.ops[s.firstOp].name;
    if (s.lastOp < fr.ops.size())
      p.lastOp = fr.ops[s.lastOp].name;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> ruleCodes(const std::vector<ane::RuleId> &rules) {
  std::vector<std::string> out;
  for (ane::RuleId r : rules)
    out.emplace_back(ane::ruleInfo(r).code);
  return out;
}

std::vector<PyFinding> findingsAtLeast(const ane::CheckReport &r, ane::Level threshold) {
  std::vector<PyFinding> out;
  for (const ane::Finding &f : r.findings)
    if (f.level() >= threshold)
      out.push_back({f, !r.origin.empty()});
  return out;
}

} // namespace

void applyTarget(const std::string &chip, const std::string &os, const std::string &computeUnits,
                 ane::CheckOptions &options) {
  auto c = ane::chipFromName(chip);
  if (!c)
    failExpected("", "chip", "one of: " + names(ane::allChips()), "'" + chip + "'");
  options.chip = *c;
  auto o = ane::osFromName(os);
  if (!o)
    failExpected("", "os", "one of: any, ios17, ios18, ios26", "'" + os + "'");
  options.os = *o;
  auto cu = ane::computeUnitsFromName(computeUnits);
  if (!cu)
    failExpected("", "compute_units", "cpu_and_ne or all", "'" + computeUnits + "'");
  options.computeUnits = *cu;
}

namespace {

PyReport runCheck(std::variant<PyModel, std::filesystem::path> target, const std::string &chip,
                  const std::string &os, const std::string &computeUnits,
                  const std::optional<std::string> &function,
                  const std::vector<std::string> &ignore,
                  const std::optional<std::filesystem::path> &observations,
                  const std::optional<std::filesystem::path> &etrecord,
                  const std::optional<std::string> &sourceRoot, bool numerics, int64_t steps,
                  uint64_t seed) {
  if (steps < 1)
    failExpected("", "steps", "a positive count", std::to_string(steps));
  ane::CheckOptions options;
  applyTarget(chip, os, computeUnits, options);
  options.function = function.value_or("");
  for (const std::string &code : ignore) {
    auto rule = ane::ruleFromCode(code);
    if (!rule)
      failExpected("", "ignore", "a rule id such as ANE-COV-001 (anefit.rules() lists them)",
                   "'" + code + "'");
    options.ignore.push_back(*rule);
  }

  auto data = std::make_shared<PyReportData>();
  std::string path;
  if (auto *m = std::get_if<PyModel>(&target)) {
    data->model =
        m->weightsOpen || !numerics ? m->model : loadPyModel(m->model->sourcePath, true).model;
    path = m->model->sourcePath;
  } else {
    // The checker reads types only: like the CLI, do not open weight files
    // (but to run the model for the numerics).
    path = pathText(std::get<std::filesystem::path>(target));
    data->model = loadPyModel(path, /*openWeights=*/numerics).model;
  }
  {
    nb::gil_scoped_release release;
    if (numerics) {
      NumericsOptions n;
      n.run.function = options.function;
      n.run.random = true;
      n.run.seed = seed;
      n.run.steps = steps;
      n.inputsText = "random inputs, seed " + std::to_string(seed);
      options.numerics =
          std::make_shared<const ane::NumericsMeasurement>(measureNumerics(*data->model, n));
    }
    data->report = ane::checkModel(*data->model, options);
  }
  data->report.modelPath = path;
  if (observations)
    ane::applyObservations(data->report, *data->model,
                           ane::readObservations(pathText(*observations)));
  if (etrecord)
    report::attachSources(data->report, *data->model, readETRecord(pathText(*etrecord)),
                          sourceRoot.value_or(""));
  return PyReport{std::move(data)};
}

std::string reportRepr(const PyReport &r) {
  return "<anefit.Report '" + r.report().modelPath +
         "' verdict=" + std::string(ane::verdictName(r.report().verdict)) +
         " findings=" + std::to_string(r.report().findings.size()) + ">";
}

} // namespace

nb::object reportObject(ane::CheckReport report, std::shared_ptr<const Model> model) {
  auto data = std::make_shared<PyReportData>();
  data->report = std::move(report);
  data->model = std::move(model);
  return nb::cast(PyReport{std::move(data)});
}

namespace {

/// A finding's PyTorch source, then its rule: what it predicts and how sure the evidence is.
void addFindingRule(nb::class_<PyFinding> &c) {
  c.def_prop_ro(
       "source",
       [](const PyFinding &f) -> nb::object {
         if (!f.finding.source)
           return nb::none();
         const ane::Finding::Source &src = *f.finding.source;
         nb::dict d;
         d["file"] = src.file;
         d["line"] = src.line;
         d["function"] = src.function;
         d["code"] = src.code;
         d["module"] = src.module;
         d["module_type"] = src.moduleType;
         d["node"] = src.node;
         d["buffer"] = src.buffer;
         d["writes_buffer"] = src.writesBuffer;
         d["note"] = src.note;
         return d;
       },
       "With ``check(..., etrecord=...)``: the PyTorch source behind the op (``file``, "
       "``line``, ``function``, ``code``, ``module``, ``module_type``, the edge ``node``, "
       "the ``buffer`` it reads or, with ``writes_buffer``, ExecuTorch writes its output "
       "back into, or a ``note`` saying why there is none); "
       "``None`` otherwise.")
      .def_prop_ro(
          "rule", [](const PyFinding &f) { return std::string(f.rule().code); },
          "Stable rule id, e.g. ``'ANE-STATE-002'`` (``anefit rules``).")
      .def_prop_ro(
          "title", [](const PyFinding &f) { return std::string(f.rule().title); },
          "The rule's title.")
      .def_prop_ro(
          "effect",
          [](const PyFinding &f) { return std::string(ane::effectName(f.finding.effect)); },
          "What is predicted: ``'runtime-fail'``, ``'compile-fail'``, "
          "``'wrong-numerics'``, ``'fallback'`` or ``'slow'``.")
      .def_prop_ro(
          "level",
          [](const PyFinding &f) { return std::string(ane::levelName(f.finding.level())); },
          "Its severity for ``fail_on``: the effect, a contested failure ranked ``'at-risk'`` "
          "(between ``'wrong-numerics'`` and ``'compile-fail'``).")
      .def_prop_ro(
          "certainty",
          [](const PyFinding &f) { return std::string(ane::certaintyName(f.finding.certainty)); },
          "``'confirmed'``, or ``'contested'`` when public working evidence covers this case "
          "too.")
      .def_prop_ro(
          "contradiction", [](const PyFinding &f) { return f.finding.contradiction; },
          "For a contested finding, the working evidence that contests it; empty otherwise.")
      .def_prop_ro(
          "settle",
          [](const PyFinding &f) {
            return f.finding.certainty == ane::Certainty::Contested
                       ? std::string(f.rule().settleCheck())
                       : std::string();
          },
          "For a contested finding, the check on a Mac that settles it; empty otherwise.")
      .def_prop_ro(
          "confidence",
          [](const PyFinding &f) { return std::string(ane::confidenceName(f.rule().confidence)); },
          "How well the evidence is established: ``'apple-documented'``, ``'measured'`` or "
          "``'folklore'``.");
}

/// Where a finding is and what it says.
void addFindingPlace(nb::class_<PyFinding> &c) {
  c.def_prop_ro(
       "function", [](const PyFinding &f) { return f.finding.function; },
       "The function it is about.")
      .def_prop_ro(
          "op", [](const PyFinding &f) { return f.finding.op; },
          "The op's name; empty for a whole-function finding.")
      .def_prop_ro(
          "op_type", [](const PyFinding &f) { return f.finding.opType; }, "The op's type.")
      .def_prop_ro(
          "torch_node", [](const PyFinding &f) { return f.finding.torchNode; },
          "The PyTorch node behind the op, when its name carries one.")
      .def_prop_ro(
          "types", [](const PyFinding &f) { return f.finding.types; },
          "Operand and result types of the op.")
      .def_prop_ro(
          "message", [](const PyFinding &f) { return f.finding.message; },
          "The reason, with the values found.");
}

/// The evidence behind a finding's rule and what removes it.
void addFindingEvidence(nb::class_<PyFinding> &c) {
  c.def_prop_ro(
       "evidence",
       [](const PyFinding &f) {
         std::vector<std::string> urls;
         for (std::string_view u : f.rule().evidenceUrls())
           urls.emplace_back(u);
         return urls;
       },
       "Links to the public failing evidence behind the rule.")
      .def_prop_ro(
          "fail_evidence", [](const PyFinding &f) { return casesOf(f.rule().failCases()); },
          "Public cases that fail, as ``(url, what it shows)``.")
      .def_prop_ro(
          "pass_evidence", [](const PyFinding &f) { return casesOf(f.rule().passCases()); },
          "Known-working public cases that bound the rule, as ``(url, what it shows)``.")
      .def_prop_ro(
          "fix", [](const PyFinding &f) { return fixHint(f.rule()); },
          "What removes it, and the passes ``anefit fix`` runs for it.")
      .def_prop_ro(
          "remedies",
          [](const PyFinding &f) {
            std::vector<std::map<std::string, std::string>> out;
            if (f.exportRemedies)
              for (const ane::Remedy *r : ane::remediesFor(f.finding))
                out.push_back({{"where", std::string(ane::remedyWhereName(r->where))},
                               {"setting", std::string(r->setting)},
                               {"what", std::string(r->what)},
                               {"evidence", std::string(r->evidence)}});
            return out;
          },
          "For a model read from an ExecuTorch ``.pte``: what removes it at export time, in "
          "the exporter's terms, as ``{'where': 'CoreMLPartitioner' | 'export_llm' | "
          "'model source', 'setting', 'what', 'evidence'}`` (the remedies ``anefit check`` "
          "prints); empty for other models.")
      .def_prop_ro(
          "debug_handles", [](const PyFinding &f) { return f.finding.debugHandles; },
          "ExecuTorch debug handles of the op (models read from a ``.pte``).")
      .def("__repr__", [](const PyFinding &f) {
        return "Finding(" + std::string(f.rule().code) + ", " +
               std::string(ane::effectName(f.finding.effect)) +
               (f.finding.op.empty() ? "" : ", op='" + f.finding.op + "'") + ")";
      });
}

/// anefit.Finding.
void bindFinding(nb::module_ &m) {
  nb::class_<PyFinding> c(m, "Finding", "One rule firing at one place.");
  addFindingRule(c);
  addFindingPlace(c);
  addFindingEvidence(c);
}

/// anefit.OpPlacement.
void bindOpPlacement(nb::module_ &m) {
  nb::class_<PyOpPlacement>(m, "OpPlacement", "Where the checker predicts an op runs.")
      .def_ro("function", &PyOpPlacement::function, "The function of the op.")
      .def_prop_ro(
          "name", [](const PyOpPlacement &p) { return p.op.name; }, "The op's name.")
      .def_prop_ro(
          "type", [](const PyOpPlacement &p) { return p.op.type; }, "The op's type.")
      .def_prop_ro(
          "placement",
          [](const PyOpPlacement &p) { return std::string(ane::placementName(p.op.placement)); },
          "``'ane'``, ``'cpu-gpu'`` (a fallback) or ``'blocks-ane-compile'`` (placed on the "
          "ANE, where it makes its segment's compile fail).")
      .def_prop_ro(
          "rules", [](const PyOpPlacement &p) { return ruleCodes(p.op.rules); },
          "Codes of the rules that decided the placement.")
      .def_prop_ro(
          "at_risk", [](const PyOpPlacement &p) { return p.op.atRisk; },
          "Placed on the ANE, but a contested failure rule points at it.")
      .def_prop_ro(
          "flops", [](const PyOpPlacement &p) { return p.op.flops; },
          "Estimated floating-point operations.")
      .def("__repr__", [](const PyOpPlacement &p) {
        return "OpPlacement('" + p.op.name + "', '" + p.op.type + "', '" +
               std::string(ane::placementName(p.op.placement)) + "')";
      });
}

/// anefit.Segment.
void bindSegment(nb::module_ &m) {
  nb::class_<PySegment>(m, "Segment",
                        "A maximal run of consecutive ops predicted on the same device.")
      .def_ro("function", &PySegment::function, "The function of the segment.")
      .def_prop_ro(
          "device", [](const PySegment &s) { return s.segment.onAne ? "ane" : "cpu-gpu"; },
          "``'ane'`` or ``'cpu-gpu'``.")
      .def_prop_ro(
          "compile_fails", [](const PySegment &s) { return s.segment.compileFails; },
          "An op of this ANE segment makes its compile fail.")
      .def_prop_ro(
          "at_risk", [](const PySegment &s) { return s.segment.atRisk; },
          "A contested failure points at an op of this ANE segment.")
      .def_ro("first_op", &PySegment::firstOp, "Name of its first op.")
      .def_ro("last_op", &PySegment::lastOp, "Name of its last op.")
      .def_prop_ro(
          "op_count", [](const PySegment &s) { return s.segment.opCount; }, "Number of ops.")
      .def_prop_ro(
          "flops", [](const PySegment &s) { return s.segment.flops; },
          "Estimated floating-point operations.")
      .def("__repr__", [](const PySegment &s) {
        return "Segment(" + std::string(s.segment.onAne ? "ane" : "cpu-gpu") + ", '" + s.firstOp +
               "'..'" + s.lastOp + "', " + std::to_string(s.segment.opCount) + " ops)";
      });
}

/// anefit.FunctionReport.
void bindFunctionReport(nb::module_ &m) {
  nb::class_<PyFunctionReport>(m, "FunctionReport", "The checker's summary of one function.")
      .def_prop_ro(
          "name", [](const PyFunctionReport &f) { return f.report->name; }, "The function's name.")
      .def_prop_ro(
          "verdict",
          [](const PyFunctionReport &f) {
            return std::string(ane::verdictName(f.report->verdict));
          },
          "Its verdict (see :attr:`Report.verdict`).")
      .def_prop_ro(
          "ops", [](const PyFunctionReport &f) { return opsOf(*f.report); },
          "Compute ops in program order with their placement.")
      .def_prop_ro(
          "segments", [](const PyFunctionReport &f) { return segmentsOf(*f.report); },
          "Segments in program order.")
      .def_prop_ro(
          "boundaries", [](const PyFunctionReport &f) { return f.report->boundaries; },
          "ANE <-> CPU/GPU transitions.")
      .def_prop_ro(
          "ane_ops", [](const PyFunctionReport &f) { return f.report->aneOps; },
          "Ops predicted on the ANE.")
      .def_prop_ro(
          "ane_flops", [](const PyFunctionReport &f) { return f.report->aneFlops; },
          "Estimated FLOPs on the ANE.")
      .def_prop_ro(
          "total_flops", [](const PyFunctionReport &f) { return f.report->totalFlops; },
          "Estimated FLOPs of the function.")
      .def_prop_ro(
          "weight_bytes", [](const PyFunctionReport &f) { return f.report->weightBytes; },
          "Bytes of its weights as stored (compressed weights at their stored size).")
      .def_prop_ro(
          "dense_weight_bytes",
          [](const PyFunctionReport &f) { return f.report->denseWeightBytes; },
          "Bytes of its weights decompressed, as the compute ops read them.")
      .def_prop_ro(
          "states", [](const PyFunctionReport &f) { return f.report->states; },
          "Number of Core ML states.")
      .def_prop_ro(
          "covered_ops", [](const PyFunctionReport &f) { return f.report->coveredOps; },
          "Ops whose pattern a working case of the evidence corpus holds.")
      .def_prop_ro(
          "covered_flops", [](const PyFunctionReport &f) { return f.report->coveredFlops; },
          "Estimated FLOPs of those ops.")
      .def_prop_ro(
          "unverified",
          [](const PyFunctionReport &f) {
            nb::list out;
            for (const ane::UnverifiedPattern &u : f.report->unverified) {
              nb::dict d;
              d["pattern"] = u.pattern;
              d["risky"] = u.risky;
              d["ops"] = u.ops;
              d["flops"] = u.flops;
              out.append(d);
            }
            return out;
          },
          "Patterns no working case of the corpus holds, risky ones first: dicts with "
          "'pattern', 'risky', 'ops' and 'flops'.")
      .def("__repr__", [](const PyFunctionReport &f) {
        return "<anefit.FunctionReport '" + f.report->name +
               "' verdict=" + std::string(ane::verdictName(f.report->verdict)) + ">";
      });
}

/// What a report holds: the model, its verdict, findings, functions, ops and segments.
void addReportContents(nb::class_<PyReport> &c) {
  c.def_prop_ro(
       "path", [](const PyReport &r) { return r.report().modelPath; }, "The model checked.")
      .def_prop_ro(
          "origin", [](const PyReport &r) { return r.report().origin; },
          "Method and delegate inside a ``.pte``; empty otherwise.")
      .def_prop_ro(
          "verdict",
          [](const PyReport &r) { return std::string(ane::verdictName(r.report().verdict)); },
          "The worst function verdict: ``'ane'`` (every op on the ANE), ``'partial'`` "
          "(CPU/GPU fallbacks), ``'no-ane'``, ``'at-risk'`` (a failure rule fires that public "
          "working evidence contests for this case) or ``'ane-fails'`` (the ANE compile or "
          "first run is predicted to fail).")
      .def_prop_ro(
          "findings",
          [](const PyReport &r) { return findingsAtLeast(r.report(), ane::Level::Slow); },
          "Every finding, most severe first.")
      .def_prop_ro(
          "functions",
          [](const PyReport &r) {
            std::vector<PyFunctionReport> out;
            for (const ane::FunctionReport &f : r.report().functions)
              out.push_back({&f, r.data});
            return out;
          },
          "Per-function summaries.")
      .def_prop_ro(
          "ops",
          [](const PyReport &r) {
            std::vector<PyOpPlacement> out;
            for (const ane::FunctionReport &f : r.report().functions)
              for (PyOpPlacement &p : opsOf(f))
                out.push_back(std::move(p));
            return out;
          },
          "Per-op placement over every function checked, in program order.")
      .def_prop_ro(
          "segments",
          [](const PyReport &r) {
            std::vector<PySegment> out;
            for (const ane::FunctionReport &f : r.report().functions)
              for (PySegment &s : segmentsOf(f))
                out.push_back(std::move(s));
            return out;
          },
          "Segments over every function checked.")
      .def_prop_ro(
          "weight_bytes", [](const PyReport &r) { return r.report().weightBytes; },
          "Bytes of the model's weights as stored (compressed weights at their stored size).")
      .def_prop_ro(
          "dense_weight_bytes", [](const PyReport &r) { return r.report().denseWeightBytes; },
          "Bytes of the model's weights decompressed, as the compute ops read them.");
}

/// What a report advises the exporter, and what a Mac observed.
void addReportAdvice(nb::class_<PyReport> &c) {
  c.def_prop_ro(
       "skip_ops_for_coreml_delegation",
       [](const PyReport &r) {
         std::vector<std::string> ops;
         for (const partition::SkipOp &op : partition::exportAdvice(r.report()).skipOps)
           ops.push_back(op.atenOp);
         return ops;
       },
       "The aten ops (``'aten.index_put.default'``) to keep out of ExecuTorch's Core ML "
       "delegate: the PyTorch ops behind the ops this report puts off the ANE, as "
       "``anefit split --skip-list`` prints them (the default split plan).")
      .def_prop_ro(
          "observation",
          [](const PyReport &r) -> nb::object {
            if (!r.report().observation)
              return nb::none();
            return nb::module_::import_("json").attr("loads")(
                ane::renderObservationJson(*r.report().observation));
          },
          "What a Mac observed (``check(..., observations=...)``), as the ``observation`` "
          "object of the JSON report: conclusion, culprits, each suspect's prediction against "
          "the observation; ``None`` for a prediction only.")
      .def_prop_ro(
          "numerics",
          [](const PyReport &r) -> nb::object {
            if (!r.report().options.numerics)
              return nb::none();
            nb::object j = nb::module_::import_("json").attr("loads")(ane::renderJson(r.report()));
            return j["numerics"];
          },
          "What ``check(..., numerics=True)`` measured, as the ``numerics`` object of the "
          "JSON report: the run, the outputs at fp16 against fp32 (``diverged``), each op "
          "where a divergence starts (``origin``) and each square's largest |x|; ``None`` "
          "without it.");
}

/// Report.raise_for: raises AneCompileRisk, with the report and the
/// findings at or above `failOn`, if there are any.
void raiseFor(const PyReport &r, const std::string &failOn) {
  ane::Level threshold = ane::parseLevel(failOn, "fail_on");
  if (!r.report().hasFindingAtLeast(threshold))
    return;
  std::vector<PyFinding> hits = findingsAtLeast(r.report(), threshold);
  std::string message = r.report().modelPath + ": verdict " +
                        std::string(ane::verdictName(r.report().verdict)) + ", " +
                        std::to_string(hits.size()) + " finding(s) at or above " + failOn + ": ";
  for (size_t i = 0; i < hits.size() && i < 3; ++i)
    message += (i ? "; " : "") + std::string(hits[i].rule().code) +
               (hits[i].finding.op.empty() ? "" : " on '" + hits[i].finding.op + "'");
  if (hits.size() > 3)
    message += "; ...";
  nb::object type = nb::module_::import_("anefit._core").attr("AneCompileRisk");
  nb::object error = type(message);
  error.attr("report") = nb::find(r);
  error.attr("findings") = nb::cast(hits);
  PyErr_SetObject(type.ptr(), error.ptr());
  throw nb::python_error();
}

/// A report as the command line renders it, and as a CI gate.
void addReportRenderings(nb::class_<PyReport> &c) {
  // The levels `fail_on` takes, from the table `--fail-on` reads.
  static const std::string raiseForDoc = [] {
    std::vector<std::string> quoted;
    for (const std::string &name : ane::levelNames())
      quoted.push_back("``'" + name + "'``");
    return "Raises :class:`AneCompileRisk` if a finding is at least ``fail_on`` severe (" +
           joined(quoted, ", ") + "): the CI gate of ``anefit check --fail-on``.";
  }();
  c.def(
       "to_json", [](const PyReport &r) { return ane::renderJson(r.report()); },
       "The report as JSON text, schema ``anefit.check/1`` (``anefit check --json``).")
      .def(
          "to_sarif", [](const PyReport &r) { return ane::renderSarif(r.report()); },
          "The report as SARIF 2.1.0 JSON text, for code-scanning tools.")
      .def(
          "summary",
          [](const PyReport &r, bool placement) {
            return ane::renderText(r.report(), ane::TextOptions{.placement = placement});
          },
          nb::arg("placement") = false,
          "The text ``anefit check`` prints; ``placement=True`` lists every op.")
      .def(
          "has_findings",
          [](const PyReport &r, const std::string &atLeast) {
            return r.report().hasFindingAtLeast(ane::parseLevel(atLeast, "at_least"));
          },
          nb::arg("at_least") = "compile-fail",
          "True if a finding's level is at least this severe (``anefit check --fail-on``).")
      .def("raise_for", &raiseFor, nb::arg("fail_on") = "compile-fail", raiseForDoc.c_str())
      .def("__repr__", &reportRepr);
}

/// anefit.Report.
void bindReport(nb::module_ &m) {
  nb::class_<PyReport> c(m, "Report",
                         "What :func:`check` predicts for a model. Renders exactly as "
                         "``anefit check`` does.");
  addReportContents(c);
  addReportAdvice(c);
  addReportRenderings(c);
}

/// What compare_baseline found, rendered as `anefit check --baseline` does.
struct PyGate {
  bool passed = true;
  size_t regressions = 0, improvements = 0;
  std::string text, json, sarif;
};

/// The reports of a Report or a list of them (a program's delegates), and
/// the program path `check --baseline` would name them by.
std::vector<ane::CheckReport> reportsOf(const nb::object &reports, std::string &programPath) {
  std::vector<ane::CheckReport> out;
  if (nb::isinstance<PyReport>(reports))
    out.push_back(nb::cast<const PyReport &>(reports).report());
  else
    for (nb::handle r : reports)
      out.push_back(nb::cast<const PyReport &>(r).report());
  if (out.empty())
    throw InputError("reports: expected a Report or a non-empty list of them, found none");
  programPath = out[0].modelPath;
  if (out.size() > 1)
    if (size_t hash = programPath.rfind('#'); hash != std::string::npos)
      programPath.resize(hash);
  return out;
}

void bindGate(nb::module_ &m) {
  nb::class_<PyGate>(m, "Gate",
                     "A model's check held against a recorded baseline "
                     "(:func:`compare_baseline`, ``anefit check --baseline``).")
      .def_ro("passed", &PyGate::passed, "Nothing got worse than the baseline.")
      .def_ro("regressions", &PyGate::regressions,
              "How many measures and findings got worse (the gate fails on any).")
      .def_ro("improvements", &PyGate::improvements,
              "How many got better (findings gone or lower, residency up, boundaries down).")
      .def(
          "summary", [](const PyGate &g) { return g.text; },
          "The differences as ``anefit check --baseline`` prints them.")
      .def(
          "to_json", [](const PyGate &g) { return g.json; },
          "The differences as JSON, schema ``anefit.gate/1``.")
      .def(
          "to_sarif", [](const PyGate &g) { return g.sarif; },
          "SARIF 2.1.0: the current findings with their ``baselineState`` and the gone ones "
          "as ``absent``.")
      .def("__repr__", [](const PyGate &g) {
        return "<Gate " + std::string(g.passed ? "passed" : "failed") + ": " +
               std::to_string(g.regressions) + " regressions, " + std::to_string(g.improvements) +
               " improvements>";
      });

  m.def(
      "compare_baseline",
      [](const nb::object &reports, const std::filesystem::path &baseline,
         double residencyTolerance, const std::string &failOn) {
        if (!(residencyTolerance >= 0 && residencyTolerance <= 100))
          throw InputError("residency_tolerance: expected percentage points in [0, 100], found " +
                           std::to_string(residencyTolerance));
        std::string programPath;
        std::vector<ane::CheckReport> list = reportsOf(reports, programPath);
        report::GateOptions options{.residencyTolerance = residencyTolerance,
                                    .failOn = ane::parseLevel(failOn, "fail_on")};
        report::GateResult result =
            report::compareToBaseline(report::readGateRecord(baseline.string()),
                                      report::gateRecordOf(list, programPath), options);
        return PyGate{!result.regressed(),
                      result.regressions(),
                      result.improvements(),
                      report::renderGateText(result),
                      report::renderGateJson(result),
                      report::renderGateSarif(list, programPath, result)};
      },
      nb::arg("reports"), nb::arg("baseline"), nb::arg("residency_tolerance") = 0.0,
      nb::arg("fail_on") = "at-risk",
      "Holds ``reports`` (a :class:`Report`, or a program's list from "
      ":func:`anefit.executorch.check_program`) against the baseline file recorded with "
      ":func:`baseline_json` or ``anefit check --json``: the gate of ``anefit check "
      "--baseline``. It fails when the ANE share of ops or FLOPs of a function drops by more "
      "than ``residency_tolerance`` points, boundaries or delegates grow, or a new finding (or "
      "one whose level rose) is at least ``fail_on``. Raises :class:`InputError` for a baseline "
      "that is not a check report of this model with these options.");
  m.def(
      "baseline_json",
      [](const nb::object &reports) {
        std::string programPath;
        std::vector<ane::CheckReport> list = reportsOf(reports, programPath);
        return report::baselineJson(list, programPath);
      },
      nb::arg("reports"),
      "The baseline to record for ``reports`` (a :class:`Report` or a program's list): the "
      "JSON ``anefit check --json`` (``--save-baseline``) writes.");
}

/// check(), partitioner_keywords() and rules().
void bindCheckFunctions(nb::module_ &m) {
  m.def("check", &runCheck, nb::arg("model"), nb::arg("chip") = "any", nb::arg("os") = "any",
        nb::arg("compute_units") = "cpu_and_ne", nb::arg("function") = nb::none(),
        nb::arg("ignore") = std::vector<std::string>(), nb::arg("observations") = nb::none(),
        nb::arg("etrecord") = nb::none(), nb::arg("source_root") = nb::none(),
        nb::arg("numerics") = false, nb::arg("steps") = 8, nb::arg("seed") = 0,
        "Predicts, per op, whether Core ML places it on the ANE, falls back to CPU/GPU or makes "
        "the ANE compile fail, with the rule, the reason, the evidence and the fix. ``model`` "
        "is a :class:`Model` or a path (weight files are then not opened). ``chip``: a chip "
        "name (``anefit check --help``) or ``'any'``; ``os``: ``'any'``, ``'ios17'``, "
        "``'ios18'``, ``'ios26'``; ``compute_units``: ``'cpu_and_ne'`` or ``'all'``; "
        "``function``: check only this one; ``ignore``: rule ids not to apply "
        "(``anefit check --ignore``); ``observations``: what a Mac observed of the model's "
        "probe kit (:func:`probe`, ``anefit check --observations``): observed outcomes replace "
        "predictions, :attr:`Report.observation` holds the conclusion; ``etrecord``: the "
        "export's ETRecord, so each finding's :attr:`Finding.source` names the PyTorch line, "
        "module and buffer behind its op (paths relative to ``source_root`` when given); "
        "``numerics``: also run the model (weights read) at fp32 and at the ANE's fp16 for "
        "``steps`` steps on random inputs from ``seed`` (``anefit check --numerics``): "
        "ANE-NUM-001 names the ops where fp16 leaves fp32, :attr:`Report.numerics` holds the "
        "measurement and the verdict is ``'wrong-numerics'`` when the outputs are lost.");

  m.def(
      "partitioner_keywords",
      [](const nb::list &reports) {
        std::vector<partition::Plan> advice;
        for (nb::handle r : reports)
          advice.push_back(partition::exportAdvice(nb::cast<const PyReport &>(r).report()));
        return partition::partitionerKeywords(partition::mergeExportAdvice(advice));
      },
      nb::arg("reports"),
      "The keyword arguments of ExecuTorch's ``CoreMLPartitioner`` that the reports (one per "
      "Core ML delegate of a program) recommend, as ``(name, value)`` pairs whose value is "
      "Python source: those of ``anefit split --skip-list`` (``skip_ops_for_coreml_delegation`` "
      "always, first). :func:`anefit.executorch.partitioner_kwargs` evaluates them.");

  m.def(
      "rules",
      [] {
        std::vector<std::string> codes;
        for (const ane::RuleInfo &r : ane::allRules())
          codes.emplace_back(r.code);
        return codes;
      },
      "Ids of every rule the checker applies (``anefit rules``).");
}

} // namespace

void bindCheck(nb::module_ &m) {
  m.attr("AneCompileRisk") = nb::steal(PyErr_NewExceptionWithDoc(
      "anefit._core.AneCompileRisk",
      "Raised by Report.raise_for when a finding reaches the failure threshold. "
      "``.report`` is the Report, ``.findings`` the findings at or above the threshold.",
      PyExc_Exception, nullptr));
  bindFinding(m);
  bindOpPlacement(m);
  bindSegment(m);
  bindFunctionReport(m);
  bindReport(m);
  bindCheckFunctions(m);
  bindGate(m);
}

} // namespace anefit::python
