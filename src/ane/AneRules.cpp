//===- AneRules.cpp - The rules table and its predicates ------------------===//
//
// The table generated from AneRules.def and Chips.def, and one small named
// predicate per rule (check<Enum>). Predicates look at types, shapes and
// immediate constants only; a blob-backed constant's data is never read.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "ane/RuleOps.h"

#include "ane/Coverage.h"
#include "ane/Limits.h"
#include "ane/RuleContext.h"
#include "ops/OpRegistry.h"
#include "ops/Weights.h"
#include "support/Error.h"
#include "support/Text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <unordered_set>

namespace anefit::ane {

//===----------------------------------------------------------------------===//
// Tables
//===----------------------------------------------------------------------===//

static constexpr RuleInfo kRules[] = {
#define ANE_RULE(Enum, Code, Kind, Eff, Conf, G, Path, Title, Scope, Settle, Fix)                  \
  {                                                                                                \
      RuleId::Enum,                                                                                \
      Code,                                                                                        \
      RuleKind::Kind,                                                                              \
      Effect::Eff,                                                                                 \
      Confidence::Conf,                                                                            \
      Gate::G,                                                                                     \
      EvidencePath::Path,                                                                          \
      Title,                                                                                       \
      Scope,                                                                                       \
      Settle,                                                                                      \
      Fix},
#include "ane/AneRules.def"
};

static constexpr ChipInfo kChips[] = {
#define CHIP(Enum, Name, Display, Phone, Axis, KW, KH, Texture, SinCos)                            \
  {Chip::Enum, Name, Display, Phone, Axis, KW, KH, Texture, SinCos},
#include "ane/Chips.def"
};

/// Splits "URL what; URL what" into cases.
static constexpr EvidenceCase kEvidence[] = {
#define RULE_EVIDENCE(Rule, Side, Cert, Url, Quote, What)                                          \
  {RuleId::Rule, EvidenceSide::Side, EvidenceCertainty::Cert, Url, Quote, What},
#include "ane/RuleEvidence.def"
#undef RULE_EVIDENCE
};

std::span<const EvidenceCase> allEvidence() { return kEvidence; }

static std::vector<EvidenceCase> casesOf(RuleId rule, EvidenceSide side) {
  std::vector<EvidenceCase> cases;
  for (const EvidenceCase &c : kEvidence)
    if (c.rule == rule && c.side == side)
      cases.push_back(c);
  return cases;
}

std::vector<EvidenceCase> RuleInfo::failCases() const { return casesOf(id, EvidenceSide::Fails); }
std::vector<EvidenceCase> RuleInfo::passCases() const { return casesOf(id, EvidenceSide::Works); }
std::vector<EvidenceCase> RuleInfo::oursCases() const { return casesOf(id, EvidenceSide::Ours); }

bool RuleInfo::failureIsolated() const {
  for (const EvidenceCase &c : kEvidence)
    if (c.rule == id && c.side == EvidenceSide::Fails && c.certainty == EvidenceCertainty::Isolated)
      return true;
  return false;
}

std::string_view evidenceSideName(EvidenceSide s) {
  switch (s) {
  case EvidenceSide::Fails:
    return "fails";
  case EvidenceSide::Works:
    return "works";
  case EvidenceSide::Ours:
    return "ours";
  }
  return "?";
}

namespace {
struct CertaintyName {
  EvidenceCertainty c;
  std::string_view name, description;
};
constexpr CertaintyName kCertaintyNames[] = {
    {EvidenceCertainty::Isolated, "isolated", "observed for this pattern alone"},
    {EvidenceCertainty::Together, "together", "observed only together with other suspects"},
    {EvidenceCertainty::Statement, "statement",
     "a maintainer's or author's statement without a log"},
    {EvidenceCertainty::Inferred, "inferred", "our inference from indirect evidence"},
};
} // namespace

std::string_view evidenceCertaintyName(EvidenceCertainty c) {
  return kCertaintyNames[static_cast<size_t>(c)].name;
}
std::string_view evidenceCertaintyDescription(EvidenceCertainty c) {
  return kCertaintyNames[static_cast<size_t>(c)].description;
}
std::optional<EvidenceCertainty> evidenceCertaintyFromName(std::string_view name) {
  for (const CertaintyName &n : kCertaintyNames)
    if (n.name == name)
      return n.c;
  return std::nullopt;
}

std::vector<std::string_view> RuleInfo::evidenceUrls() const {
  std::vector<std::string_view> urls;
  for (const EvidenceCase &c : failCases())
    urls.push_back(c.url);
  return urls;
}

std::string_view RuleInfo::settleCheck() const {
  if (!settle.empty())
    return settle;
  return "compile the package on a Mac, load it with MLComputeUnits.cpuAndNeuralEngine and run one "
         "prediction (ANECCompile() FAILED or status 0x1d in the log settles it as a failure); "
         "MLComputePlan deviceUsage(for:) of the flagged ops must prefer the Neural Engine";
}

std::string_view evidencePathName(EvidencePath p) {
  switch (p) {
  case EvidencePath::CoreMl:
    return "core-ml";
  case EvidencePath::CoreAi:
    return "core-ai";
  case EvidencePath::Direct:
    return "direct";
  }
  return "";
}

std::string_view certaintyName(Certainty c) {
  return c == Certainty::Contested ? "contested" : "confirmed";
}

/// The levels in the order of Level (least severe first): each name, and
/// what it means where the name alone does not say. Everything that names
/// levels (`--fail-on`, its help and error, Python's `fail_on`, docs/rules.md)
/// reads this table.
struct LevelRow {
  std::string_view name;
  std::string_view note;
};
static constexpr std::array<LevelRow, 6> kLevels = {{{"slow", ""},
                                                     {"fallback", ""},
                                                     {"wrong-numerics", ""},
                                                     {"at-risk", "a contested failure"},
                                                     {"compile-fail", ""},
                                                     {"runtime-fail", ""}}};
static_assert(kLevels.size() == static_cast<size_t>(Level::RuntimeFail) + 1, "one row per Level");

std::string_view levelName(Level l) { return kLevels[static_cast<size_t>(l)].name; }

std::optional<Level> levelFromName(std::string_view name) {
  for (size_t i = 0; i < kLevels.size(); ++i)
    if (kLevels[i].name == name)
      return static_cast<Level>(i);
  return std::nullopt;
}

std::vector<std::string> levelNames(bool notes) {
  std::vector<std::string> out;
  for (auto it = kLevels.rbegin(); it != kLevels.rend(); ++it)
    out.push_back(std::string(it->name) +
                  (notes && !it->note.empty() ? " (" + std::string(it->note) + ")" : ""));
  return out;
}

Level parseLevel(const std::string &name, const std::string &option) {
  auto level = levelFromName(name);
  if (!level)
    failExpected("", option, "one of: " + joined(levelNames(), ", "), "'" + name + "'");
  return *level;
}

Level levelOf(Effect e, Certainty c) {
  switch (e) {
  case Effect::Slow:
    return Level::Slow;
  case Effect::Fallback:
    return Level::Fallback;
  case Effect::WrongNumerics:
    return Level::WrongNumerics;
  case Effect::CompileFail:
    return c == Certainty::Contested ? Level::AtRisk : Level::CompileFail;
  case Effect::RuntimeFail:
    return c == Certainty::Contested ? Level::AtRisk : Level::RuntimeFail;
  }
  return Level::Slow;
}

std::span<const RuleInfo> allRules() { return kRules; }
const RuleInfo &ruleInfo(RuleId id) { return kRules[static_cast<size_t>(id)]; }

std::optional<RuleId> ruleFromCode(std::string_view code) {
  for (const RuleInfo &r : kRules)
    if (r.code == code)
      return r.id;
  return std::nullopt;
}

static constexpr std::array<std::string_view, 5> kEffectNames = {
    "slow", "fallback", "wrong-numerics", "compile-fail", "runtime-fail"};

std::string_view effectName(Effect e) { return kEffectNames[static_cast<size_t>(e)]; }

std::optional<Effect> effectFromName(std::string_view name) {
  for (size_t i = 0; i < kEffectNames.size(); ++i)
    if (kEffectNames[i] == name)
      return static_cast<Effect>(i);
  return std::nullopt;
}

std::string_view confidenceName(Confidence c) {
  switch (c) {
  case Confidence::AppleDocumented:
    return "apple-documented";
  case Confidence::Measured:
    return "measured";
  case Confidence::Folklore:
    return "folklore";
  }
  return "";
}

std::string_view gateDescription(Gate g) {
  switch (g) {
  case Gate::All:
    return "all chips and OS versions";
  case Gate::Phone:
    return "iPhone/iPad chips (a14..a19)";
  case Gate::NoTexture:
    return "chips without the texture engine (m1)";
  case Gate::NoSinCos:
    return "chips before A15/M3 (m1, m2, a14)";
  case Gate::Ios26:
    return "iOS 26 / macOS 26";
  }
  return "";
}

std::span<const ChipInfo> allChips() { return kChips; }
const ChipInfo &chipInfo(Chip c) { return kChips[static_cast<size_t>(c)]; }

std::optional<Chip> chipFromName(std::string_view name) {
  for (const ChipInfo &c : kChips)
    if (c.name == name)
      return c.chip;
  return std::nullopt;
}

static constexpr std::array<std::string_view, 4> kOsNames = {"any", "ios17", "ios18", "ios26"};

std::string_view osName(TargetOs os) { return kOsNames[static_cast<size_t>(os)]; }

std::optional<TargetOs> osFromName(std::string_view name) {
  for (size_t i = 0; i < kOsNames.size(); ++i)
    if (kOsNames[i] == name)
      return static_cast<TargetOs>(i);
  return std::nullopt;
}

std::string_view computeUnitsName(ComputeUnits cu) {
  return cu == ComputeUnits::All ? "all" : "cpu_and_ne";
}

std::optional<ComputeUnits> computeUnitsFromName(std::string_view name) {
  if (name == "cpu_and_ne")
    return ComputeUnits::CpuAndNe;
  if (name == "all")
    return ComputeUnits::All;
  return std::nullopt;
}

bool gateApplies(Gate g, Chip chip, TargetOs os) {
  const ChipInfo &c = chipInfo(chip);
  switch (g) {
  case Gate::All:
    return true;
  case Gate::Phone:
    return c.phone;
  case Gate::NoTexture:
    return !c.texture;
  case Gate::NoSinCos:
    return !c.sinCos;
  case Gate::Ios26:
    return os == TargetOs::Any || os == TargetOs::Ios26;
  }
  return true;
}

/// "2 observed together with other suspects, 1 statement without a log".
static std::string failingCertainties(const RuleInfo &r) {
  size_t counts[4] = {};
  for (const EvidenceCase &c : r.failCases())
    ++counts[static_cast<size_t>(c.certainty)];
  std::string out;
  for (auto c :
       {EvidenceCertainty::Together, EvidenceCertainty::Statement, EvidenceCertainty::Inferred}) {
    size_t n = counts[static_cast<size_t>(c)];
    if (n == 0)
      continue;
    out +=
        (out.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(evidenceCertaintyName(c));
  }
  return out.empty() ? "no failing case" : "failing cases: " + out;
}

RawFinding &RuleContext::report(const Operation *op, std::string message) {
  const RuleInfo &r = ruleInfo(current);
  RawFinding f{current, r.effect, op, {}, false, std::move(message), {}};
  // A failure seen only off the Core ML path is not confirmed for a Core ML
  // model, nor one that no source observed for the pattern alone.
  if (r.effect >= Effect::CompileFail && r.path != EvidencePath::CoreMl)
    f.contested = "the failure was measured on the " + std::string(evidencePathName(r.path)) +
                  " compiler path only, not through public Core ML";
  else if (r.effect >= Effect::CompileFail && !r.failureIsolated())
    f.contested =
        "no public source shows this failure for the pattern alone (" + failingCertainties(r) + ")";
  out.push_back(std::move(f));
  return out.back();
}

//===----------------------------------------------------------------------===//
// Helpers shared by predicates
//===----------------------------------------------------------------------===//

namespace {

bool isConstLike(const Operation &op) { return opHasTrait(op.type, OpTrait::ConstLike); }

/// Ops that compute something at run time (everything but constants and
/// weight decompression).
bool isCompute(const Operation &op) { return !isConstLike(op); }

/// The type bound to `param`, from its value or its immediate constant.
const Type *paramType(const Operation &op, std::string_view param) { return op.inputType(param); }

/// The constant bound to `param` if it is an immediate (in-memory) tensor; a
/// blob-backed constant yields null so its data is never read.
const Constant *immediateInput(const Operation &op, std::string_view param) {
  const Constant *c = op.constInput(param);
  return c && c->kind == Constant::Kind::Tensor ? c : nullptr;
}

std::optional<int64_t> immediateInt(const Operation &op, std::string_view param) {
  const Constant *c = immediateInput(op, param);
  if (!c || c->numElements() != 1 || c->type.dtype() == DType::String)
    return std::nullopt;
  return c->elementAsInt(0);
}

std::optional<std::vector<int64_t>> immediateInts(const Operation &op, std::string_view param) {
  const Constant *c = immediateInput(op, param);
  if (!c || c->type.dtype() == DType::String || c->numElements() > 4096)
    return std::nullopt;
  return c->asInts();
}

/// True if `param` is bound and its value is not a compile-time constant.
bool isRuntime(const Operation &op, std::string_view param) {
  const OpInput *in = op.input(param);
  if (!in || in->bindings.empty())
    return false;
  for (const Binding &b : in->bindings) {
    if (!b.isValue())
      continue;
    const Operation *def = b.value->definingOp;
    if (!def || !isConstLike(*def))
      return true;
  }
  return false;
}

std::optional<std::vector<int64_t>> shapeOf(const Type &t) {
  if (!t.isTensor() && !t.isState())
    return std::nullopt;
  return t.staticShape();
}

/// Tensor types of every value operand and result of `op`.
template <typename Fn> void forEachTensor(const Operation &op, Fn &&fn) {
  for (const Value *v : op.operandValues())
    if (v->type.isTensor())
      fn(*v, false);
  for (const auto &v : op.outputs)
    if (v->type.isTensor())
      fn(*v, true);
}

std::string dimsStr(const std::vector<int64_t> &shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

bool oneOf(std::string_view type, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), type) != names.end();
}

/// Reports `op` (one of the types its rule's RuleOps.def row names): "'type' why".
void reportOp(RuleContext &ctx, const Operation *op, std::string_view why) {
  if (op)
    ctx.report(op, "'" + op->type + "' " + std::string(why));
}

/// True if some op within `depth` consumer hops of `op` has a type in `targets`.
bool reaches(const FunctionFacts &f, const Operation &op,
             std::initializer_list<std::string_view> targets, int depth) {
  std::vector<const Operation *> frontier{&op};
  std::unordered_set<const Operation *> seen{&op};
  for (int d = 0; d < depth && !frontier.empty(); ++d) {
    std::vector<const Operation *> next;
    for (const Operation *o : frontier)
      for (const auto &res : o->outputs) {
        auto it = f.users.find(res.get());
        if (it == f.users.end())
          continue;
        for (const Operation *u : it->second) {
          if (oneOf(u->type, targets))
            return true;
          if (seen.insert(u).second)
            next.push_back(u);
        }
      }
    frontier = std::move(next);
  }
  return false;
}

/// The state a read/write op touches, or null.
const Value *stateOperand(const Operation &op) {
  if (op.type == "read_state" || op.type == "write_state")
    return op.inputValue("input");
  if (op.type == "coreml_update_state")
    return op.inputValue("state");
  return nullptr;
}

/// The value written into a state by a write op, or null.
const Value *writtenValue(const Operation &op) {
  const OpDef *def = findAnyOp(op.type);
  const ParamSpec *p = def ? def->writtenValueParam() : nullptr;
  return p ? op.inputValue(p->name) : nullptr;
}

std::string stateDesc(const Value *s) { return "state '" + s->name + "' " + s->type.shapeStr(); }

/// Reports a state finding at the first op touching the state; every op of the
/// state shares the placement.
RawFinding &reportState(RuleContext &ctx, const Value *state, std::string message) {
  auto it = ctx.facts.stateOps.find(state);
  const std::vector<const Operation *> *ops =
      it == ctx.facts.stateOps.end() ? nullptr : &it->second;
  RawFinding &f = ctx.report(ops && !ops->empty() ? ops->front() : nullptr, std::move(message));
  if (ops)
    f.related.assign(ops->begin(), ops->end());
  return f;
}

/// Ops whose result is still the same data, re-viewed, permuted or cast;
/// traced through when following data.
bool isView(const Operation &op) {
  return opHasTrait(op.type, OpTrait::View) || op.type == "transpose" || op.type == "cast";
}

uint64_t elementBytes(DType t) { return std::max(1, dtypeBits(t) / 8); }

} // namespace

//===----------------------------------------------------------------------===//
// Predicates: one per row of AneRules.def. `op` is null for function rules.
//===----------------------------------------------------------------------===//

static std::optional<int64_t> innermostDim(const Value *state) {
  auto shape = shapeOf(state->type);
  if (!shape || shape->empty())
    return std::nullopt;
  return shape->back();
}

/// A state whose innermost dim is below 32 or not a multiple of 32: every
/// measured state failure had one (coremltools#2631, the LFM2 conv states).
static bool isNarrow(const Value *state) {
  auto d = innermostDim(state);
  return d && (*d < 32 || *d % 32 != 0);
}

/// "'conv_state' (1, 64, 2, fp16)" for the narrow states, or empty.
static std::string narrowStates(const std::vector<const Value *> &states) {
  std::string out;
  for (const Value *s : states)
    if (isNarrow(s))
      out += (out.empty() ? "" : ", ") + ("'" + s->name + "' " + s->type.shapeStr());
  return out;
}

// ANE-STATE-001: CoreML-LLM measured 3+ StateTypes failing at predict (0x1d),
// each time with a narrow state among them; an unmerged Anemll report has 48
// states running, so all-aligned states are only at risk.
static void checkStateCount(RuleContext &ctx, const Operation *) {
  size_t n = ctx.facts.states.size();
  if (n < 3)
    return;
  std::string narrow = narrowStates(ctx.facts.states);
  for (const Value *s : ctx.facts.states) {
    RawFinding &f = reportState(
        ctx, s,
        "function has " + std::to_string(n) + " states (" + stateDesc(s) + " is one)" +
            (narrow.empty() ? "" : ", narrow ones among them (" + narrow + ")") +
            "; 3 or more states failed on the ANE at the first prediction (status 0x1d) "
            "even when the compute plan showed ~100% ANE");
    if (narrow.empty())
      f.contested = "every state's innermost dim is a multiple of 32, while each measured 3+ "
                    "state failure had a narrow state; Anemll PR#50 reports 48 states running on "
                    "an M1 ANE";
  }
}

// ANE-STATE-002: KV + narrow conv state failed for LFM2 (0x1d); two aligned KV
// states pass (Gemma 4), so only a pair with a narrow state fires.
static void checkStatePair(RuleContext &ctx, const Operation *) {
  size_t n = ctx.facts.states.size();
  if (n < 2)
    return;
  std::string narrow = narrowStates(ctx.facts.states);
  if (narrow.empty())
    return;
  // The bisection's failing second states were 3 and 16 wide (one per layer
  // or one in all), beside an aligned KV state; narrow states alone, or an
  // unaligned state of 32 or more beside another, are ours.
  bool tiny = false, aligned = false;
  for (const Value *s : ctx.facts.states)
    if (auto d = innermostDim(s)) {
      tiny |= *d < 32;
      aligned |= !isNarrow(s);
    }
  for (const Value *s : ctx.facts.states) {
    RawFinding &f = reportState(
        ctx, s,
        "function has " + std::to_string(n) + " states (" + stateDesc(s) +
            " is one), narrow ones among them (" + narrow +
            "); a KV state next to narrow short-conv states failed at the first ANE prediction "
            "(status 0x1d), two aligned KV states run");
    if (!tiny)
      f.contested = "the narrow state is 32 or wider (not a multiple of 32); the failures "
                    "observed had second states 3 and 16 wide";
    else if (!aligned)
      f.contested = "every state is narrow; the failures observed had an aligned KV state "
                    "beside the narrow ones";
  }
}

// ANE-STATE-003: coremltools#2631, a state width of 270 fails, 256 works.
static void checkStateAlign(RuleContext &ctx, const Operation *) {
  for (const Value *s : ctx.facts.states) {
    auto d = innermostDim(s);
    if (d && *d >= 32 && *d % 32 != 0)
      reportState(ctx, s,
                  stateDesc(s) + ": innermost dim " + std::to_string(*d) +
                      " is not a multiple of 32");
  }
}

// ANE-STATE-004: LFM2 (1, D, 2) conv states; padding the innermost dim to 16
// still failed, so any innermost dim below 32 is flagged.
static void checkStateTinyDim(RuleContext &ctx, const Operation *) {
  for (const Value *s : ctx.facts.states) {
    auto d = innermostDim(s);
    if (d && *d < 32)
      reportState(ctx, s,
                  stateDesc(s) + ": innermost dim " + std::to_string(*d) +
                      " is below 32 (LFM2 conv states of width 2, and padded to 16, failed)");
  }
}

// ANE-STATE-005: the new value of a narrow state is derived from the old one
// through other ops (the LFM2 cat + slice + copy_ roll), not updated in place.
// A recurrent state of aligned width computed from its old value runs
// (coremltools#2631, width 256), so only narrow states fire.
static void checkStateChainWrite(RuleContext &ctx, const Operation *) {
  for (const Value *s : ctx.facts.states) {
    auto inner = innermostDim(s);
    if (!inner || *inner >= 32)
      continue;
    auto it = ctx.facts.stateOps.find(s);
    if (it == ctx.facts.stateOps.end())
      continue;
    std::unordered_set<const Value *> reads;
    for (const Operation *o : it->second)
      if ((opHasTrait(o->type, OpTrait::StateRead) || opHasTrait(o->type, OpTrait::StateWrite)) &&
          !o->outputs.empty())
        reads.insert(o->output());
    for (const Operation *w : it->second) {
      const Value *v = writtenValue(*w);
      if (!v || !v->definingOp || reads.count(v))
        continue;
      const Operation *def = v->definingOp;
      // An in-place update of the state's own read is the direct form.
      if (def->type == "slice_update") {
        const Value *x = def->inputValue("x");
        while (x && x->definingOp && isView(*x->definingOp))
          x = x->definingOp->inputValue("x");
        if (x && reads.count(x))
          continue;
      }
      // Walk back from the written value looking for a read of the same state.
      std::vector<std::string> chain;
      std::function<bool(const Value *, int)> dependsOnRead = [&](const Value *val,
                                                                  int depth) -> bool {
        if (reads.count(val))
          return true;
        if (!val->definingOp || depth == 0 || isConstLike(*val->definingOp))
          return false;
        for (const Value *operand : val->definingOp->operandValues())
          if (dependsOnRead(operand, depth - 1)) {
            chain.push_back(val->definingOp->type);
            return true;
          }
        return false;
      };
      if (!dependsOnRead(v, 8))
        continue;
      std::string path;
      for (const std::string &t : chain)
        path += (path.empty() ? "" : " -> ") + t;
      RawFinding &f = ctx.report(w, "new value of " + stateDesc(s) +
                                        " is computed from its old value through " + path +
                                        " and written back (a rolling buffer of innermost width " +
                                        std::to_string(*inner) + " < 32)");
      f.related = it->second;
    }
  }
}

// ANE-STATE-006: runtime write positions crash the ANE compiler on the Core AI
// path. Through classic Core ML one KV state written at a runtime int32
// position ships on the ANE (Anemll, CoreML-LLM), so writes into a state are
// not flagged; a cache carried as a plain function input and written in-graph
// (the ExecuTorch export_llm shape) has no public Core ML case either way and
// is reported at-risk.
static void checkRuntimeSliceUpdate(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  if (!isRuntime(*op, "begin") && !isRuntime(*op, "end"))
    return;
  const Value *x = op->inputValue("x");
  while (x && x->definingOp && isView(*x->definingOp))
    x = x->definingOp->inputValue("x");
  if (!x || !x->isBlockInput() || x->type.isState())
    return;
  const Value *pos = op->inputValue(isRuntime(*op, "begin") ? "begin" : "end");
  std::string from = pos ? "'" + pos->name + "'" : "a runtime value";
  if (pos && pos->definingOp)
    from += " (computed by " + pos->definingOp->type + ")";
  else if (pos)
    from += " (a model input)";
  RawFinding &f = ctx.report(op, "writes cache input '" + x->name + "' " + x->type.shapeStr() +
                                     " in-graph at a position taken from " + from +
                                     "; runtime write positions crashed the Core AI ANE compiler");
  f.contested = "the same slice_update at a runtime int32 position runs on the ANE through "
                "classic Core ML when it writes a KV state (Anemll, CoreML-LLM); no public case "
                "shows a cache carried as input written this way, either way";
}

// ANE-STATE-007: coremltools#2553 failed writing 128 rows into a KV state per
// call; 16/32 rows (and Anemll's 64-row prefill) run. That report changed
// other things too, so the finding is always contested.
static void checkLargeStateWrite(RuleContext &ctx, const Operation *op) {
  if (!op || (!isRuntime(*op, "begin") && !isRuntime(*op, "end")))
    return;
  const Value *x = op->inputValue("x");
  while (x && x->definingOp && isView(*x->definingOp))
    x = x->definingOp->inputValue("x");
  const Operation *read = x ? x->definingOp : nullptr;
  const Value *state = read ? stateOperand(*read) : nullptr;
  const Type *update = paramType(*op, "update");
  auto us = update ? shapeOf(*update) : std::nullopt;
  auto xs = x ? shapeOf(x->type) : std::nullopt;
  if (!state || !us || !xs || us->size() != xs->size())
    return;
  int64_t rows = 0;
  for (size_t i = 0; i < us->size(); ++i)
    if ((*us)[i] != (*xs)[i])
      rows = std::max(rows, (*us)[i]);
  if (rows <= 64)
    return;
  RawFinding &f = ctx.report(op, "writes " + std::to_string(rows) + " rows into " +
                                     stateDesc(state) + " at a runtime position per prediction");
  f.contested = "coremltools#2553 changed projections, cache rank and head dim along with the "
                "write size, and Anemll writes 64 rows at a runtime position on the ANE";
}

/// `v` with views, permutes and casts traced back to their source.
static const Value *throughViews(const Value *v) {
  while (v && v->definingOp && isView(*v->definingOp))
    v = v->definingOp->inputValue("x");
  return v;
}

/// The state whose read produced `v` (through views), or null.
static const Value *stateReadBy(const Value *v) {
  v = throughViews(v);
  const Operation *def = v ? v->definingOp : nullptr;
  return def && def->type == "read_state" ? stateOperand(*def) : nullptr;
}

// ANE-STATE-008: a window kept in a state and rolled by slicing off its first
// rows and concatenating the new ones (Bonsai/Qwen3 on CoreML-LLM: error -14).
// The same cat-shift ships in Gemma 4, so the finding is always contested.
static void checkStateRollShift(RuleContext &ctx, const Operation *) {
  for (const Value *s : ctx.facts.states) {
    auto inner = innermostDim(s);
    if (!inner || *inner < 32)
      continue;
    auto it = ctx.facts.stateOps.find(s);
    if (it == ctx.facts.stateOps.end())
      continue;
    for (const Operation *w : it->second) {
      const Value *v = throughViews(writtenValue(*w));
      const Operation *cat = v ? v->definingOp : nullptr;
      if (!cat || cat->type != "concat")
        continue;
      const OpInput *values = cat->input("values");
      bool shifted = false;
      for (const Binding &b : values ? values->bindings : std::vector<Binding>{}) {
        const Value *part = throughViews(b.value);
        const Operation *slice = part ? part->definingOp : nullptr;
        shifted |= slice && (slice->type == "slice_by_index" || slice->type == "slice_by_size") &&
                   stateReadBy(slice->inputValue("x")) == s;
      }
      if (!shifted)
        continue;
      RawFinding &f = ctx.report(w, "new value of " + stateDesc(s) +
                                        " is a slice of its old value concatenated with new rows "
                                        "(a sliding window shifted in-graph)");
      f.related = it->second;
      f.contested = "CoreML-LLM reports Gemma 4 shipping the same cat-shift of a state on the "
                    "ANE; the Qwen3 failure had tied embeddings as another suspect";
    }
  }
}

// ANE-STATE-009: Gemma 4 E4B on CoreML-LLM failed the iPhone ANE compile
// (std::bad_cast) when a slice of the updated KV state was a chunk output; the
// Mac ran it. Always contested (one model, other suspects).
static void checkStateSliceOutput(RuleContext &ctx, const Operation *) {
  std::unordered_map<const Value *, const Value *> written; // value -> state
  for (const Value *s : ctx.facts.states) {
    auto it = ctx.facts.stateOps.find(s);
    if (it == ctx.facts.stateOps.end())
      continue;
    for (const Operation *w : it->second)
      if (const Value *v = writtenValue(*w)) {
        written[throughViews(v)] = s;
        if (!w->outputs.empty())
          written[w->output()] = s;
      }
  }
  if (written.empty())
    return;
  for (const Value *out : ctx.facts.function->body->outputs) {
    const Value *v = throughViews(out);
    const Operation *slice = v ? v->definingOp : nullptr;
    if (!slice || (slice->type != "slice_by_index" && slice->type != "slice_by_size"))
      continue;
    auto hit = written.find(throughViews(slice->inputValue("x")));
    if (hit == written.end())
      continue;
    RawFinding &f =
        ctx.report(slice, "output '" + out->name + "' " + out->type.shapeStr() +
                              " is a slice of the value written into " + stateDesc(hit->second));
    f.contested = "one model (Gemma 4 E4B) with other suspects in the chunk; the Mac ANE runs "
                  "the same chunk";
  }
}

/// Rows written per call into each state by slice_update (the largest extent
/// of the update along an axis where it is shorter than the state).
static std::map<std::string, int64_t> stateWriteRows(const Function &fn) {
  std::map<std::string, int64_t> rows;
  walk(*fn.body, [&](const Operation &op) {
    if (op.type != "slice_update")
      return;
    const Value *x = throughViews(op.inputValue("x"));
    const Operation *read = x ? x->definingOp : nullptr;
    const Value *state = read && read->type == "read_state" ? stateOperand(*read) : nullptr;
    const Type *update = op.inputType("update");
    auto us = update ? shapeOf(*update) : std::nullopt;
    auto xs = x ? shapeOf(x->type) : std::nullopt;
    if (!state || !us || !xs || us->size() != xs->size())
      return;
    int64_t n = 0;
    for (size_t i = 0; i < us->size(); ++i)
      if ((*us)[i] != (*xs)[i])
        n = std::max(n, (*us)[i]);
    rows[state->name] = std::max(rows[state->name], n);
  });
  return rows;
}

// ANE-STATE-010: a Gemma 4 stateful chunk as a multifunction model (T=1
// decode + T=8 prefill over the same two states) failed the iPhone ANE
// compile; the same prefill as its own single-function package compiled.
static void checkMultifunctionState(RuleContext &ctx, const Operation *) {
  const Program *program = ctx.facts.model ? ctx.facts.model->program.get() : nullptr;
  if (!program || program->functions.size() < 2 || ctx.facts.states.empty())
    return;
  std::map<std::string, int64_t> mine = stateWriteRows(*ctx.facts.function);
  for (const auto &other : program->functions) {
    if (other.get() == ctx.facts.function)
      continue;
    std::map<std::string, int64_t> theirs = stateWriteRows(*other);
    for (const Value *s : ctx.facts.states) {
      auto a = mine.find(s->name), b = theirs.find(s->name);
      if (a == mine.end() || b == theirs.end() || a->second == b->second)
        continue;
      RawFinding &f =
          reportState(ctx, s,
                      stateDesc(s) + " takes " + std::to_string(a->second) +
                          " written row(s) per call here and " + std::to_string(b->second) +
                          " in function '" + other->name + "' of the same model");
      f.contested = "one model (Gemma 4 on CoreML-LLM), failing on the iPhone only; the same "
                    "prefill as a single-function package compiles";
      return;
    }
  }
}

// ANE-STATE-011: the coremltools stateful GPT-2 with rank-5 KV states failed
// to build its execution plan with the Neural Engine; the KV states that ship
// (Anemll, CoreML-LLM) are rank 4. Always contested.
static void checkStateRank5(RuleContext &ctx, const Operation *) {
  for (const Value *s : ctx.facts.states) {
    if (!s->type.hasRank() || s->type.rank() != 5)
      continue;
    auto it = ctx.facts.stateOps.find(s);
    if (it == ctx.facts.stateOps.end())
      continue;
    for (const Operation *read : it->second) {
      if (read->type != "read_state" || read->outputs.empty())
        continue;
      const Operation *write = nullptr;
      walk(*ctx.facts.function->body, [&](const Operation &op) {
        if (!write && op.type == "slice_update" &&
            (isRuntime(op, "begin") || isRuntime(op, "end")) &&
            throughViews(op.inputValue("x")) == read->output())
          write = &op;
      });
      if (!write)
        continue;
      RawFinding &f = ctx.report(write, stateDesc(s) +
                                            " has rank 5 and is written at a runtime "
                                            "position by '" +
                                            write->name + "'");
      f.related = it->second;
      f.contested = "one report (coremltools#2325, state layout not published); rank-4 KV "
                    "states written the same way ship on the ANE (Anemll, CoreML-LLM)";
      break;
    }
  }
}

/// A cast between fp16 and fp32 that only joins a function input or output to
/// the fp16 graph, as coremltools inserts for an fp16 model with fp32 I/O. Such
/// casts are native on every ANE generation and are no fp32 island.
static bool isBoundaryCast(const FunctionFacts &f, const Operation &op) {
  if (op.type != "cast" || op.outputs.empty())
    return false;
  const Value *x = op.inputValue("x");
  const Value *out = op.output();
  if (!x || !x->type.isTensor() || !out->type.isTensor())
    return false;
  DType from = x->type.dtype(), to = out->type.dtype();
  bool fpPair =
      (from == DType::F16 && to == DType::F32) || (from == DType::F32 && to == DType::F16);
  if (!fpPair)
    return false;
  const Block &body = *f.function->body;
  if (x->isBlockInput() && x->ownerBlock == &body)
    return true;
  auto users = f.users.find(out);
  bool unused = users == f.users.end() || users->second.empty();
  return unused && std::find(body.outputs.begin(), body.outputs.end(), out) != body.outputs.end();
}

// ANE-DTYPE-001: the ANE computes fp16 only; fp32 results leave it (casts at
// the function's inputs and outputs excepted).
static void checkFp32Compute(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op) || isBoundaryCast(ctx.facts, *op))
    return;
  for (const auto &v : op->outputs)
    if ((v->type.isTensor() || v->type.isState()) && v->type.dtype() == DType::F32) {
      ctx.report(op, "result '" + v->name + "' is fp32; the ANE computes fp16 only");
      return;
    }
}

