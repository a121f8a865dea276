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

/// What the SAX readers below share: a stack of frames, one per object or
/// array being parsed, each with its role (where it sits; `Role::Other` for
/// what is skipped) and, for the other roles, its current key; the value
/// kinds neither reader keeps are skipped, and a parse error stops parsing.
template <class Role> class FramedSax : public nlohmann::json_sax<json> {
public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool key(string_t &k) override {
    Frame &f = frames_.back();
    if (f.role != Role::Other)
      f.key = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &) override {
    return false;
  }

protected:
  struct Frame {
    Role role;
    std::string key; ///< the current key (kept for the roles other than Other)
  };
  std::vector<Frame> frames_;
};

/// Where a value of delegate_map sits: the document, the method's map, an
/// instruction's entry, its delegate map, an op's handles, or anything else
/// (skipped).
enum class DelegateMapRole { Top, Method, Entry, Map, Handles, Other };

/// Reads delegate_map's {method: {instruction: {"delegate_map": {"op:n":
/// [handles]}}}} as it is parsed, building only the maps of `method`: no
/// document is built (a map of a million empty objects costs nothing).
class DelegateMapReader : public FramedSax<DelegateMapRole> {
  using Role = DelegateMapRole;

public:
  DelegateMapReader(const std::string &method,
                    std::vector<std::map<std::string, std::vector<int64_t>>> &maps)
      : method_(method), maps_(maps) {}
  bool topIsObject() const { return topIsObject_; }

  bool number_integer(number_integer_t v) override { return handle(v); }
  bool number_unsigned(number_unsigned_t v) override { return handle(static_cast<int64_t>(v)); }
  bool string(string_t &) override { return true; }
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

private:
  bool handle(int64_t v) {
    if (!frames_.empty() && frames_.back().role == Role::Handles)
      handles_.push_back(v);
    return true;
  }
  const std::string &method_;
  std::vector<std::map<std::string, std::vector<int64_t>>> &maps_;
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

/// Where a value of the edge program sits; Other values are skipped.
enum class EdgeProgramRole {
  Top,
  Program,
  Graph,
  Nodes,
  Node,
  Metadata,
  Signature,
  InputSpecs,
  InputSpec,
  Buffer,
  BufferArg,
  OutputSpecs,
  OutputSpec,
  Mutation,
  MutationArg,
  Other
};

/// Reads the edge program as it is parsed, keeping only what a source
/// line needs: each node's name, target and metadata.{debug_handle,
/// stack_trace, nn_module_stack}, and the signature's buffers
/// (input_specs[].buffer, output_specs[].buffer_mutation). Every other
/// value (the nodes' inputs and outputs, most of the text) is skipped; no
/// document is built.
class EdgeProgramReader : public FramedSax<EdgeProgramRole> {
  using Role = EdgeProgramRole;

public:
  explicit EdgeProgramReader(ETRecord &rec) : rec_(rec) {}
  bool sawProgram() const { return sawProgram_; }
  bool sawNodes() const { return sawNodes_; }

