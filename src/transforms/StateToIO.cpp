//===- StateToIO.cpp - Core ML states become model inputs and outputs -----===//
//
// The LFM2 fix: the ANE compiler rejects programs with several small Core ML
// states, yet runs the same program when each state is a plain input the
// host feeds and an output the model returns. This pass performs that move
// for the selected states of every function, rewrites their update chains
// to static slices, updates the model description and records the state map.
//
//===----------------------------------------------------------------------===//
#include "transforms/Builders.h"
#include "transforms/PassImpl.h"
#include "transforms/Patterns.h"

#include "ops/OpRegistry.h"

#include "support/Error.h"

#include <algorithm>
#include <map>
#include <set>

namespace anefit {

namespace {

/// `*` and `?` glob match.
bool globMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

/// True if `type` is defined by iOS18 the way iOS18 programs use it (read from
/// the op table): while such an op remains, the program cannot be lowered to
/// iOS17.
bool needsIos18(const std::string &type) {
  const OpDef *def = findOp(type, 18);
  return def && def->requiredIosVersion() >= 18;
}

/// What we know about one state across the functions of a model.
struct StateInfo {
  std::string name;
  Type tensorType; ///< the wrapped tensor
  std::vector<std::string> functions;
  uint64_t bytes = 0;
};

std::string shapeText(const Type &t) {
  std::string s;
  for (const Dim &d : t.shape())
    s += (s.empty() ? "" : "x") + d.str();
  return s + " " + std::string(dtypeName(t.dtype()));
}

class StateToIOPass : public Pass {
public:
  explicit StateToIOPass(PassOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "state-to-io"; }
  void run(Model &model, PassResult &result) override;

private:
  PassOptions options_;