// ANE-DTYPE-002: integer compute and casts are commonly CPU-placed.
static void checkIntCompute(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op) || opHasTrait(op->type, OpTrait::StateRead) ||
      opHasTrait(op->type, OpTrait::StateWrite))
    return;
  if (op->type == "cast") {
    if (op->outputs.empty())
      return;
    const Type *in = paramType(*op, "x");
    const Value *out = op->output();
    bool inInt = in && in->isTensor() && in->dtype() == DType::I32;
    bool outInt = out->type.isTensor() && out->type.dtype() == DType::I32;
    if (inInt || outInt)
      ctx.report(op, std::string("cast ") + (in ? std::string(dtypeName(in->dtype())) : "?") +
                         " -> " + std::string(dtypeName(out->type.dtype())) + " involves int32");
    return;
  }
  for (const auto &v : op->outputs)
    if (v->type.isTensor() && isInteger(v->type.dtype()) && dtypeBits(v->type.dtype()) >= 16) {
      ctx.report(op, "computes " + std::string(dtypeName(v->type.dtype())) + " result '" + v->name +
                         "'");
      return;
    }
}

// ANE-DTYPE-003: bf16 is not an ANE I/O type; Core ML converts at the boundary.
static void checkBf16Io(RuleContext &ctx, const Operation *) {
  const Function &fn = *ctx.facts.function;
  for (const auto &in : fn.inputs)
    if (in->type.isTensor() && in->type.dtype() == DType::BF16)
      ctx.report(nullptr, "input '" + in->name + "' is bf16; converted to fp16 before the ANE");
  for (const Value *out : fn.body->outputs)
    if (out->type.isTensor() && out->type.dtype() == DType::BF16)
      ctx.report(nullptr, "output '" + out->name + "' is bf16; converted from fp16 after the ANE");
}

