//===- ETRecord.cpp - Source lines behind an ExecuTorch program -----------===//
#include "io/ETRecord.h"

#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"
#include "support/Zip.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

namespace anefit {
namespace {

using json = nlohmann::json;

/// Program JSON members are a few MB; more is not an ETRecord we read.
constexpr uint64_t kMaxProgramJson = uint64_t(512) << 20;

/// The JSON members read may inflate to at most this many times the
/// archive's bytes, all together: a real ETRecord's edge program is 3.5
/// times its archive (5.3 MB in 1.5 MB), a zip bomb's a thousand times.
constexpr uint64_t kMaxInflation = 32;

/// The parts of the edge program read (graph_module.graph.nodes[].{name,
/// target, metadata.{debug_handle, stack_trace, nn_module_stack}}, the
/// signature's buffers), as key paths; "[]" is an array's element. Every
/// other value (the nodes' inputs and outputs, most of the text) is skipped
/// as it is parsed, never built.
const std::vector<std::vector<std::string_view>> &keptPaths() {
  static const std::vector<std::vector<std::string_view>> paths = {
      {"graph_module", "graph", "nodes", "[]", "name"},
      {"graph_module", "graph", "nodes", "[]", "target"},
      {"graph_module", "graph", "nodes", "[]", "metadata", "debug_handle"},
      {"graph_module", "graph", "nodes", "[]", "metadata", "stack_trace"},
      {"graph_module", "graph", "nodes", "[]", "metadata", "nn_module_stack"},
      {"graph_module", "signature", "input_specs", "[]", "buffer", "arg", "name"},
      {"graph_module", "signature", "input_specs", "[]", "buffer", "buffer_name"},
      {"graph_module", "signature", "output_specs", "[]", "buffer_mutation", "arg", "name"},
      {"graph_module", "signature", "output_specs", "[]", "buffer_mutation", "buffer_name"},
  };
  return paths;
}

/// Parses the edge program keeping only keptPaths(). Nesting is bounded
/// first (support/Json.h).
json parseEdgeProgram(std::string_view text, const std::string &path, const std::string &where) {
  checkJsonDepth(text, path, where);
  checkJsonFits(text, path, where);
  // keys[d - 1]: the key (or "[]") of the values at depth d.
  std::vector<std::string> keys;
  auto kept = [&](size_t depth) {
    for (const auto &p : keptPaths()) {
      size_t n = std::min(depth, p.size());
      bool same = true;
      for (size_t i = 0; i < n && same; ++i)
        same = keys[i] == p[i];
      if (same)
        return true; // on the way to a kept value, or inside one
    }
    return false;
  };
  json::parser_callback_t keep = [&](int depth, json::parse_event_t event, json &parsed) {
    size_t d = static_cast<size_t>(depth);
    if (event == json::parse_event_t::key) {
      keys.resize(d);
      keys[d - 1] = parsed.get<std::string>();
      return kept(d);
    }
    if (event == json::parse_event_t::array_start) {
      keys.resize(d + 1);
      keys[d] = "[]";
    }
    return true;
  };
  return json::parse(text.begin(), text.end(), keep, /*allow_exceptions=*/false);
}

/// Reads delegate_map's {method: {instruction: {"delegate_map": {"op:n":
/// [handles]}}}} as it is parsed, building only the maps of `method`: no
/// document is built (a map of a million empty objects costs nothing).
class DelegateMapReader : public nlohmann::json_sax<json> {
public:
  DelegateMapReader(const std::string &method,
                    std::vector<std::map<std::string, std::vector<int64_t>>> &maps)
      : method_(method), maps_(maps) {}
  bool topIsObject() const { return topIsObject_; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override { return handle(v); }
  bool number_unsigned(number_unsigned_t v) override { return handle(static_cast<int64_t>(v)); }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool string(string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool key(string_t &k) override {
    Frame &f = frames_.back();
    if (f.role != Role::Other)
      f.key = k;
    return true;
  }
  bool start_object(std::size_t) override {
    Role role = Role::Other;
    if (frames_.empty()) {
      role = Role::Top;
      topIsObject_ = true;
    } else {
      const Frame &p = frames_.back();
      if (p.role == Role::Top && p.key == method_)
        role = Role::Method;
      else if (p.role == Role::Method)
        role = Role::Entry;
      else if (p.role == Role::Entry && p.key == "delegate_map") {
        role = Role::Map;
        map_.clear();
      }
    }
    frames_.push_back({role, {}});
    return true;
  }
  bool end_object() override {
    if (frames_.back().role == Role::Map)
      maps_.push_back(std::move(map_));
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    Role role = !frames_.empty() && frames_.back().role == Role::Map ? Role::Handles : Role::Other;
    frames_.push_back({role, {}});
    if (role == Role::Handles)
      handles_.clear();
    return true;
  }
  bool end_array() override {
    Role role = frames_.back().role;
    frames_.pop_back();
    if (role == Role::Handles) {
      const std::string &op = frames_.back().key;
      map_[op.substr(0, op.rfind(':'))] = std::move(handles_);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &) override {
    return false;
  }

private:
  /// What a value is: the document, the method's map, an instruction's
  /// entry, its delegate map, an op's handles, or anything else (skipped).
  enum class Role { Top, Method, Entry, Map, Handles, Other };
  struct Frame {
    Role role;
    std::string key; ///< the current key (kept for the roles above only)
  };
  bool handle(int64_t v) {
    if (!frames_.empty() && frames_.back().role == Role::Handles)
      handles_.push_back(v);
    return true;
  }
  const std::string &method_;
  std::vector<std::map<std::string, std::vector<int64_t>>> &maps_;
  std::vector<Frame> frames_;
  std::map<std::string, std::vector<int64_t>> map_;
  std::vector<int64_t> handles_;
  bool topIsObject_ = false;
};

/// Python traceback text -> frames, outermost first.
std::vector<SourceFrame> parseStack(const std::string &text) {
  std::vector<SourceFrame> frames;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t f = line.find("File \"");
    if (f == std::string::npos) {
      // The first line after a frame header is its source line.
      if (!frames.empty() && frames.back().code.empty()) {
        size_t a = line.find_first_not_of(" \t");
        if (a != std::string::npos && line.find_first_not_of("^~ \t") != std::string::npos)
          frames.back().code = line.substr(a);
      }
      continue;
    }
    SourceFrame frame;
    size_t q = line.find('"', f + 6);
    if (q == std::string::npos)
      continue;
    frame.file = line.substr(f + 6, q - f - 6);
    size_t l = line.find(", line ", q);
    if (l != std::string::npos)
      frame.line = std::strtoll(line.c_str() + l + 7, nullptr, 10);
    size_t fn = line.find(", in ", q);
    if (fn != std::string::npos)
      frame.function = line.substr(fn + 5);
    frames.push_back(std::move(frame));
  }
  return frames;
}

/// True for a frame of PyTorch itself (torch/, torch/_dynamo, ...).
bool inTorch(const std::string &file) {
  return file.find("/torch/") != std::string::npos || file.rfind("torch/", 0) == 0 ||
         file.find("<eval_with_key>") != std::string::npos;
}

std::string strField(const json &j, const char *key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

} // namespace

SourceOrigin ETRecord::originOf(const std::vector<int64_t> &handles) const {
  SourceOrigin first;
  for (int64_t h : handles) {
    auto it = byHandle.find(h);
    if (it == byHandle.end())
      continue;
    for (size_t i : it->second) {
      const EdgeNode &n = nodes[i];
      if (!first.node)
        first.node = &n;
      for (size_t k = n.stack.size(); k-- > 0;)
        if (!inTorch(n.stack[k].file))
          return {&n, &n.stack[k]};
    }
  }
  return first;
}

std::optional<std::string> ETRecord::bufferPath(const std::string &name) const {
  std::string n = name;
  for (;;) {
    if (auto it = buffers.find(n); it != buffers.end())
      return it->second;
    size_t cut = n.rfind("_to_");
    if (cut == std::string::npos)
      return std::nullopt;
    n.resize(cut);
  }
}

ETRecord readETRecord(const std::string &path, const std::string &method) {
  std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  return parseETRecord(file->bytes(), path, method);
}

ETRecord parseETRecord(std::span<const uint8_t> bytes, const std::string &path,
                       const std::string &method) {
  std::vector<ZipMember> members = zipMembers(bytes, path, "an ETRecord (a zip archive)");
  auto find = [&](const std::string &name) -> const ZipMember * {
    for (const ZipMember &m : members)
      if (m.name == name || m.name.ends_with("/" + name))
        return &m;
    return nullptr;
  };
  bool versioned = false;
  for (const ZipMember &m : members)
    if (m.name.starts_with("ETRECORD_V") || m.name.find("/ETRECORD_V") != std::string::npos) {
      std::string version = m.name.substr(m.name.rfind("ETRECORD_V"));
      if (version != "ETRECORD_V0")
        throw InputError::at(path, m.name,
                             "expected ETRecord version ETRECORD_V0, found " + version);
      versioned = true;
    }
  if (!versioned)
    throw InputError::at(path, "", "expected an ETRecord (an ETRECORD_V0 member), found none");
  const ZipMember *program = find("edge_dialect_exported_program/" + method);
  if (!program)
    program = find("edge_dialect_exported_program");
  if (!program)
    throw InputError::at(path, "edge_dialect_exported_program/" + method,
                         "expected the edge program of method '" + method + "', found none");

  ETRecord rec;
  rec.path = path;
  rec.method = method;
  // Each member read takes from one budget, a multiple of the archive.
  uint64_t budget = std::min<uint64_t>(kMaxProgramJson, kMaxInflation * bytes.size());
  auto readJson = [&](const ZipMember &m) {
    std::string text = readZipMember(m, path, budget);
    budget -= text.size();
    return text;
  };
  std::string text = readJson(*program);
  std::string where = program->name;
  json j = parseEdgeProgram(text, path, where);
  text = std::string();
  if (j.is_discarded() || !j.is_object() || !j.contains("graph_module") ||
      !j["graph_module"].is_object())
    failExpected(path, where, "a torch.export program (JSON with graph_module)",
                 j.is_discarded() ? "malformed JSON" : "another JSON document");
  const json &gm = j["graph_module"];
  if (!gm.contains("graph") || !gm["graph"].is_object() || !gm["graph"].contains("nodes") ||
      !gm["graph"]["nodes"].is_array())
    failExpected(path, where + ": graph_module.graph.nodes", "an array", "none");
  for (const json &n : gm["graph"]["nodes"]) {
    if (!n.is_object() || !n.contains("metadata") || !n["metadata"].is_object())
      continue;
    const json &md = n["metadata"];
    std::string handle = strField(md, "debug_handle");
    if (handle.empty() && md.contains("debug_handle") && md["debug_handle"].is_number_integer())
      handle = std::to_string(md["debug_handle"].get<int64_t>());
    char *end = nullptr;
    int64_t h = handle.empty() ? 0 : std::strtoll(handle.c_str(), &end, 10);
    if (handle.empty() || !end || *end != '\0')
      continue;
    EdgeNode node;
    node.name = strField(n, "name");
    node.target = strField(n, "target");
    node.debugHandle = h;
    node.stack = parseStack(strField(md, "stack_trace"));
    // "key,path,type;key,path,type": the innermost module is the last entry.
    std::string stack = strField(md, "nn_module_stack");
    if (!stack.empty()) {
      std::string last =
          stack.substr(stack.rfind(';') == std::string::npos ? 0 : stack.rfind(';') + 1);
      size_t a = last.find(','), b = last.rfind(',');
      if (a != std::string::npos && b != std::string::npos && b > a) {
        node.modulePath = last.substr(a + 1, b - a - 1);
        node.moduleType = last.substr(b + 1);
      }
    }
    rec.byHandle[h].push_back(rec.nodes.size());
    rec.nodes.push_back(std::move(node));
  }
  if (gm.contains("signature") && gm["signature"].is_object()) {
    const json &sig = gm["signature"];
    if (sig.contains("input_specs") && sig["input_specs"].is_array())
      for (const json &s : sig["input_specs"])
        if (s.is_object() && s.contains("buffer") && s["buffer"].is_object()) {
          const json &b = s["buffer"];
          std::string arg = b.contains("arg") && b["arg"].is_object() ? strField(b["arg"], "name")
                                                                      : std::string();
          if (!arg.empty())
            rec.buffers[arg] = strField(b, "buffer_name");
        }
    if (sig.contains("output_specs") && sig["output_specs"].is_array())
      for (const json &s : sig["output_specs"])
        if (s.is_object() && s.contains("buffer_mutation") && s["buffer_mutation"].is_object()) {
          const json &b = s["buffer_mutation"];
          std::string arg = b.contains("arg") && b["arg"].is_object() ? strField(b["arg"], "name")
                                                                      : std::string();
          rec.mutations[strField(b, "buffer_name")] = arg;
        }
  }
  if (const ZipMember *dm = find("delegate_map")) {
    std::string text = readJson(*dm);
    checkJsonDepth(text, path, dm->name);
    DelegateMapReader reader(method, rec.delegateMaps);
    if (!json::sax_parse(text, &reader))
      failExpected(path, "delegate_map", "a JSON object", "malformed JSON");
    if (!reader.topIsObject())
      failExpected(path, "delegate_map", "a JSON object", "another JSON value");
  }
  return rec;
}

std::pair<size_t, size_t>
delegateMapAgreement(const ETRecord &record,
                     const std::map<std::string, std::vector<int64_t>> &opHandles) {
  size_t best = 0;
  for (const auto &map : record.delegateMaps) {
    size_t agree = 0;
    for (const auto &[op, handles] : opHandles) {
      auto it = map.find(op);
      agree += it != map.end() && it->second == handles;
    }
    best = std::max(best, agree);
  }
  return {best, opHandles.size()};
}

std::string relativeSource(const std::string &file, const std::string &root) {
  if (!root.empty()) {
    std::string r = root;
    while (r.size() > 1 && r.back() == '/')
      r.pop_back();
    if (file.starts_with(r + "/"))
      return file.substr(r.size() + 1);
    std::string name = r.substr(r.rfind('/') == std::string::npos ? 0 : r.rfind('/') + 1);
    size_t at = file.rfind("/" + name + "/");
    if (!name.empty() && at != std::string::npos)
      return file.substr(at + name.size() + 2);
  }
  size_t sp = file.rfind("site-packages/");
  return sp == std::string::npos ? file : file.substr(sp + 14);
}

} // namespace anefit