  std::vector<std::string> select(const std::vector<StateInfo> &states, const Model &model,
                                  std::vector<std::string> &kept, PassResult &result) const;
  /// Rewrites state `name` of `fn`; returns the value it holds at the end.
  Value *rewriteFunction(Function &fn, const std::string &name, const std::string &inputName,
                         bool &written, const std::string &origin);
};

std::vector<std::string> StateToIOPass::select(const std::vector<StateInfo> &states,
                                               const Model &model, std::vector<std::string> &kept,
                                               PassResult &result) const {
  std::string origin = model.sourcePath.empty() ? "state-to-io" : model.sourcePath;
  std::string available;
  for (const StateInfo &s : states)
    available += (available.empty() ? "" : ", ") + s.name;
  if (available.empty())
    available = "none";

  std::vector<std::string> requested = options_.list("states");
  bool keepLargest = options_.flag("keep-largest");
  if (!requested.empty() && keepLargest)
    throw InputError::at(origin, "state-to-io",
                         "options 'states' and 'keep-largest' exclude each other");

  std::vector<std::string> chosen;
  if (!requested.empty()) {
    for (const std::string &pattern : requested) {
      bool any = false;
      for (const StateInfo &s : states)
        if (globMatch(pattern, s.name)) {
          any = true;
          if (std::find(chosen.begin(), chosen.end(), s.name) == chosen.end())
            chosen.push_back(s.name);
        }
      if (!any)
        throw InputError::at(origin, "state-to-io{states}",
                             "no state matches '" + pattern + "'; available states: " + available);
    }
    for (const StateInfo &s : states)
      if (std::find(chosen.begin(), chosen.end(), s.name) == chosen.end())
        kept.push_back(s.name);
    return chosen;
  }

  const StateInfo *keep = nullptr;
  if (keepLargest) {
    // Only a state the ANE is known to accept is worth keeping: a tiny or
    // unaligned innermost dim (the (1, D, 2) conv state) fails even alone.
    int64_t align = std::max<int64_t>(1, options_.integer("keep-align"));
    for (const StateInfo &s : states) {
      const auto &shape = s.tensorType.shape();
      if (shape.empty() || !shape.back().isStatic() || shape.back().size % align != 0)
        continue;
      if (!keep || s.bytes > keep->bytes || (s.bytes == keep->bytes && s.name < keep->name))
        keep = &s;
    }
    if (keep) {
      kept.push_back(keep->name);
      result.changes.push_back("state-to-io: kept state '" + keep->name + "' (" +
                               shapeText(keep->tensorType) + ") as a Core ML state (largest)");
    } else if (!states.empty()) {
      result.diagnostics.push_back(
          {Diagnostic::Severity::Note, "", "",
           "keep-largest: no state has an innermost dim that is a multiple of " +
               std::to_string(align) + "; moving every state"});
    }
  }
  for (const StateInfo &s : states)
    if (&s != keep)
      chosen.push_back(s.name);
  return chosen;
}

Value *StateToIOPass::rewriteFunction(Function &fn, const std::string &name,
                                      const std::string &inputName, bool &written,
                                      const std::string &origin) {
  size_t index = 0;
  while (index < fn.inputs.size() && fn.inputs[index]->name != name)
    ++index;
  Value *state = fn.inputs[index].get();

  UseMap uses(fn);
  PatternRewriter rw(fn, uses);
  for (const Use &u : uses.uses(state)) {
    if (u.isBlockOutput() || u.user->parent != fn.body.get())
      throw InputError::at(origin, fn.name + ": state '" + name + "'",
                           "expected state ops at function level, found a use inside a nested "
                           "block (op '" +
                               (u.user ? u.user->name : std::string("block output")) + "')");
  }

  // The new tensor input takes the state's place in the signature; the old
  // state value lives until all of its uses are gone.
  auto input = std::make_unique<Value>(inputName, state->type.elementType());
  input->ownerBlock = fn.body.get();
  Value *current = input.get();
  std::unique_ptr<Value> oldState = std::move(fn.inputs[index]);
  fn.inputs[index] = std::move(input);

  std::vector<Operation *> ops;
  for (auto &op : fn.body->ops)
    ops.push_back(op.get());
  for (Operation *op : ops) {
    bool usesState = false;
    for (Value *v : op->operandValues())
      usesState = usesState || v == state;
    if (!usesState)
      continue;
    const OpDef *def = findAnyOp(op->type);
    const ParamSpec *stateParam = def ? def->stateParam() : nullptr;
    const ParamSpec *valueParam = def ? def->writtenValueParam() : nullptr;
    bool onState = stateParam && op->inputValue(stateParam->name) == state;
    if (onState && def->has(OpTrait::StateRead) && op->outputs.size() == 1) {
      rw.replaceAllUsesWith(op->output(0), current);
      rw.eraseOp(*op);
    } else if (onState && valueParam && op->inputValue(valueParam->name) &&
               op->outputs.size() <= 1) {
      // A write (write_state) or an update that also returns the new value
      // (coreml_update_state).
      current = op->inputValue(valueParam->name);
      if (!op->outputs.empty())
        rw.replaceAllUsesWith(op->output(0), current);
      written = true;
      rw.eraseOp(*op);
    } else {
      throw InputError::at(origin, fn.name + ": op '" + op->name + "'",
                           "expected " +
                               opNamesWithTrait(OpTrait::StateRead | OpTrait::StateWrite, "or") +
                               " to use state '" + name + "', found " + op->type);
    }
  }
  if (uses.hasUses(state))
    throw InputError::at(origin, fn.name + ": state '" + name + "'",
                         "expected only state ops to use it, found other uses");
  return current;
}

/// The producer chain that makes a written value: slice_updates reached
/// through shape-preserving single-input ops.
void collectUpdateOps(Value *v, std::unordered_set<const Operation *> &out) {
  for (int depth = 0; v && v->definingOp && depth < 8; ++depth) {
    Operation *op = v->definingOp;
    if (op->type == "slice_update") {
      out.insert(op);
      v = op->inputValue("x");
    } else if (op->type == "identity") {
      v = op->inputValue("x");
    } else {
      return;
    }
  }
}

FeatureDescription arrayFeature(const std::string &name, const Type &t, const std::string &origin) {
  FeatureDescription f;
  f.name = name;
  f.type.kind = FeatureType::Kind::MultiArray;
  auto shape = t.staticShape();
  if (!shape)
    failExpected(origin, "state '" + name + "'", "a static shape", t.shapeStr());
  f.type.shape = *shape;
  auto adt = arrayDataTypeOf(t.dtype());
  if (!adt)
    failExpected(origin, "state '" + name + "'", "fp16, fp32, fp64, int32 or int8 elements",
                 std::string(dtypeName(t.dtype())));
  f.type.dataType = *adt;
  return f;
}

/// Moves state `state` of one description (a function's or the top level).
template <typename Desc>
void moveInDescription(Desc &d, const std::string &state, const FeatureDescription &in,
                       const FeatureDescription &out) {
  auto it = std::find_if(d.states.begin(), d.states.end(),
                         [&](const FeatureDescription &f) { return f.name == state; });
  if (it == d.states.end())
    return;
  FeatureDescription input = in;
  input.shortDescription = it->shortDescription;
  d.states.erase(it);
  d.inputs.push_back(input);
  d.outputs.push_back(out);
}

bool canLowerToIOS17(const Model &model) {
  if (model.specificationVersion != 9 || !model.program || model.program->functions.size() != 1 ||
      model.description.functions.size() > 1)
    return false;
  for (const auto &fn : model.program->functions) {
    if (fn->opset != "CoreML8" || !fn->otherSpecializations.empty())
      return false;
    for (const auto &in : fn->inputs)
      if (!in->type.isTensor())
        return false;
    bool ok = true;
    walk(static_cast<const Block &>(*fn->body), [&](const Operation &op) {
      if (needsIos18(op.type))
        ok = false;
      for (const auto &out : op.outputs)
        if (out->type.isTensor() && isSubByte(out->type.dtype()))
          ok = false;
    });
    if (!ok)
      return false;
  }
  return model.description.states.empty();
}

void StateToIOPass::run(Model &model, PassResult &result) {
  std::string origin = model.sourcePath.empty() ? "state-to-io" : model.sourcePath;
  if (!model.program)
    throw InputError::at(origin, "", "expected an ML Program, found none");

  // Every state by name, across functions; a state's type must agree.
  std::vector<StateInfo> states;
  for (const auto &fn : model.program->functions)
    for (const auto &in : fn->inputs) {
      if (!in->type.isState())
        continue;
      auto it = std::find_if(states.begin(), states.end(),
                             [&](const StateInfo &s) { return s.name == in->name; });
      if (it == states.end()) {
        StateInfo s{in->name, in->type.elementType(), {}, 0};
        auto n = s.tensorType.numElements();
        s.bytes = n ? storageBytes(s.tensorType.dtype(), static_cast<uint64_t>(*n)) : 0;
        states.push_back(std::move(s));
        it = states.end() - 1;
      } else if (it->tensorType != in->type.elementType()) {
        failExpected(origin, fn->name + ": state '" + in->name + "'",
                     it->tensorType.str() + " as in function " + it->functions.front(),
                     in->type.elementType().str());
      }
      it->functions.push_back(fn->name);
    }

  std::vector<std::string> kept;
  std::vector<std::string> chosen = select(states, model, kept, result);
  std::string inSuffix = options_.string("input-suffix");
  std::string outSuffix = options_.string("output-suffix");
  if (inSuffix == outSuffix)
    throw InputError::at(origin, "state-to-io",
                         "expected different input-suffix and output-suffix, found '" + inSuffix +
                             "' for both");

  // A moved state's final value, parked on its function's outputs so the
  // rewrites below keep it current; named after the state once they ran.
  struct Moved {
    std::string function, state, output;
    size_t outIndex;
  };
  std::vector<Moved> moved;
  for (const std::string &name : chosen) {
    const StateInfo &info = *std::find_if(states.begin(), states.end(),
                                          [&](const StateInfo &s) { return s.name == name; });
    StateMapEntry entry;
    entry.state = name;
    entry.input = name + inSuffix;
    entry.output = name + outSuffix;
    entry.shape = info.tensorType.staticShape().value_or(std::vector<int64_t>{});
    entry.dtype = info.tensorType.dtype();
    entry.functions = info.functions;
    entry.written = false;
    FeatureDescription inFeature = arrayFeature(entry.input, info.tensorType, origin);
    FeatureDescription outFeature = arrayFeature(entry.output, info.tensorType, origin);

    for (const std::string &fname : info.functions) {
      Function &fn = *model.program->findFunction(fname);
      {
        NameTable names(fn);
        if (entry.input != name && names.contains(entry.input))
          throw InputError::at(origin, fname + ": state '" + name + "'",
                               "input name '" + entry.input +
                                   "' is already used; choose another input-suffix");
        if (names.contains(entry.output))
          throw InputError::at(origin, fname + ": state '" + name + "'",
                               "output name '" + entry.output +
                                   "' is already used; choose another output-suffix");
      }
      bool written = false;
      Value *final = rewriteFunction(fn, name, entry.input, written, origin);
      entry.written = entry.written || written;
      fn.body->outputs.push_back(final);
      moved.push_back({fname, name, entry.output, fn.body->outputs.size() - 1});
      for (FunctionDescription &fd : model.description.functions)
        if (fd.name == fname)
          moveInDescription(fd, name, inFeature, outFeature);
    }
    moveInDescription(model.description, name, inFeature, outFeature);
    result.changes.push_back("state-to-io: moved state '" + name + "' (" +
                             shapeText(info.tensorType) + ") to input '" + entry.input +
                             "' and output '" + entry.output + "'" +
                             (entry.written ? "" : " (never written: passed through)"));
    result.stateMap.entries.push_back(entry);
  }

  // Make the update chains of the moved states static, one function at a
  // time so that writes at one position share one mask.
  size_t staticRewrites = 0;
  for (const auto &fnPtr : model.program->functions) {
    Function &fn = *fnPtr;
    auto updatesOf = [&] {
      std::unordered_set<const Operation *> updates;
      for (const Moved &m : moved)
        if (m.function == fn.name)
          collectUpdateOps(fn.body->outputs[m.outIndex], updates);
      return updates;
    };
    auto countUpdates = [&] {
      size_t n = 0;
      walk(*fn.body, [&](Operation &op) { n += op.type == "slice_update"; });
      return n;
    };
    std::unordered_set<const Operation *> updates = updatesOf();
    if (updates.empty())
      continue;
    size_t before = countUpdates();
    if (options_.flag("static-updates") || options_.flag("masked-updates")) {
      // Shape arithmetic feeding the bounds folds first, so a write whose
      // bounds turn out constant needs no mask.
      PatternList patterns;
      populateFoldPatterns(patterns);
      populateSliceOfConcatPatterns(patterns);
      if (options_.flag("static-updates"))
        patterns.push_back(createStaticSliceUpdatePattern(&updates));
      applyPatternsGreedily(fn, patterns);
    }
    if (options_.flag("masked-updates")) {
      // The kv-write-static rewrite, with that pass's default options.
      int64_t chainRows = PassOptions(*findPass("kv-write-static"), {}).integer("chain-rows");
      updates = updatesOf();
      rewriteRuntimeSliceUpdates(fn, &updates, chainRows);
    }
    staticRewrites += before - countUpdates();
  }

  for (const Moved &m : moved) {
    Function &fn = *model.program->findFunction(m.function);
    Block &body = *fn.body;
    Value *final = body.outputs[m.outIndex];
    if (final->definingOp && final->definingOp->type == "slice_update" &&
        !final->definingOp->constInput("begin"))
      result.diagnostics.push_back(
          {Diagnostic::Severity::Warning, m.function, final->definingOp->name,
           "state '" + m.state +
               "' is still updated by a slice_update at a runtime position; the ANE compiler "
               "may reject it"});

    // Name the output after the state: rename the producing value when
    // that is safe, else add an identity that carries the name.
    bool alsoOutput = std::count(body.outputs.begin(), body.outputs.end(), final) > 1;
    if (final->definingOp && final->definingOp->type != "const" && !alsoOutput) {
      final->name = m.output;
    } else {
      auto id = std::make_unique<Operation>("identity", m.output);
      id->setInput("x", Binding::of(final));
      Value *out = id->addOutput(m.output, final->type);
      body.append(std::move(id));
      body.outputs[m.outIndex] = out;
    }
  }
  if (staticRewrites)
    result.changes.push_back("state-to-io: made " + std::to_string(staticRewrites) +
                             " state updates static (slice_update -> concat + slice_by_index, or a "
                             "one-hot select for a runtime position)");
  for (const std::string &k : kept)
    if (std::find(result.stateMap.keptStates.begin(), result.stateMap.keptStates.end(), k) ==
        result.stateMap.keptStates.end())
      result.stateMap.keptStates.push_back(k);

  if (chosen.empty())
    return;
  if (options_.flag("lower-spec") && canLowerToIOS17(model)) {
    model.program->functions.front()->opset = "CoreML7";
    model.specificationVersion = 8;
    result.changes.push_back("state-to-io: no iOS18-only feature left: lowered specification "
                             "version 9 -> 8 and opset CoreML8 -> CoreML7");
  }

  // The host needs the map; keep it inside the model too, merged with a map
  // an earlier fix may have left there.
  StateMap stored;
  auto &ud = model.description.metadata.userDefined;
  auto it = ud.find(StateMap::kMetadataKey);
  if (it != ud.end())
    stored = StateMap::fromJson(it->second, origin + ": metadata " + StateMap::kMetadataKey);
  for (const StateMapEntry &e : result.stateMap.entries)
    if (!stored.find(e.state))
      stored.entries.push_back(e);
  stored.keptStates = result.stateMap.keptStates;
  ud[StateMap::kMetadataKey] = stored.toJson(-1);
}

} // namespace

std::unique_ptr<Pass> createStateToIOPass(const PassOptions &options) {
  return std::make_unique<StateToIOPass>(options);
}

} // namespace anefit