// ANE-DTYPE-004: -inf (and values below -65504, which become -inf in fp16)
// in a mask that reaches softmax.
static void checkNegInfMask(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op))
    return;
  for (const OpInput &in : op->inputs) {
    const Constant *c = immediateInput(*op, in.name);
    if (!c || !isFloat(c->type.dtype()) || c->numElements() > (1u << 20))
      continue;
    double worst = 0;
    for (uint64_t i = 0; i < c->numElements(); ++i)
      worst = std::min(worst, c->elementAsDouble(i));
    if (worst >= -65504.0)
      continue;
    if (op->type != "softmax" && !reaches(ctx.facts, *op, {"softmax"}, 4))
      continue;
    ctx.report(op, "input '" + in.name + "' holds " +
                       (std::isinf(worst) ? "-inf" : "a value below -65504 (-inf in fp16)") +
                       " and reaches softmax; the ANE softmax mishandles -inf");
    return;
  }
}

/// True when `v` is some x divided by its own largest |x| (floored or not):
/// real_div(x, reduce_max(abs(x))) or real_div(x, maximum(reduce_max(abs(x)),
/// c)), the form coremltools lowers torch's rms_norm to and scale-norm
/// writes. Its square is at most 1, whatever x holds.
static bool scaledByItsPeak(const Value *v) {
  const Operation *div = v ? v->definingOp : nullptr;
  if (!div || div->type != "real_div")
    return false;
  const Value *x = div->inputValue("x");
  const Operation *m = div->inputValue("y") ? div->inputValue("y")->definingOp : nullptr;
  if (m && m->type == "maximum") {
    const Value *a = m->inputValue("x"), *b = m->inputValue("y");
    const Value *peak = a && a->definingOp && a->definingOp->type == "reduce_max" ? a : b;
    m = peak ? peak->definingOp : nullptr;
  }
  if (!x || !m || m->type != "reduce_max")
    return false;
  const Value *absIn = m->inputValue("x");
  const Operation *abs = absIn ? absIn->definingOp : nullptr;
  return abs && abs->type == "abs" && abs->inputValue("x") == x;
}

