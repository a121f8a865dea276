//===- PassManager.cpp - Pass registry, pipelines and the pass manager ----===//
//
// The registry is generated from Passes.def; pipelines are parsed here, and
// the pass manager runs passes while keeping function output names stable.
//
//===----------------------------------------------------------------------===//
#include "transforms/PassImpl.h"
#include "transforms/PatternRewriter.h"
#include "transforms/Requantize.h"
#include "transforms/UseMap.h"

#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "support/Error.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace anefit {

namespace {

std::string kindName(PassOptionKind k) {
  switch (k) {
  case PassOptionKind::Flag:
    return "flag";
  case PassOptionKind::String:
    return "string";
  case PassOptionKind::List:
    return "list";
  case PassOptionKind::Int:
    return "int";
  }
  return "?";
}

std::string knownPassNames() {
  std::string s;
  for (const PassInfo &p : passRegistry())
    s += (s.empty() ? "" : ", ") + std::string(p.cliName);
  return s;
}

using Factory = std::unique_ptr<Pass> (*)(const PassOptions &);

struct FactoryRow {
  std::string_view cliName;
  Factory factory;
};

const FactoryRow kFactories[] = {
#define PASS(Id, CliName, Summary, Description, Before, After) {CliName, &create##Id##Pass},
#include "transforms/Passes.def"
};

} // namespace