  bool number_integer(number_integer_t v) override { return integer(v); }
  bool number_unsigned(number_unsigned_t v) override { return integer(static_cast<int64_t>(v)); }
  bool string(string_t &v) override {
    if (frames_.empty())
      return true;
    const Frame &f = frames_.back();
    switch (f.role) {
    case Role::Node:
      if (f.key == "name")
        node_.name = v;
      else if (f.key == "target")
        node_.target = v;
      break;
    case Role::Metadata:
      if (f.key == "debug_handle")
        node_.handle = v;
      else if (f.key == "stack_trace")
        node_.stack = v;
      else if (f.key == "nn_module_stack")
        node_.modules = v;
      break;
    case Role::BufferArg:
    case Role::MutationArg:
      if (f.key == "name")
        spec_.arg = v;
      break;
    case Role::Buffer:
    case Role::Mutation:
      if (f.key == "buffer_name")
        spec_.buffer = v;
      break;
    default:
      break;
    }
    return true;
  }
  bool start_object(std::size_t) override {
    Role role = Role::Other;
    if (frames_.empty()) {
      role = Role::Top;
    } else {
      const Frame &p = frames_.back();
      switch (p.role) {
      case Role::Top:
        if (p.key == "graph_module") {
          role = Role::Program;
          sawProgram_ = true;
        }
        break;
      case Role::Program:
        role = p.key == "graph" ? Role::Graph : p.key == "signature" ? Role::Signature : role;
        break;
      case Role::Nodes:
        role = Role::Node;
        node_ = {};
        break;
      case Role::Node:
        if (p.key == "metadata") {
          role = Role::Metadata;
          node_.metadata = true;
        }
        break;
      case Role::InputSpecs:
      case Role::OutputSpecs:
        role = p.role == Role::InputSpecs ? Role::InputSpec : Role::OutputSpec;
        spec_ = {};
        break;
      case Role::InputSpec:
        if (p.key == "buffer") {
          role = Role::Buffer;
          spec_.present = true;
        }
        break;
      case Role::OutputSpec:
        if (p.key == "buffer_mutation") {
          role = Role::Mutation;
          spec_.present = true;
        }
        break;
      case Role::Buffer:
      case Role::Mutation:
        if (p.key == "arg")
          role = p.role == Role::Buffer ? Role::BufferArg : Role::MutationArg;
        break;
      default:
        break;
      }
    }
    frames_.push_back({role, {}});
    return true;
  }
  bool end_object() override {
    Role role = frames_.back().role;
    frames_.pop_back();
    if (role == Role::Node && node_.metadata)
      addNode();
    else if (role == Role::InputSpec && spec_.present && !spec_.arg.empty())
      rec_.buffers[spec_.arg] = spec_.buffer;
    else if (role == Role::OutputSpec && spec_.present)
      rec_.mutations[spec_.buffer] = spec_.arg;
    return true;
  }
  bool start_array(std::size_t) override {
    Role role = Role::Other;
    if (!frames_.empty()) {
      const Frame &p = frames_.back();
      if (p.role == Role::Graph && p.key == "nodes") {
        role = Role::Nodes;
        sawNodes_ = true;
      } else if (p.role == Role::Signature && p.key == "input_specs") {
        role = Role::InputSpecs;
      } else if (p.role == Role::Signature && p.key == "output_specs") {
        role = Role::OutputSpecs;
      }
    }
    frames_.push_back({role, {}});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }

private:
  /// The fields of the node being read.
  struct NodeFields {
    bool metadata = false;
    std::string name, target, handle, stack, modules;
  };
  /// The buffer (input spec) or buffer mutation (output spec) being read.
  struct SpecFields {
    bool present = false;
    std::string arg, buffer;
  };

  bool integer(int64_t v) {
    if (!frames_.empty() && frames_.back().role == Role::Metadata &&
        frames_.back().key == "debug_handle")
      node_.handle = std::to_string(v);
    return true;
  }

  /// A node with a debug handle (a decimal integer, as text or a number).
  void addNode() {
    char *end = nullptr;
    const std::string &handle = node_.handle;
    int64_t h = handle.empty() ? 0 : std::strtoll(handle.c_str(), &end, 10);
    if (handle.empty() || !end || *end != '\0')
      return;
    EdgeNode node;
    node.name = std::move(node_.name);
    node.target = std::move(node_.target);
    node.debugHandle = h;
    node.stack = parseStack(node_.stack);
    // "key,path,type;key,path,type": the innermost module is the last entry.
    const std::string &stack = node_.modules;
    if (!stack.empty()) {
      std::string last =
          stack.substr(stack.rfind(';') == std::string::npos ? 0 : stack.rfind(';') + 1);
      size_t a = last.find(','), b = last.rfind(',');
      if (a != std::string::npos && b != std::string::npos && b > a) {
        node.modulePath = last.substr(a + 1, b - a - 1);
        node.moduleType = last.substr(b + 1);
      }
    }
    rec_.byHandle[h].push_back(rec_.nodes.size());
    rec_.nodes.push_back(std::move(node));
  }

  ETRecord &rec_;
  NodeFields node_;
  SpecFields spec_;
  bool sawProgram_ = false, sawNodes_ = false;
};

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
  checkJsonDepth(text, path, where);
  EdgeProgramReader reader(rec);
  bool parsed = json::sax_parse(text, &reader);
  text = std::string();
  if (!parsed || !reader.sawProgram())
    failExpected(path, where, "a torch.export program (JSON with graph_module)",
                 !parsed ? "malformed JSON" : "another JSON document");
  if (!reader.sawNodes())
    failExpected(path, where + ": graph_module.graph.nodes", "an array", "none");
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