// ANE-DTYPE-005: x*x before a mean overflows fp16 once |x| > ~256.
static void checkSquareOverflow(RuleContext &ctx, const Operation *op) {
  if (!op || op->outputs.empty() || op->output()->type.dtype() != DType::F16)
    return;
  bool square = op->type == "square";
  const Value *base = op->inputValue("x");
  if (op->type == "mul")
    square = base && base == op->inputValue("y");
  if (op->type == "pow") {
    auto e = immediateInput(*op, "y");
    square = e && e->numElements() == 1 && e->elementAsDouble(0) == 2.0;
  }
  if (!square || scaledByItsPeak(base) ||
      !reaches(ctx.facts, *op, {"reduce_mean", "reduce_sum"}, 2))
    return;
  std::string message = "squares an fp16 tensor before a reduction (decomposed RMSNorm); values "
                        "above ~256 overflow to inf";
  if (const NumericsMeasurement *n = ctx.facts.options.numerics.get()) {
    const MeasuredOp *m = n->find(ctx.facts.function->name, op->name);
    char buf[200];
    if (m && m->maxAbsIn > 256)
      std::snprintf(buf, sizeof buf,
                    "; measured: max |x| %.6g at fp32 (its square %.3g > 65504) on %lld step%s",
                    m->maxAbsIn, m->maxAbsIn * m->maxAbsIn, static_cast<long long>(n->steps),
                    n->steps == 1 ? "" : "s");
    else if (m)
      std::snprintf(buf, sizeof buf,
                    "; measured: max |x| %.6g at fp32, below 256 on %lld step%s (other "
                    "inputs may reach it)",
                    m->maxAbsIn, static_cast<long long>(n->steps), n->steps == 1 ? "" : "s");
    else
      std::snprintf(buf, sizeof buf, "; not measured (the op did not run)");
    message += buf;
    ctx.report(op, message).measured = m && m->maxAbsIn > 256;
    return;
  }
  ctx.report(op, message);
}