const std::vector<PassInfo> &passRegistry() {
  static const std::vector<PassInfo> registry = [] {
    std::vector<PassInfo> rows;
#define PASS(Id, CliName, Summary, Description, Before, After)                                     \
  rows.push_back(PassInfo{CliName, Summary, Description, Before, After, {}, {}});
#include "transforms/Passes.def"
    auto add = [&](std::string_view pass, PassOptionInfo opt) {
      for (PassInfo &p : rows)
        if (p.cliName == pass)
          p.options.push_back(opt);
    };
    // Options name their pass by Id; map Ids to cli names through the rows.
    std::vector<std::pair<std::string_view, std::string_view>> ids = {
#define PASS(Id, CliName, Summary, Description, Before, After) {#Id, CliName},
#include "transforms/Passes.def"
    };
    auto cliOf = [&](std::string_view id) {
      for (auto &[i, c] : ids)
        if (i == id)
          return c;
      return std::string_view();
    };
#define PASS_OPTION(Id, Name, Kind, Default, Help)                                                 \
  add(cliOf(#Id), PassOptionInfo{Name, PassOptionKind::Kind, Default, Help});
#include "transforms/Passes.def"
    auto example = [&](std::string_view pass, std::string_view options) {
      for (PassInfo &p : rows)
        if (p.cliName == pass)
          p.exampleOptions = options;
    };
#define PASS_EXAMPLE_OPTIONS(Id, Options) example(cliOf(#Id), Options);
#include "transforms/Passes.def"
    return rows;
  }();
  return registry;
}

std::string FixUse::pipelineElement() const {
  return options.empty() ? std::string(cliName)
                         : std::string(cliName) + "{" + std::string(options) + "}";
}

const std::vector<FixUse> &fixUses() {
  static const std::vector<FixUse> rows = [] {
    std::vector<std::pair<std::string_view, std::string_view>> ids = {
#define PASS(Id, CliName, Summary, Description, Before, After) {#Id, CliName},
#include "transforms/Passes.def"
    };
    auto split = [](std::string_view list) {
      std::vector<std::string_view> out;
      while (!list.empty()) {
        size_t comma = list.find(',');
        out.push_back(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
      return out;
    };
    std::vector<FixUse> out;
    auto add = [&](std::string_view id, std::string_view options, std::string_view removes) {
      for (auto &[i, cli] : ids)
        if (i == id)
          out.push_back(FixUse{cli, options, split(removes), {}, {}});
    };
#define PASS_FIX(Id, Options, Removes) add(#Id, Options, Removes);
#include "transforms/Passes.def"
    auto asked = [&](std::string_view id, std::string_view fixOption, std::string_view option) {
      for (auto &[i, cli] : ids)
        if (i == id)
          for (FixUse &u : out)
            if (u.cliName == cli) {
              u.askedBy = fixOption;
              u.askedOption = option;
            }
    };
#define PASS_ASKED(Id, FixOption, PassOption) asked(#Id, FixOption, PassOption);
#include "transforms/Passes.def"
    // Table order of the passes, whatever the order of the PASS_FIX rows.
    std::vector<FixUse> ordered;
    for (auto &[i, cli] : ids)
      for (const FixUse &u : out)
        if (u.cliName == cli)
          ordered.push_back(u);
    return ordered;
  }();
  return rows;
}

std::vector<std::string_view> passesRemoving(std::string_view ruleId) {
  std::vector<std::string_view> out;
  for (const FixUse &u : fixUses())
    if (std::find(u.removes.begin(), u.removes.end(), ruleId) != u.removes.end())
      out.push_back(u.cliName);
  return out;
}

std::string fixHint(const ane::RuleInfo &rule) {
  std::string passes, asked;
  for (const FixUse &u : fixUses())
    if (std::find(u.removes.begin(), u.removes.end(), rule.code) != u.removes.end()) {
      passes += (passes.empty() ? "" : ",") + std::string(u.cliName);
      if (!u.askedBy.empty())
        asked += " --" + std::string(u.askedBy) + " ...";
    }
  std::string fix(rule.fix);
  if (passes.empty())
    return fix;
  // fix picks passes for blocking findings and wrong-numerics ones of a
  // cause Apple documents by default, for fallback and slow ones under
  // --goal ane, for the others only as --passes; a pass that changes values
  // only when asked.
  bool numerics = rule.effect == ane::Effect::WrongNumerics &&
                  rule.confidence == ane::Confidence::AppleDocumented;
  if ((rule.effect >= ane::Effect::CompileFail || numerics) && asked.empty())
    return fix + " (`anefit fix` runs " + passes + ")";
  if (rule.effect == ane::Effect::Fallback || rule.effect == ane::Effect::Slow || !asked.empty())
    return fix + " (`anefit fix --goal ane" + asked + "` runs " + passes + ")";
  return fix + " (`anefit fix --passes " + passes + "`)";
}

std::string pipelineRemoving(const std::vector<std::string> &ruleIds) {
  std::string pipeline;
  bool picked = false;
  for (const FixUse &u : fixUses()) {
    bool use = u.isCleanup()
                   ? picked
                   : std::any_of(ruleIds.begin(), ruleIds.end(), [&](const std::string &r) {
                       return std::find(u.removes.begin(), u.removes.end(), r) != u.removes.end();
                     });
    if (!use)
      continue;
    picked = picked || !u.isCleanup();
    pipeline += (pipeline.empty() ? "" : ",") + u.pipelineElement();
  }
  return pipeline;
}

const PassInfo *findPass(std::string_view cliName) {
  for (const PassInfo &p : passRegistry())
    if (p.cliName == cliName)
      return &p;
  return nullptr;
}

PassOptions::PassOptions(const PassInfo &info, std::map<std::string, std::string> given)
    : info_(&info) {
  for (const PassOptionInfo &o : info.options)
    values_[std::string(o.name)] = std::string(o.defaultValue);
  for (auto &[key, value] : given) {
    const PassOptionInfo *opt = nullptr;
    for (const PassOptionInfo &o : info.options)
      if (o.name == key)
        opt = &o;
    if (!opt) {
      std::string known;
      for (const PassOptionInfo &o : info.options)
        known += (known.empty() ? "" : ", ") + std::string(o.name);
      throw InputError::at("pipeline", std::string(info.cliName),
                           "unknown option '" + key +
                               "'; options: " + (known.empty() ? "none" : known));
    }
    if (opt->kind == PassOptionKind::Flag && value != "true" && value != "false")
      failExpected("pipeline", std::string(info.cliName) + "{" + key + "}", "true or false",
                   "'" + value + "'");
    if (opt->kind == PassOptionKind::Int) {
      bool ok = !value.empty() && value.size() < 10 && value != "-";
      for (size_t i = 0; i < value.size(); ++i)
        ok = ok &&
             (std::isdigit(static_cast<unsigned char>(value[i])) || (i == 0 && value[i] == '-'));
      if (!ok)
        failExpected("pipeline", std::string(info.cliName) + "{" + key + "}", "an integer",
                     "'" + value + "'");
    }
    values_[key] = value;
    given_[key] = true;
  }
}

const std::string &PassOptions::raw(std::string_view name) const {
  static const std::string kEmpty;
  auto it = values_.find(std::string(name));
  return it == values_.end() ? kEmpty : it->second;
}

bool PassOptions::flag(std::string_view name) const { return raw(name) == "true"; }
std::string PassOptions::string(std::string_view name) const { return raw(name); }
int64_t PassOptions::integer(std::string_view name) const {
  const std::string &s = raw(name);
  return s.empty() ? 0 : std::stoll(s);
}
bool PassOptions::given(std::string_view name) const {
  return given_.count(std::string(name)) != 0;
}
std::vector<std::string> PassOptions::list(std::string_view name) const {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(raw(name));
  while (std::getline(in, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

std::unique_ptr<Pass> createPass(std::string_view cliName,
                                 const std::map<std::string, std::string> &options,
                                 const PassContext &context) {
  const PassInfo *info = findPass(cliName);
  if (!info)
    throw InputError::at(
        "pipeline", "", "unknown pass '" + std::string(cliName) + "'; passes: " + knownPassNames());
  PassOptions opts(*info, options);
  opts.setContext(context);
  for (const FactoryRow &row : kFactories)
    if (row.cliName == cliName)
      return row.factory(opts);
  throw InputError("pass '" + std::string(cliName) + "' has no implementation");
}

std::vector<PipelineElement> parsePipeline(std::string_view text) {
  std::vector<PipelineElement> out;
  size_t i = 0, n = text.size();
  auto fail = [&](const std::string &expected, size_t at) {
    std::string found = at < n ? "'" + std::string(1, text[at]) + "'" : "end of text";
    failExpected("pipeline", "column " + std::to_string(at + 1), expected, found);
  };
  auto skipSpace = [&] {
    while (i < n && std::isspace(static_cast<unsigned char>(text[i])))
      ++i;
  };
  auto isNameChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  };
  skipSpace();
  if (i == n)
    return out;
  while (true) {
    skipSpace();
    PipelineElement el;
    size_t start = i;
    while (i < n && isNameChar(text[i]))
      ++i;
    if (i == start)
      fail("a pass name", i);
    el.name = std::string(text.substr(start, i - start));
    skipSpace();
    if (i < n && text[i] == '{') {
      ++i;
      while (true) {
        skipSpace();
        if (i < n && text[i] == '}') {
          ++i;
          break;
        }
        size_t ks = i;
        while (i < n && isNameChar(text[i]))
          ++i;
        if (i == ks)
          fail("an option name or '}'", i);
        std::string key(text.substr(ks, i - ks));
        std::string value = "true";
        if (i < n && text[i] == '=') {
          ++i;
          size_t vs = i;
          while (i < n && !std::isspace(static_cast<unsigned char>(text[i])) && text[i] != '}')
            ++i;
          value = std::string(text.substr(vs, i - vs));
        }
        el.options[key] = value;
      }
    }
    out.push_back(std::move(el));
    skipSpace();
    if (i == n)
      break;
    if (text[i] != ',')
      fail("',' or end of pipeline", i);
    ++i;
  }
  return out;
}

void PassManager::addPipeline(std::string_view text, const PassContext &context) {
  for (PipelineElement &el : parsePipeline(text))
    passes_.push_back(createPass(el.name, el.options, context));
}

namespace {

/// Puts `name` back on output `index` of `fn` after a pass replaced the
/// value there: renames the new value when nothing else depends on its
/// name, else routes it through an identity that carries the name.
void restoreOutputName(Function &fn, size_t index, const std::string &name) {
  Block &body = *fn.body;
  Value *v = body.outputs[index];
  if (v->name == name)
    return;
  NameTable names(fn);
  // A value still alive under the old name would clash: give it a fresh one.
  walk(body, [&](Operation &op) {
    for (auto &out : op.outputs)
      if (out->name == name && out.get() != v)
        out->name = names.unique(name + "_prev");
  });
  bool usedElsewhere = std::count(body.outputs.begin(), body.outputs.end(), v) > 1;
  bool renamable = v->definingOp && v->definingOp->type != "const" && !usedElsewhere;
  if (renamable) {
    v->name = name;
    return;
  }
  auto op =
      std::make_unique<Operation>("identity", names.contains(name) ? names.unique(name) : name);
  op->setInput("x", Binding::of(v));
  Value *out = op->addOutput(name, v->type);
  body.append(std::move(op));
  body.outputs[index] = out;
}

} // namespace

PassResult PassManager::run(Model &model) {
  PassResult result;
  if (!model.program)
    throw InputError::at(model.sourcePath, "", "expected an ML Program, found none");
  for (auto &pass : passes_) {
    std::vector<std::vector<std::string>> names;
    for (auto &fn : model.program->functions) {
      names.emplace_back();
      for (Value *v : fn->body->outputs)
        names.back().push_back(v ? v->name : "");
    }
    pass->run(model, result);
    for (size_t f = 0; f < model.program->functions.size() && f < names.size(); ++f) {
      Function &fn = *model.program->functions[f];
      for (size_t k = 0; k < names[f].size() && k < fn.body->outputs.size(); ++k)
        if (fn.body->outputs[k])
          restoreOutputName(fn, k, names[f][k]);
    }
  }
  return result;
}

std::string passHelpText() {
  std::ostringstream os;
  for (const PassInfo &p : passRegistry()) {
    os << "  " << p.cliName << ": " << p.summary << "\n";
    for (const PassOptionInfo &o : p.options) {
      os << "      " << o.name << " (" << kindName(o.kind);
      if (!o.defaultValue.empty())
        os << ", default " << o.defaultValue;
      os << "): " << o.help << "\n";
    }
  }
  return os.str();
}

PassExampleRun runPassExample(const PassInfo &info) {
  auto print = [](const Model &m) {
    PrintOptions literals;
    literals.printConsts = false;
    std::ostringstream os;
    printProgram(*m.program, os, literals);
    return os.str();
  };
  std::string name(info.cliName);
  std::unique_ptr<Model> before = parseModelText(info.before, name + " (before)", nullptr);
  std::unique_ptr<Model> after = parseModelText(info.after, name + " (after)", nullptr);
  PassManager pm;
  pm.addPipeline(info.exampleOptions.empty()
                     ? std::string(info.cliName)
                     : std::string(info.cliName) + "{" + std::string(info.exampleOptions) + "}");
  pm.run(*before);
  return {print(*before), print(*after)};
}

std::string passesMarkdown() {
  std::ostringstream os;
  os << "# Passes\n\n"
     << "<!-- Generated from src/transforms/Passes.def by `anefit-opt --list-passes`; do not\n"
     << "     edit. Regenerate with scripts/generated_docs.sh -->\n\n"
     << "Passes rewrite a model. Without `--passes`, `anefit fix` checks the model and runs "
     << "only the passes that remove one of its blocking findings (compile-fail or "
     << "runtime-fail, confirmed or at-risk), with the options below, in table order, then "
     << "the clean-up passes; a model with no such finding is left as it is. With `--goal "
     << "ane` it also runs the passes that remove findings that keep ops off the ANE "
     << "(fallback, slow), and prints the predicted residency (share of ops and FLOPs on "
     << "the ANE, boundaries) before and after each pass. A pass that changes values or "
     << "size runs only when asked (`requantize`: `--requantize " << requantizeFormNames("|", "|")
     << "`); a "
     << "lossy rewrite is verified by its measured error instead of equal outputs. `--passes` "
     << "names the pipeline instead, and `anefit-opt --passes` runs any pipeline on MIL "
     << "text. A pipeline is a comma-separated list of pass names, each optionally followed "
     << "by options in braces separated by spaces: `state-to-io{keep-largest "
     << "output-suffix=_next},canonicalize,dce`. A bare option name sets a flag; list values "
     << "are comma-separated (`states=conv_*,kv`). Passes never rename existing function "
     << "outputs.\n\n"
     << "| pass | summary | `anefit fix` runs it for | with |\n| --- | --- | --- | --- |\n";
  for (const PassInfo &p : passRegistry()) {
    std::string rules = "-", with = "-";
    for (const FixUse &u : fixUses())
      if (u.cliName == p.cliName) {
        rules.clear();
        for (std::string_view r : u.removes)
          rules += (rules.empty() ? "" : ", ") + std::string(r);
        if (rules.empty())
          rules = "clean-up after any pass it picked";
        with = u.options.empty() ? "-" : "`" + std::string(u.options) + "`";
        if (!u.askedBy.empty())
          with = "only with `--" + std::string(u.askedBy) + " VALUE` (`" +
                 std::string(u.askedOption) + "=VALUE`)";
      }
    os << "| [`" << p.cliName << "`](#" << p.cliName << ") | " << p.summary << " | " << rules
       << " | " << with << " |\n";
  }
  for (const PassInfo &p : passRegistry()) {
    os << "\n## " << p.cliName << "\n\n" << p.summary << ".\n\n" << p.description << "\n";
    if (!p.options.empty()) {
      os << "\n| option | kind | default | meaning |\n| --- | --- | --- | --- |\n";
      for (const PassOptionInfo &o : p.options)
        os << "| `" << o.name << "` | " << kindName(o.kind) << " | "
           << (o.defaultValue.empty() ? std::string("(none)")
                                      : "`" + std::string(o.defaultValue) + "`")
           << " | " << o.help << " |\n";
    }
    os << "\nBefore"
       << (p.exampleOptions.empty() ? std::string()
                                    : " (run with `" + std::string(p.exampleOptions) + "`)")
       << ":\n\n```\n"
       << p.before << "\n```\n\nAfter:\n\n```\n"
       << p.after << "\n```\n";
  }
  return os.str();
}

} // namespace anefit