// ANE-NUM-001: what `check --numerics` measured: the ops where the fp16
// result first leaves fp32.
static void checkMeasuredDivergence(RuleContext &ctx, const Operation *op) {
  const NumericsMeasurement *n = ctx.facts.options.numerics.get();
  if (!op || !n)
    return;
  const MeasuredOp *m = n->find(ctx.facts.function->name, op->name);
  if (!m || !m->origin)
    return;
  char buf[400];
  std::string what;
  if (m->nonFinite)
    what = std::to_string(m->nonFinite) + " of " + std::to_string(m->elements) +
           " values inf or NaN at fp16";
  else if (m->zeroed)
    what = std::to_string(m->zeroed) + " of " + std::to_string(m->elements) +
           " values zero at fp16 and not at fp32";
  else {
    std::snprintf(buf, sizeof buf, "relative RMS error %.3g against fp32 (tolerance %.3g)",
                  m->relError, n->tolerance);
    what = buf;
  }
  std::snprintf(buf, sizeof buf,
                "at step %lld: %s, %s; at fp32 max |input| %.6g, max |result| %.6g (fp16 "
                "ends at 65504)",
                static_cast<long long>(m->step), what.c_str(),
                m->nonFinite || m->zeroed ? "from inputs that lost none"
                                          : "while its inputs match fp32",
                m->maxAbsIn, m->maxAbsOut);
  ctx.report(op, buf);
}

// ANE-DTYPE-006: coremltools#2687/#2690: softplus collapses to 0 above
// x ~ 10.4 and a 32-channel log-sum-exp above x ~ 7.6 on the ANE (fp16 exp
// without a max shift); CPU and GPU are right. Value-dependent: a softplus on a
// gate whose inputs stay small runs (Qwen3.5 gated delta).
static void checkExpOverflow(RuleContext &ctx, const Operation *op) {
  if (!op || op->outputs.empty() || op->output()->type.dtype() != DType::F16)
    return;
  ctx.report(op, "'" + op->type +
                     "' in fp16: on the ANE its exp overflows and the output drops "
                     "to 0 (softplus above x ~ 10.4, a 32-channel log-sum-exp above x ~ 7.6)");
}

// ANE-DTYPE-007: ExecuTorch keeps the embedding off Core ML because the ANE
// takes token ids as uint16, which cannot address a 128256-row vocabulary.
static void checkWideGatherIds(RuleContext &ctx, const Operation *op) {
  if (!op || !isRuntime(*op, "indices"))
    return;
  const Type *x = paramType(*op, "x");
  auto shape = x ? shapeOf(*x) : std::nullopt;
  if (!shape || shape->empty())
    return;
  auto axis = normalizeAxis(immediateInt(*op, "axis").value_or(0), (int64_t)shape->size());
  if (!axis || (*shape)[*axis] <= 65536)
    return;
  ctx.report(op,
             "gathers from " + std::to_string((*shape)[*axis]) + " rows of " + x->shapeStr() +
                 " at runtime ids; ids above 65535 do not fit the uint16 the ANE reads them as");
}

// ANE-SHAPE-001: Apple's ANE rules cap tensor rank at 5.
static void checkRankAbove5(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op))
    return;
  bool done = false;
  forEachTensor(*op, [&](const Value &v, bool) {
    if (!done && v.type.hasRank() && v.type.rank() > 5) {
      ctx.report(op, "'" + v.name + "' " + v.type.shapeStr() + " has rank " +
                         std::to_string(v.type.rank()) + " > 5");
      done = true;
    }
  });
}

// ANE-SHAPE-002: per-chip tensor extent limits. For rank >= 3 axis 0 is the
// batch and axis 1 the channel axis (both capped at 65536); every other axis is
// capped at the chip's non-channel limit.
static void checkAxisLimit(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op))
    return;
  int64_t limit = ctx.facts.chip->axisLimit;
  bool done = false;
  forEachTensor(*op, [&](const Value &v, bool isResult) {
    if (done || (!isResult && !v.isBlockInput()))
      return;
    auto shape = shapeOf(v.type);
    if (!shape)
      return;
    for (size_t i = 0; i < shape->size() && !done; ++i) {
      bool channelLike = shape->size() >= 3 && i <= 1;
      int64_t cap = channelLike ? 65536 : limit;
      if ((*shape)[i] > cap) {
        ctx.report(op,
                   "'" + v.name + "' " + v.type.shapeStr() + ": axis " + std::to_string(i) +
                       " has " + std::to_string((*shape)[i]) + " > " + std::to_string(cap) +
                       (channelLike ? " (batch/channel limit)" : " (axis limit for this chip)"));
        done = true;
      }
    }
  });
}

// ANE-SHAPE-003: zero-size dims are rejected by the ANE compiler.
static void checkZeroDim(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op))
    return;
  bool done = false;
  forEachTensor(*op, [&](const Value &v, bool) {
    auto shape = shapeOf(v.type);
    if (!done && shape && std::find(shape->begin(), shape->end(), 0) != shape->end()) {
      ctx.report(op, "'" + v.name + "' " + v.type.shapeStr() + " has a zero-size dim");
      done = true;
    }
  });
}

// ANE-SHAPE-009: CoreML-LLM: the A18 Pro ANE faults on rank-10 patchify views
// that the Mac ANE accepts (a statement, no log): always contested.
static void checkPhoneRankAbove5(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op))
    return;
  bool done = false;
  forEachTensor(*op, [&](const Value &v, bool) {
    if (!done && v.type.hasRank() && v.type.rank() > 5) {
      RawFinding &f = ctx.report(op, "'" + v.name + "' " + v.type.shapeStr() + " has rank " +
                                         std::to_string(v.type.rank()) +
                                         "; the iPhone ANE faulted on rank-10 views at predict");
      f.contested = "a statement without a log (CoreML-LLM); the Mac ANE accepts the same views";
      done = true;
    }
  });
}

// ANE-SHAPE-010: a (1, 3, 5568, 5568) image failed the ANE compile
// (coremltools#2247); the limit is ours, above the 4096 x 4096 planes that
// attention over a 64x64 latent makes.
static constexpr int64_t kLargePlaneElements = 4096 * 4096;

static void checkLargePlane(RuleContext &ctx, const Operation *op) {
  if (!op || !isCompute(*op))
    return;
  bool done = false;
  forEachTensor(*op, [&](const Value &v, bool) {
    // Weights are laid out by the compiler, not as activation planes.
    if (v.definingOp && isConstLike(*v.definingOp))
      return;
    auto shape = shapeOf(v.type);
    if (done || !shape || shape->size() < 2)
      return;
    int64_t h = (*shape)[shape->size() - 2], w = shape->back();
    if (h <= 0 || w <= 0 || h * w <= kLargePlaneElements)
      return;
    RawFinding &f = ctx.report(op, "'" + v.name + "' " + v.type.shapeStr() +
                                       ": its last two axes "
                                       "hold " +
                                       std::to_string(h) + " x " + std::to_string(w) +
                                       " elements (> 4096 x 4096)");
    f.contested = "one report with only the input shape published, and no source states a plane "
                  "limit; the 4096 x 4096 threshold is ours";
    done = true;
  });
}

static const FeatureDescription *findFeature(const std::vector<FeatureDescription> &fs,
                                             const std::string &name) {
  for (const FeatureDescription &f : fs)
    if (f.name == name)
      return &f;
  return nullptr;
}

// ANE-SHAPE-004: RangeDim / fully dynamic inputs send the model to CPU/GPU.
static void checkDynamicShape(RuleContext &ctx, const Operation *) {
  for (const auto &in : ctx.facts.function->inputs) {
    if (!in->type.isTensor())
      continue;
    const FeatureDescription *fd = findFeature(ctx.facts.description.inputs, in->name);
    bool enumerated = fd && !fd->type.enumeratedShapes.empty();
    bool range = fd && fd->type.hasShapeRange;
    bool symbolic = !in->type.hasStaticShape();
    if (range || (symbolic && !enumerated)) {
      RawFinding &f = ctx.report(nullptr, "input '" + in->name + "' " + in->type.shapeStr() +
                                              (range ? " has a shape range" : " has dynamic dims") +
                                              "; range-shaped inputs keep the whole model off the "
                                              "ANE");
      f.wholeFunction = true;
    }
  }
}

// ANE-SHAPE-005: coremltools documents at most 128 enumerated shapes.
static void checkTooManyShapes(RuleContext &ctx, const Operation *) {
  for (const FeatureDescription &fd : ctx.facts.description.inputs)
    if (fd.type.enumeratedShapes.size() > 128) {
      RawFinding &f = ctx.report(nullptr, "input '" + fd.name + "' has " +
                                              std::to_string(fd.type.enumeratedShapes.size()) +
                                              " enumerated shapes > 128");
      f.wholeFunction = true;
    }
}

// ANE-SHAPE-006: the ANE pads the last axis of I/O buffers to 64 bytes.
static void checkIoAlignment(RuleContext &ctx, const Operation *) {
  auto check = [&](const Value &v, const char *what) {
    if (!v.type.isTensor() || v.type.dtype() == DType::String)
      return;
    auto shape = shapeOf(v.type);
    if (!shape || shape->empty())
      return;
    uint64_t bytes = (uint64_t)shape->back() * elementBytes(v.type.dtype());
    if (bytes == 0 || bytes % 64 == 0)
      return;
    uint64_t padded = (bytes + 63) / 64 * 64;
    ctx.report(nullptr, std::string(what) + " '" + v.name + "' " + v.type.shapeStr() +
                            ": last axis is " + std::to_string(bytes) + " bytes, padded to " +
                            std::to_string(padded) + " (" + std::to_string(padded / bytes) +
                            "x memory)");
  };
  for (const auto &in : ctx.facts.function->inputs)
    check(*in, "input");
  for (const Value *out : ctx.facts.function->body->outputs)
    check(*out, "output");
}

// ANE-SHAPE-007: coremltools FAQ: a static reshape turned dynamic by the
// conversion blocks the Neural Engine.
static void checkDynamicReshape(RuleContext &ctx, const Operation *op) {
  if (!op || !isRuntime(*op, "shape"))
    return;
  const Value *shape = op->inputValue("shape");
  ctx.report(op, "reshape target shape" + (shape ? " '" + shape->name + "'" : std::string()) +
                     " is computed at run time");
}

// ANE-SHAPE-008: coremltools#1909, LayerNorm kept an enumerated-shape model
// off the ANE; fixed and RangeDim shapes, or no LayerNorm, ran on it.
static void checkEnumeratedLayerNorm(RuleContext &ctx, const Operation *) {
  bool enumerated = false;
  for (const FeatureDescription &fd : ctx.facts.description.inputs)
    enumerated |= !fd.type.enumeratedShapes.empty();
  if (!enumerated)
    return;
  const Operation *norm = nullptr;
  walk(*ctx.facts.function->body, [&](const Operation &op) {
    if (!norm && op.type == "layer_norm")
      norm = &op;
  });
  if (norm)
    ctx.report(norm, "layer_norm in a function with enumerated input shapes; such a model ran "
                     "without the ANE")
        .wholeFunction = true;
}

static void checkScatterOp(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op,
           "has no ANE path on any chip (index_put with tensor indices lowers to scatter_nd)");
}

static void checkRecurrentOp(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op, "is not supported on the Neural Engine");
}

static void checkNoPathOp(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op, "has no ANE path on any chip");
}

static void checkControlFlow(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op, "is control flow; the ANE has none");
}

static void checkConv3d(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  const Type *x = paramType(*op, "x");
  if (x && x->hasRank() && x->rank() == 5)
    ctx.report(op, "3-D convolution (input " + x->shapeStr() + ") has no ANE lowering");
}

static void checkNmsOp(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op, "runs only with CPU or GPU");
}

// ANE-OP-007: gather with runtime indices; constant indices fold away.
static void checkGatherOp(RuleContext &ctx, const Operation *op) {
  if (!op || !isRuntime(*op, "indices"))
    return;
  const Value *idx = op->inputValue("indices");
  ctx.report(op, "'" + op->type + "' with runtime indices" +
                     (idx ? " '" + idx->name + "'" : std::string()) +
                     " is usually placed on CPU by Core ML");
}

static void checkSortOp(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op, "is placed off the ANE by Core ML");
}

static void checkSinCosOld(RuleContext &ctx, const Operation *op) {
  if (op)
    ctx.report(op, "'" + op->type + "' is not native on " + std::string(ctx.facts.chip->display));
}

static void checkTextureOld(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  // Every type of its RuleOps.def row but pad, which needs the texture
  // engine only in its reflect and symmetric modes.
  bool texture = true;
  if (op->type == "pad") {
    const Constant *mode = immediateInput(*op, "mode");
    auto m = mode ? mode->asString() : std::nullopt;
    texture = m && (*m == "reflect" || *m == "symmetric");
  }
  if (texture)
    ctx.report(op, "'" + op->type + "' needs the texture engine, absent on " +
                       std::string(ctx.facts.chip->display));
}

static void checkArgReduceAxis(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  const Type *x = paramType(*op, "x");
  auto shape = x ? shapeOf(*x) : std::nullopt;
  if (!shape || shape->empty())
    return;
  double len = 1;
  auto axis = immediateInt(*op, "axis");
  if (axis) {
    auto a = normalizeAxis(*axis, (int64_t)shape->size());
    if (!a)
      return;
    len = (double)(*shape)[*a];
  } else {
    for (int64_t d : *shape)
      len *= (double)d;
  }
  if (len > 2048)
    ctx.report(op, "reduces over " + std::to_string((long long)std::min(len, 9e18)) +
                       " elements > 2048");
}

static void checkSoftplusOldChip(RuleContext &ctx, const Operation *op) {
  if (op)
    ctx.report(op, "'" + op->type + "' is placed off the Neural Engine on " +
                       std::string(ctx.facts.chip->display) +
                       ": an M2 Pro kept it on the CPU in every shape tried");
}

static void checkCumsumOp(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op, "is placed on the CPU by Core ML (MLComputePlan)");
}

static void checkExp2Op(RuleContext &ctx, const Operation *op) {
  reportOp(ctx, op, "was among the ops that left the ANE when it replaced exp in softmax");
}

// ANE-OP-015: mobius's PocketTTS KV cache written by scatter at the current
// position failed the ANE compile, rank 5 or split into rank-4 K and V alike.
static void checkScatterCache(RuleContext &ctx, const Operation *op) {
  if (!op || !isRuntime(*op, "indices"))
    return;
  const Value *data = throughViews(op->inputValue("data"));
  if (!data)
    return;
  const Value *state = stateReadBy(data);
  if (!state && !(data->isBlockInput() && data->type.isTensor()))
    return;
  ctx.report(
      op, "scatters into " +
              (state ? stateDesc(state) : "input '" + data->name + "' " + data->type.shapeStr()) +
              " at runtime indices (a cache written in-graph)");
}

// ANE-OP-016: CoreML-LLM: a data-dependent gather_nd returned all zeros on the
// iOS ANE while the Mac CPU/GPU were right.
static void checkGatherNdRuntime(RuleContext &ctx, const Operation *op) {
  if (!op || !isRuntime(*op, "indices"))
    return;
  const Value *idx = op->inputValue("indices");
  ctx.report(op, "'gather_nd' at runtime indices" + (idx ? " '" + idx->name + "'" : std::string()) +
                     " returned all zeros on the iPhone ANE");
}

/// Conv weight shape [Cout, Cin/groups, spatial...] if static.
static std::optional<std::vector<int64_t>> convWeightShape(const Operation &op) {
  const Type *w = paramType(op, "weight");
  return w ? shapeOf(*w) : std::nullopt;
}

static void checkConvKernel(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  auto w = convWeightShape(*op);
  if (!w || w->size() < 3 || w->size() > 4)
    return;
  int64_t kw = w->back();
  int64_t kh = w->size() == 4 ? (*w)[2] : 1;
  const ChipInfo &chip = *ctx.facts.chip;
  if (kw > chip.kernelWidth || kh > chip.kernelHeight)
    ctx.report(op, "kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " exceeds " +
                       std::to_string(chip.kernelHeight) + "x" + std::to_string(chip.kernelWidth) +
                       " on " + std::string(chip.display));
}

static void checkConvGroups(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  auto g = immediateInt(*op, "groups");
  const Type *x = paramType(*op, "x");
  auto xs = x ? shapeOf(*x) : std::nullopt;
  auto w = convWeightShape(*op);
  if (!g || *g <= 1 || !xs || xs->size() < 2 || !w || w->empty())
    return;
  int64_t cin = (*xs)[1];
  int64_t cout = op->type == "conv" ? (*w)[0] : (*w)[1] * *g;
  if (cin % *g != 0 || cout % *g != 0)
    ctx.report(op, "groups " + std::to_string(*g) + " do not divide input channels " +
                       std::to_string(cin) + " and output channels " + std::to_string(cout));
}

static bool isDepthwise(const Operation &op, int64_t *channels = nullptr) {
  if (op.type != "conv")
    return false;
  auto g = immediateInt(op, "groups");
  const Type *x = paramType(op, "x");
  auto xs = x ? shapeOf(*x) : std::nullopt;
  if (!g || *g <= 1 || !xs || xs->size() < 2 || (*xs)[1] != *g)
    return false;
  if (channels)
    *channels = *g;
  return true;
}

// ANE-CONV-003: groups == C == 1024, kernel (1, 3) was CPU-placed in an iOS 26
// LFM2 audit; flagged from 1024 channels up.
static void checkDepthwiseWide(RuleContext &ctx, const Operation *op) {
  int64_t c = 0;
  if (op && isDepthwise(*op, &c) && c >= kWideDepthwiseChannels)
    ctx.report(op, "depthwise conv over " + std::to_string(c) +
                       " channels (groups == channels) was placed on CPU in a measured LFM2 audit");
}

static void checkDynamicWeightConv(RuleContext &ctx, const Operation *op) {
  if (!op || !isRuntime(*op, "weight") || !op->inputValue("weight"))
    return;
  const Type *x = paramType(*op, "x");
  auto xs = x ? shapeOf(*x) : std::nullopt;
  if (xs && !xs->empty() && (*xs)[0] >= 2)
    ctx.report(op, "conv with runtime weight '" + op->inputValue("weight")->name + "' and batch " +
                       std::to_string((*xs)[0]) + " crashes the ANE compiler");
}

static void checkMatmulRank(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  bool done = false;
  forEachTensor(*op, [&](const Value &v, bool) {
    if (!done && v.type.hasRank() && v.type.rank() == 5) {
      ctx.report(op, "'" + v.name + "' " + v.type.shapeStr() + " is rank 5");
      done = true;
    }
  });
}

static void checkMatmulKmem(RuleContext &ctx, const Operation *op) {
  if (!op || op->outputs.empty())
    return;
  auto s = shapeOf(op->output()->type);
  if (!s || s->empty())
    return;
  uint64_t bytes = (uint64_t)s->back() * elementBytes(op->output()->type.dtype());
  if (bytes > kMatmulKernelMemoryBytes)
    ctx.report(op, "output dim " + std::to_string(s->back()) + " needs " + std::to_string(bytes) +
                       " bytes of kernel memory > " + std::to_string(kMatmulKernelMemoryBytes));
}

static void checkChannelPad(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  const Type *x = paramType(*op, "x");
  auto pads = immediateInts(*op, "pad");
  if (!x || !x->hasRank() || x->rank() < 3 || !pads || pads->size() % 2)
    return;
  // pad lists (before, after) pairs for the last pads.size()/2 axes.
  int64_t first = x->rank() - (int64_t)pads->size() / 2;
  for (int64_t axis = std::max<int64_t>(first, 0); axis <= 1; ++axis) {
    size_t k = 2 * (axis - first);
    if (axis == 1 && k + 1 < pads->size() && ((*pads)[k] || (*pads)[k + 1]))
      ctx.report(op, "pads the channel axis by (" + std::to_string((*pads)[k]) + ", " +
                         std::to_string((*pads)[k + 1]) + ")");
  }
}

static void checkTileFactor(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  auto reps = immediateInts(*op, "reps");
  if (!reps)
    return;
  for (int64_t r : *reps)
    if (r != 1 && r != 2 && r != 3 && r != 4 && r != 8) {
      ctx.report(op, "reps " + dimsStr(*reps) + " include factor " + std::to_string(r));
      return;
    }
}

static bool weightIsConstant(const Operation &op, std::string_view param) {
  const OpInput *in = op.input(param);
  return in && !in->bindings.empty() && !isRuntime(op, param);
}

static void checkLinearNotConv(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  if ((op->type == "linear" && weightIsConstant(*op, "weight")) ||
      (op->type == "matmul" && weightIsConstant(*op, "y")))
    ctx.report(op, "projection written as '" + op->type +
                       "'; Apple recommends 1x1 conv on a (B, C, 1, S) layout");
}

// ANE-CONV-010, second scope: a program whose only compute op (beside consts
// and casts) is an fp16 matmul of two runtime tensors or an SDPA, too small
// for the cost model. Measured
// on single-op programs only (Vx#435, #437, Apple M4): the fp16 matmul is
// CPU-preferred up to 384x384 outputs and on the ANE at 512x512; SDPA is
// CPU-preferred up to 1,048,576 elements per Q/K/V and on the ANE from
// 2,097,152. The thresholds are the largest sizes the source saw on the CPU;
// the scope stays on lone ops because inside a larger ANE segment the cost
// model weighs the op with its neighbours.
static constexpr int64_t kLoneMatmulCpuOutputs = 384 * 384;
static constexpr int64_t kLoneSdpaCpuQueryElements = 1 << 20;
// The smallest SDPA the source measured (1x1x128x64): a single-token decode
// query is below it, unmeasured, and out of scope.
static constexpr int64_t kLoneSdpaMeasuredQueryElements = 128 * 64;

static bool aloneInProgram(const RuleContext &ctx, const Operation *op) {
  for (const auto &other : ctx.facts.function->body->ops)
    if (other.get() != op && !isConstLike(*other) && other->type != "cast")
      return false;
  return true;
}

static void checkTinyOp(RuleContext &ctx, const Operation *op) {
  if (!op || op->outputs.empty())
    return;
  auto n = op->output()->type.numElements();
  if (!n)
    return;
  if (*n <= 64 && op->type != "scaled_dot_product_attention") {
    uint64_t inputs = 0;
    for (const Value *v : op->operandValues())
      if (auto m = v->type.numElements())
        inputs += *m;
    if (inputs <= 4096) {
      ctx.report(op,
                 "produces only " + std::to_string(*n) + " elements; the cost model prefers CPU");
      return;
    }
  }
  // The measured programs multiply runtime inputs; a constant weight is the
  // projection case, which the measurement does not cover.
  bool runtimeOperands = op->type == "scaled_dot_product_attention"
                             ? isRuntime(*op, "query") && isRuntime(*op, "key")
                             : op->type == "matmul" && isRuntime(*op, "x") && isRuntime(*op, "y");
  if (op->output()->type.dtype() != DType::F16 || !runtimeOperands || !aloneInProgram(ctx, op))
    return;
  if (op->type == "scaled_dot_product_attention") {
    const Value *q = op->inputValue("query");
    auto qn = q ? q->type.numElements() : std::nullopt;
    if (qn && *qn >= kLoneSdpaMeasuredQueryElements && *qn <= kLoneSdpaCpuQueryElements)
      ctx.report(op, "the only compute op of its program, with " + std::to_string(*qn) +
                         " query elements (measured: CPU up to 1048576, ANE from 2097152)");
  } else if (*n <= kLoneMatmulCpuOutputs) {
    ctx.report(op, "the only compute op of its program, with " + std::to_string(*n) +
                       " output elements (measured: fp16 matmul on CPU up to 384x384, ANE at "
                       "512x512)");
  }
}

// ANE-CONV-011: Apple's layer guidelines: strides should factor into 2s and 3s.
static void checkStrideFactor(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  auto strides = immediateInts(*op, "strides");
  if (!strides)
    return;
  for (int64_t s : *strides) {
    int64_t r = s;
    while (r > 1 && r % 2 == 0)
      r /= 2;
    while (r > 1 && r % 3 == 0)
      r /= 3;
    if (s > 0 && r != 1) {
      ctx.report(op, "strides " + dimsStr(*strides) + " include " + std::to_string(s) +
                         ", which does not factor into 2s and 3s");
      return;
    }
  }
}

// ANE-ATTN-003: Stable Diffusion attention converted through einsum with
// batch and heads folded into one axis, scores (16, 4096, 4096), was not
// loaded on the ANE (coremltools#1613). Rank-3 bmm over 64x64 chunks stays on
// it (CoreML-LLM): the sequence threshold is ours. Always contested.
static constexpr int64_t kFoldedAttentionSeq = 1024;

static void checkFoldedAttention(RuleContext &ctx, const Operation *op) {
  if (!op || op->outputs.empty() || !isRuntime(*op, "x") || !isRuntime(*op, "y"))
    return;
  const Type *x = paramType(*op, "x");
  const Type *y = paramType(*op, "y");
  auto out = shapeOf(op->output()->type);
  if (!x || !y || !x->hasRank() || !y->hasRank() || x->rank() != 3 || y->rank() != 3 || !out ||
      out->size() != 3)
    return;
  int64_t rows = (*out)[1], cols = (*out)[2];
  if (std::max(rows, cols) < kFoldedAttentionSeq || (*out)[0] < 2)
    return;
  RawFinding &f = ctx.report(op, "rank-3 matmul -> " + op->output()->type.shapeStr() + ": " +
                                     std::to_string((*out)[0]) +
                                     " batch x head slices folded into one axis "
                                     "over a sequence of " +
                                     std::to_string(std::max(rows, cols)));
  f.contested = "one report with other suspects (coremltools#1613, head count assumed); the "
                "1024-long sequence threshold is ours";
}

static void checkSdpaIos26(RuleContext &ctx, const Operation *op) {
  if (op && op->type == "scaled_dot_product_attention")
    ctx.report(op, "the ANE SDPA kernel gives wrong results on iOS 26");
}

// ANE-ATTN-002: a second global SDPA (head dim 512, keys over the context) in
// one function broke the ANE compile of its segment; one global site next to
// sliding-window sites (head dim 256, 512 keys) compiled. Only global sites count.
static void checkSdpaMany(RuleContext &ctx, const Operation *) {
  std::vector<std::pair<const Operation *, std::string>> global;
  walk(*ctx.facts.function->body, [&](const Operation &op) {
    if (op.type != "scaled_dot_product_attention")
      return;
    const Type *k = paramType(op, "key");
    auto ks = k ? shapeOf(*k) : std::nullopt;
    if (!ks || ks->size() < 2)
      return;
    int64_t keys = (*ks)[ks->size() - 2], headDim = ks->back();
    if (headDim > 256 && keys > 512)
      global.push_back(
          {&op, "head dim " + std::to_string(headDim) + ", " + std::to_string(keys) + " keys"});
  });
  // The compile of the segment holding the deeper one fails, and the whole
  // model silently falls back to the CPU (no error surfaced).
  for (size_t i = 1; i < global.size(); ++i)
    ctx.report(global[i].first, "global SDPA " + std::to_string(i + 1) + " of " +
                                    std::to_string(global.size()) + " in this function (" +
                                    global[i].second + "; global: head dim > 256, keys > 512)");
}

// ANE-QUANT-001: the ANE takes per-tensor or per-output-channel scales only; a
// scale dim strictly between 1 and the data dim means blocks.
static void checkBlockwiseQuant(RuleContext &ctx, const Operation *op) {
  if (!op || weightSchemeOf(*op) != WeightScheme::Blockwise)
    return;
  const Type *data = paramType(*op, "data");
  const Type *scale = paramType(*op, "scale");
  auto ds = data ? shapeOf(*data) : std::nullopt;
  auto ss = scale ? shapeOf(*scale) : std::nullopt;
  if (!ds || !ss || ds->size() != ss->size())
    return;
  for (size_t i = 0; i < ds->size(); ++i)
    if ((*ss)[i] != 1 && (*ss)[i] != (*ds)[i]) {
      RawFinding &f = ctx.report(op, "scale " + dimsStr(*ss) + " over weight " + dimsStr(*ds) +
                                         " quantizes axis " + std::to_string(i) + " in blocks of " +
                                         std::to_string((*ds)[i] / std::max<int64_t>(1, (*ss)[i])));
      // The consumers of the decompressed weight leave the ANE with it.
      auto it = op->outputs.empty() ? ctx.facts.users.end() : ctx.facts.users.find(op->output());
      if (it != ctx.facts.users.end())
        f.related = it->second;
      return;
    }
}

// ANE-QUANT-002: the failing case is LFM2's 1024-channel short-conv kernel;
// palettized CNNs with narrower depthwise convs run, so only wide ones fire.
static void checkPalettizedDepthwise(RuleContext &ctx, const Operation *op) {
  int64_t channels = 0;
  if (!op || !isDepthwise(*op, &channels) || channels < kWideDepthwiseChannels)
    return;
  const Value *w = op->inputValue("weight");
  const Operation *def = w ? w->definingOp : nullptr;
  if (!def || def->type != "constexpr_lut_to_dense")
    return;
  const Type *idx = paramType(*def, "indices");
  if (idx && (idx->dtype() == DType::U4 || idx->dtype() == DType::I4))
    ctx.report(op, "depthwise conv over " + std::to_string(channels) +
                       " channels with 4-bit palettized weight ('" + def->name + "')");
}

// ANE-QUANT-003: joint compression (int8 lookup-table entries) sent the
// dequantize ops off the ANE; fp16 lookup tables stay on it.
static void checkQuantizedLut(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  const Value *lut = op->inputValue("lut");
  const Type *t = paramType(*op, "lut");
  bool quantized = (lut && lut->definingOp && decompressesWeights(lut->definingOp->type)) ||
                   (t && (t->dtype() == DType::I8 || t->dtype() == DType::U8));
  if (!quantized)
    return;
  RawFinding &f = ctx.report(op, "lookup table of '" + op->name + "' is itself quantized (" +
                                     (t ? std::string(dtypeName(t->dtype())) : "?") +
                                     "); its dequantization leaves the ANE");
  auto it = op->outputs.empty() ? ctx.facts.users.end() : ctx.facts.users.find(op->output());
  if (it != ctx.facts.users.end())
    f.related = it->second;
}

// ANE-QUANT-004: W8A8 quantize/dequantize: rejected by one iPhone ANE compile,
// documented by Apple as int8-int8 compute on A17 Pro/M4. Always contested.
static void checkActivationQuant(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  RawFinding &f = ctx.report(op, "'" + op->type + "' quantizes activations (W8A8)");
  f.contested = "Apple documents int8-int8 activation compute on the Neural Engine of A17 Pro "
                "and M4; the rejection was one iPhone report";
}

/// The ops reading the result of `op` (the consumers of a decompressed weight).
static std::vector<const Operation *> consumersOf(const FunctionFacts &f, const Operation &op) {
  auto it = op.outputs.empty() ? f.users.end() : f.users.find(op.output());
  return it == f.users.end() ? std::vector<const Operation *>{} : it->second;
}

// ANE-QUANT-005: coremltools PR#2688: a lookup table rescaled by
// constexpr_blockwise_shift_scale (enable_per_channel_scale, and the per-tensor
// wrapper) aborts the ANE load on macOS 26 ('mps.dequantize' wants quantized
// data). CoreML-LLM reports the same chain compiling: always contested.
static void checkRescaledLut(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  const Type *data = paramType(*op, "data");
  if (!data || !isFloat(data->dtype()))
    return;
  const Value *d = op->inputValue("data");
  const Operation *def = d ? d->definingOp : nullptr;
  RawFinding &f =
      ctx.report(op, "rescales the " + std::string(dtypeName(data->dtype())) + " weight " +
                         data->shapeStr() + (def ? " from '" + def->type + "'" : std::string()) +
                         "; the ANE dequantize takes quantized data only");
  f.contested = "CoreML-LLM reports per-grouped-channel palettization with a per-channel scale "
                "compiling for the ANE";
  f.related = consumersOf(ctx.facts, *op);
}

// ANE-QUANT-006: CoreML-LLM: ternary weights with a 2-bit lookup table per
// (row, block) fail the ANE compile (-14); one table per group of output
// channels compiles. Observed in one stateful model: always contested.
static void checkLutPerBlock(RuleContext &ctx, const Operation *op) {
  if (!op)
    return;
  const Type *idx = paramType(*op, "indices");
  const Type *lut = paramType(*op, "lut");
  auto is = idx ? shapeOf(*idx) : std::nullopt;
  auto ls = lut ? shapeOf(*lut) : std::nullopt;
  if (!is || !ls || ls->size() != is->size() + 2)
    return;
  std::string axes;
  for (size_t i = 0; i < is->size(); ++i)
    if ((*ls)[i] > 1)
      axes += (axes.empty() ? "" : ", ") + std::to_string(i);
  if (axes.find(',') == std::string::npos)
    return;
  RawFinding &f = ctx.report(op, "lookup table " + dimsStr(*ls) + " over weight " + dimsStr(*is) +
                                     " varies along axes " + axes + " (a table per block)");
  f.contested = "one report, in a stateful model with other suspects (CoreML-LLM)";
  f.related = consumersOf(ctx.facts, *op);
}

static std::string gigabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}

/// "1.23 GB stored" and, for a compressed model, "(4.56 GB decompressed)".
static std::string storedSize(const WeightCount &w) {
  std::string s = gigabytes(w.storedBytes) + " as stored";
  if (w.compressed())
    s += " (" + gigabytes(w.denseBytes) + " once decompressed)";
  return s;
}

// ANE-PROG-001/002 judge the stored size: the on-device budgets were measured
// on package sizes (a 900 MB int4 package compiled on the iPhone ANE where the
// same model's 1.8 GB int8 package did not), not on decompressed sizes.
static void checkModelSize(RuleContext &ctx, const Operation *) {
  const WeightCount &w = ctx.facts.modelWeights;
  if (w.storedBytes > kPhoneModelWeightBytes)
    ctx.report(nullptr, "model weights are " + storedSize(w) + " > ~1 GB, the iPhone ANE limit")
        .wholeFunction = true;
}

static void checkPackageSize(RuleContext &ctx, const Operation *) {
  const WeightCount &w = ctx.facts.modelWeights;
  if (w.storedBytes > kPackageWeightBytes)
    ctx.report(nullptr, "model weights are " + storedSize(w) +
                            " > ~1.4 GB, past the observed single-package ANE budget")
        .wholeFunction = true;
}

// ANE-PROG-003: a .pte delegate carries the compute units ExecuTorch's Core ML
// backend loads it with; without the Neural Engine no op of it goes there.
static void checkDelegateComputeUnits(RuleContext &ctx, const Operation *) {
  const Model *model = ctx.facts.model;
  if (!model)
    return;
  auto it = model->compileSpecs.find("compute_units");
  if (it == model->compileSpecs.end())
    return;
  std::string cu = asciiLower(it->second);
  if (cu != "cpu_only" && cu != "cpu_and_gpu" && cu != "cpu" && cu != "gpu")
    return;
  size_t ops = 0;
  for (const auto &op : ctx.facts.function->body->ops)
    ops += !isConstLike(*op);
  ctx.report(nullptr, "the delegate's compile spec says compute_units=" + it->second +
                          ": ExecuTorch loads it so, and Core ML runs none of its " +
                          std::to_string(ops) + " ops on the Neural Engine")
      .wholeFunction = true;
}

// ANE-PLACE-001: runs after placement; each ANE <-> CPU/GPU switch costs a
// roughly fixed 0.5-1.75 ms.
// ANE-COV-001: a risky pattern (compression layout, state use, runtime-index
// update, very wide dim) that no working case of the evidence corpus holds.
// Runs after placement, like ANE-PLACE-001: an op another rule already puts
// on the CPU/GPU is not at risk on the ANE, and one a contested rule already
// flags needs no second word.
static void checkUnverifiedPattern(RuleContext &ctx, const Operation *) {
  const FunctionReport *placed = ctx.facts.placed;
  if (!placed)
    return;
  const Coverage &coverage =
      ctx.facts.options.coverage ? *ctx.facts.options.coverage : builtinCoverage();
  for (const OpReport &o : placed->ops) {
    // Off the ANE, or another rule already speaks for the op.
    if (o.placement != Placement::Ane || o.atRisk)
      continue;
    OpPattern p = opPattern(*o.op);
    if (!p.risky || coverage.contains(p.key))
      continue;
    std::string nearest;
    size_t shown = 0;
    for (const std::string &k : coverage.keys)
      if (k.rfind(o.op->type + " ", 0) == 0 && shown < 3)
        nearest += (shown++ ? "; " : "") + k;
    RawFinding &f =
        ctx.report(o.op, "pattern '" + p.key + "' has no working case in the evidence corpus" +
                             (nearest.empty() ? " (nor has any " + o.op->type + ")"
                                              : " (working: " + nearest + ")"));
    f.contested =
        "no public case shows this pattern failing either: it is unverified, not known to fail";
  }
}

static void checkBoundaries(RuleContext &ctx, const Operation *) {
  const FunctionReport *p = ctx.facts.placed;
  if (!p || p->boundaries == 0 || p->aneOps == 0)
    return;
  char cost[64];
  std::snprintf(cost, sizeof cost, "%.1f-%.1f ms", 0.5 * p->boundaries, 1.75 * p->boundaries);
  ctx.report(nullptr, std::to_string(p->segments.size()) + " segments with " +
                          std::to_string(p->boundaries) + " ANE <-> CPU/GPU boundaries, about " +
                          cost + " per prediction");
}

namespace {
#define RULE_OPS(Enum, ...) constexpr std::string_view kOpsOf##Enum[] = {__VA_ARGS__};
#define RULE_SKIPS(Enum, ...) constexpr std::string_view kSkipsOf##Enum[] = {__VA_ARGS__};
#include "ane/RuleOps.def"
} // namespace

std::span<const std::string_view> ruleSkippedOpTypes(RuleId id) {
  switch (id) {
#define RULE_SKIPS(Enum, ...)                                                                      \
  case RuleId::Enum:                                                                               \
    return kSkipsOf##Enum;
#include "ane/RuleOps.def"
  default:
    return {};
  }
}

std::span<const std::string_view> ruleOpTypes(RuleId id) {
  switch (id) {
#define RULE_OPS(Enum, ...)                                                                        \
  case RuleId::Enum:                                                                               \
    return kOpsOf##Enum;
#include "ane/RuleOps.def"
  default:
    return {};
  }
}

void runRule(RuleId rule, RuleContext &ctx) {
  using Predicate = void (*)(RuleContext &, const Operation *);
  static constexpr Predicate kPredicates[] = {
#define ANE_RULE(Enum, ...) &check##Enum,
#include "ane/AneRules.def"
  };
  ctx.current = rule;
  Predicate p = kPredicates[static_cast<size_t>(rule)];
  if (ruleInfo(rule).kind == RuleKind::Function) {
    p(ctx, nullptr);
    return;
  }
  std::span<const std::string_view> types = ruleOpTypes(rule), skips = ruleSkippedOpTypes(rule);
  walk(*ctx.facts.function->body, [&](const Operation &op) {
    if ((types.empty() || std::find(types.begin(), types.end(), op.type) != types.end()) &&
        std::find(skips.begin(), skips.end(), op.type) == skips.end())
      p(ctx, &op);
  });
}

} // namespace anefit::ane
