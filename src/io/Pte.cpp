//===- Pte.cpp - ExecuTorch program files and their Core ML payloads ------===//
//
// A small flatbuffer walker of our own: every offset read from the file is
// checked against the buffer before it is followed, vectors are checked for
// length * element size before they are walked, and the table graph is only
// walked along the fields anefit needs, so a hostile file ends in an
// InputError naming the place.
//
//===----------------------------------------------------------------------===//
#include "io/Pte.h"

#include "support/Error.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <optional>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace anefit {
namespace {

// Flatbuffer field ids of program.fbs (formats.md §7.2).
namespace field {
constexpr int kProgramExecutionPlan = 1;
constexpr int kProgramBackendDelegateData = 3;
constexpr int kProgramSegments = 4;
constexpr int kProgramNamedData = 7;
constexpr int kPlanName = 0;
constexpr int kPlanValues = 2;
constexpr int kPlanInputs = 3;
constexpr int kPlanChains = 5;
constexpr int kPlanOperators = 6;
constexpr int kPlanDelegates = 7;
constexpr int kChainInstructions = 2;
constexpr int kInstructionArgsType = 0;
constexpr int kInstructionArgs = 1;
constexpr int kCallIndex = 0; ///< KernelCall.op_index, DelegateCall.delegate_index
constexpr int kCallArgs = 1;
constexpr int kMoveFrom = 0;
constexpr int kMoveTo = 1;
constexpr int kOperatorName = 0;
constexpr int kOperatorOverload = 1;
constexpr int kDelegateId = 0;
constexpr int kDelegateProcessed = 1;
constexpr int kDelegateCompileSpecs = 2;
constexpr int kDataRefLocation = 0;
constexpr int kDataRefIndex = 1;
constexpr int kCompileSpecKey = 0;
constexpr int kCompileSpecValue = 1;
constexpr int kInlineDataData = 0;
constexpr int kSegmentOffset = 0;
constexpr int kSegmentSize = 1;
constexpr int kNamedDataKey = 0;
constexpr int kNamedDataSegmentIndex = 1;
} // namespace field

// Instruction.instr_args union members.
constexpr uint8_t kKernelCall = 1;
constexpr uint8_t kDelegateCall = 2;
constexpr uint8_t kMoveCall = 3;
constexpr uint8_t kJumpFalseCall = 4;

constexpr uint8_t kLocationInline = 0;
constexpr uint8_t kLocationSegment = 1;
/// More entries than this in any vector we walk means a corrupt file.
constexpr uint32_t kMaxEntries = 1u << 20;
constexpr int kMaxTreeDepth = 64;

/// Bounds-checked reader over one flatbuffer.
class FlatbufferReader {
public:
  FlatbufferReader(std::span<const uint8_t> bytes, std::string file)
      : bytes_(bytes), file_(std::move(file)) {}

  struct Table {
    uint64_t pos = 0;
    uint64_t vtable = 0;
    uint16_t vtableSize = 0;
  };
  struct Vector {
    uint64_t first = 0; ///< position of element 0
    uint32_t count = 0;
  };

  template <typename T> T load(uint64_t pos, const std::string &what) const {
    if (pos > bytes_.size() || bytes_.size() - pos < sizeof(T))
      fail(what, "offset " + std::to_string(pos) + " past the end of the file (" +
                     std::to_string(bytes_.size()) + " bytes)");
    T v;
    std::memcpy(&v, bytes_.data() + pos, sizeof(T));
    return v;
  }

  Table table(uint64_t pos, const std::string &what) const {
    int32_t soffset = load<int32_t>(pos, what);
    int64_t vt = static_cast<int64_t>(pos) - soffset;
    if (vt < 0 || static_cast<uint64_t>(vt) >= bytes_.size())
      fail(what, "vtable offset out of range");
    Table t{pos, static_cast<uint64_t>(vt), load<uint16_t>(static_cast<uint64_t>(vt), what)};
    if (t.vtableSize < 4 || t.vtableSize % 2 != 0 || t.vtable + t.vtableSize > bytes_.size())
      fail(what, "corrupt vtable (size " + std::to_string(t.vtableSize) + ")");
    return t;
  }

  Table root() const { return table(load<uint32_t>(0, "root offset"), "program table"); }

  /// Position of field `id` of `t`, or 0 when the field is absent.
  uint64_t fieldPos(const Table &t, int id, const std::string &what) const {
    uint64_t slot = 4 + 2 * static_cast<uint64_t>(id);
    if (slot + 2 > t.vtableSize)
      return 0;
    uint16_t off = load<uint16_t>(t.vtable + slot, what);
    return off == 0 ? 0 : t.pos + off;
  }

  uint64_t follow(uint64_t pos, const std::string &what) const {
    uint64_t target = pos + load<uint32_t>(pos, what);
    if (target >= bytes_.size())
      fail(what, "reference past the end of the file");
    return target;
  }

  template <typename T> T scalar(const Table &t, int id, T dflt, const std::string &what) const {
    uint64_t p = fieldPos(t, id, what);
    return p ? load<T>(p, what) : dflt;
  }

  std::optional<Table> subTable(const Table &t, int id, const std::string &what) const {
    uint64_t p = fieldPos(t, id, what);
    if (!p)
      return std::nullopt;
    return table(follow(p, what), what);
  }

  std::string string(const Table &t, int id, const std::string &what) const {
    uint64_t p = fieldPos(t, id, what);
    if (!p)
      return "";
    uint64_t s = follow(p, what);
    uint32_t len = load<uint32_t>(s, what);
    if (len > bytes_.size() - s - 4)
      fail(what, "string length " + std::to_string(len) + " runs past the end of the file");
    return std::string(reinterpret_cast<const char *>(bytes_.data() + s + 4), len);
  }

  /// A vector of int32 as values.
  std::vector<int32_t> ints(const Table &t, int id, const std::string &what) const {
    Vector v = vector(t, id, 4, what);
    std::vector<int32_t> out(v.count);
    for (uint32_t i = 0; i < v.count; ++i)
      out[i] = load<int32_t>(v.first + 4ull * i, what);
    return out;
  }

  Vector vector(const Table &t, int id, uint32_t elementSize, const std::string &what) const {
    uint64_t p = fieldPos(t, id, what);
    if (!p)
      return {};
    uint64_t v = follow(p, what);
    uint32_t count = load<uint32_t>(v, what);
    if (count > kMaxEntries)
      fail(what, "expected at most " + std::to_string(kMaxEntries) + " entries, found " +
                     std::to_string(count));
    if (static_cast<uint64_t>(count) * elementSize > bytes_.size() - v - 4)
      fail(what, std::to_string(count) + " entries run past the end of the file");
    return Vector{v + 4, count};
  }

  /// Element i of a vector of tables.
  Table tableAt(const Vector &v, uint32_t i, const std::string &what) const {
    return table(follow(v.first + 4ull * i, what), what);
  }

  std::span<const uint8_t> bytesOf(const Vector &v) const {
    return bytes_.subspan(v.first, v.count);
  }

  [[noreturn]] void fail(const std::string &what, const std::string &message) const {
    throw InputError::at(file_, what, message);
  }

private:
  std::span<const uint8_t> bytes_;
  std::string file_;
};

std::string locationName(uint8_t location) {
  return location == kLocationInline ? "inline" : "segment";
}

} // namespace

std::string PteDelegate::label() const {
  return method + "/delegate " + std::to_string(indexInMethod) + " (" + backendId + ")";
}

std::shared_ptr<PteFile> PteFile::open(const std::string &path) {
  std::shared_ptr<PteFile> pte(new PteFile());
  pte->path_ = path;
  pte->mapping_ = MappedFile::open(path);
  pte->bytes_ = pte->mapping_->bytes();
  pte->parse();
  return pte;
}

std::shared_ptr<PteFile> PteFile::fromBytes(std::span<const uint8_t> bytes,
                                            const std::string &name) {
  std::shared_ptr<PteFile> pte(new PteFile());
  pte->path_ = name;
  pte->bytes_ = bytes;
  pte->parse();
  return pte;
}

PteFile::~PteFile() = default;

void PteFile::parse() {
  if (bytes_.size() < 8)
    throw InputError::at(path_, "header",
                         "expected at least 8 bytes, found " + std::to_string(bytes_.size()));
  identifier_.assign(reinterpret_cast<const char *>(bytes_.data() + 4), 4);
  bool digits = std::isdigit(static_cast<unsigned char>(identifier_[2])) &&
                std::isdigit(static_cast<unsigned char>(identifier_[3]));
  if (identifier_.substr(0, 2) != "ET" || !digits) {
    std::string shown;
    for (char c : identifier_)
      shown += std::isprint(static_cast<unsigned char>(c)) ? c : '.';
    throw InputError::at(path_, "bytes 4..7",
                         "expected the ExecuTorch identifier 'ET' + 2 digits, found '" + shown +
                             "'; is this an ExecuTorch .pte file?");
  }
  FlatbufferReader fb(bytes_, path_);

  // The extended header, present when the program has segments.
  bool hasExtendedHeader = false;
  if (bytes_.size() >= 16 && std::memcmp(bytes_.data() + 8, "eh00", 4) == 0) {
    hasExtendedHeader = true;
    uint32_t length = fb.load<uint32_t>(12, "extended header");
    if (length < 24)
      fb.fail("extended header",
              "expected a length of at least 24, found " + std::to_string(length));
    extHeaderLength_ = length;
    programSize_ = fb.load<uint64_t>(16, "extended header");
    segmentBase_ = fb.load<uint64_t>(24, "extended header");
    if (length >= 32)
      segmentDataSize_ = fb.load<uint64_t>(32, "extended header");
    if (programSize_ > bytes_.size())
      fb.fail("extended header", "program size " + std::to_string(programSize_) +
                                     " exceeds the file size " + std::to_string(bytes_.size()));
    if (segmentBase_ > bytes_.size())
      fb.fail("extended header", "segment base offset " + std::to_string(segmentBase_) +
                                     " is past the end of the file (" +
                                     std::to_string(bytes_.size()) +
                                     " bytes); the file is "
                                     "truncated");
  }

  FlatbufferReader::Table program = fb.root();

  auto segs = fb.vector(program, field::kProgramSegments, 4, "segments");
  for (uint32_t i = 0; i < segs.count; ++i) {
    std::string what = "segments[" + std::to_string(i) + "]";
    auto t = fb.tableAt(segs, i, what);
    PteSegment seg;
    seg.offset = fb.scalar<uint64_t>(t, field::kSegmentOffset, 0, what);
    seg.size = fb.scalar<uint64_t>(t, field::kSegmentSize, 0, what);
    seg.offsetField = fb.fieldPos(t, field::kSegmentOffset, what);
    seg.sizeField = fb.fieldPos(t, field::kSegmentSize, what);
    segments_.push_back(seg);
  }

  if (!segments_.empty() && !hasExtendedHeader)
    fb.fail("segments", "program lists " + std::to_string(segments_.size()) +
                            " segments but the file has no extended header (\"eh00\" at byte 8) "
                            "locating them");

  auto inl = fb.vector(program, field::kProgramBackendDelegateData, 4, "backend_delegate_data");
  for (uint32_t i = 0; i < inl.count; ++i) {
    std::string what = "backend_delegate_data[" + std::to_string(i) + "]";
    auto t = fb.tableAt(inl, i, what);
    inlineData_.push_back(fb.bytesOf(fb.vector(t, field::kInlineDataData, 1, what)));
  }

  auto named = fb.vector(program, field::kProgramNamedData, 4, "named_data");
  for (uint32_t i = 0; i < named.count; ++i) {
    std::string what = "named_data[" + std::to_string(i) + "]";
    auto t = fb.tableAt(named, i, what);
    namedData_[fb.string(t, field::kNamedDataKey, what)] =
        fb.scalar<uint32_t>(t, field::kNamedDataSegmentIndex, 0, what);
  }

  auto plans = fb.vector(program, field::kProgramExecutionPlan, 4, "execution_plan");
  for (uint32_t p = 0; p < plans.count; ++p) {
    std::string what = "execution_plan[" + std::to_string(p) + "]";
    auto plan = fb.tableAt(plans, p, what);
    std::string method = fb.string(plan, field::kPlanName, what);
    methods_.push_back(method);
    planTables_.push_back(plan.pos);
    auto dels = fb.vector(plan, field::kPlanDelegates, 4, what + ".delegates");
    for (uint32_t d = 0; d < dels.count; ++d) {
      std::string dwhat = what + ".delegates[" + std::to_string(d) + "]";
      auto del = fb.tableAt(dels, d, dwhat);
      PteDelegate info;
      info.method = method;
      info.indexInMethod = d;
      info.backendId = fb.string(del, field::kDelegateId, dwhat);
      auto specs = fb.vector(del, field::kDelegateCompileSpecs, 4, dwhat + ".compile_specs");
      for (uint32_t s = 0; s < specs.count; ++s) {
        auto spec = fb.tableAt(specs, s, dwhat + ".compile_specs");
        auto value = fb.bytesOf(fb.vector(spec, field::kCompileSpecValue, 1, dwhat));
        info.compileSpecs[fb.string(spec, field::kCompileSpecKey, dwhat)] =
            std::string(value.begin(), value.end());
      }
      auto ref = fb.subTable(del, field::kDelegateProcessed, dwhat + ".processed");
      if (!ref)
        fb.fail(dwhat, "delegate has no processed data");
      uint8_t location = fb.scalar<uint8_t>(*ref, field::kDataRefLocation, 0, dwhat);
      if (location != kLocationInline && location != kLocationSegment)
        fb.fail(dwhat + ".processed",
                "expected location INLINE (0) or SEGMENT (1), found " + std::to_string(location));
      info.location = locationName(location);
      info.dataIndex = fb.scalar<uint32_t>(*ref, field::kDataRefIndex, 0, dwhat);
      delegates_.push_back(std::move(info));
    }
  }

  // Resolve Core ML "CMJR" references now, so listing a file shows them.
  for (PteDelegate &d : delegates_) {
    if (!d.isCoreML())
      continue;
    std::optional<CoreMLPayloadReference> ref =
        coreMLPayloadReference(payload(d), path_ + ": " + d.label());
    if (ref) {
      d.namedDataKey = ref->key;
      d.functionName = ref->functionName;
      if (!namedData_.count(d.namedDataKey))
        throw InputError::at(path_, d.label(),
                             "CMJR reference names '" + d.namedDataKey +
                                 "', which is not in the program's named data");
      d.location = "named-data";
    }
  }
}

std::optional<CoreMLPayloadReference> coreMLPayloadReference(std::span<const uint8_t> payload,
                                                             const std::string &label) {
  if (payload.size() < 4 || std::memcmp(payload.data(), "CMJR", 4) != 0)
    return std::nullopt;
  auto j = parseJson(
      std::string_view(reinterpret_cast<const char *>(payload.data()) + 4, payload.size() - 4),
      label);
  if (j.is_discarded() || !j.is_object() || !j.contains("key") || !j["key"].is_string())
    throw InputError::at(label, "", "expected a JSON object with a string \"key\" after CMJR");
  CoreMLPayloadReference ref;
  ref.key = j["key"].get<std::string>();
  if (j.contains("functionName") && j["functionName"].is_string())
    ref.functionName = j["functionName"].get<std::string>();
  return ref;
}

std::span<const uint8_t> PteFile::segment(uint32_t index, const std::string &what) const {
  if (index >= segments_.size())
    throw InputError::at(path_, what,
                         "segment index " + std::to_string(index) + " out of range (" +
                             std::to_string(segments_.size()) + " segments)");
  uint64_t offset = segments_[index].offset, size = segments_[index].size;
  uint64_t start = segmentBase_ + offset;
  if (start < segmentBase_ || start > bytes_.size() || size > bytes_.size() - start)
    throw InputError::at(path_, what,
                         "segment " + std::to_string(index) + " (offset " + std::to_string(offset) +
                             ", " + std::to_string(size) +
                             " bytes) runs past the end of the file (" +
                             std::to_string(bytes_.size()) + " bytes); the file is truncated");
  return bytes_.subspan(start, size);
}

std::span<const uint8_t> PteFile::payload(const PteDelegate &d) const {
  if (d.location == "named-data")
    return segment(namedData_.at(d.namedDataKey),
                   d.label() + " named data '" + d.namedDataKey + "'");
  if (d.location == "inline") {
    if (d.dataIndex >= inlineData_.size())
      throw InputError::at(path_, d.label(),
                           "inline payload index " + std::to_string(d.dataIndex) +
                               " out of range (" + std::to_string(inlineData_.size()) +
                               " entries)");
    return inlineData_[d.dataIndex];
  }
  return segment(d.dataIndex, d.label());
}

PteDelegateIO PteFile::delegateIO(const PteDelegate &d, size_t numInputs, size_t numOutputs) const {
  PteDelegateIO io;
  size_t planIndex = 0;
  while (planIndex < methods_.size() && methods_[planIndex] != d.method)
    ++planIndex;
  if (planIndex == methods_.size()) {
    io.unmappable = "method '" + d.method + "' not found";
    return io;
  }
  try {
    FlatbufferReader fb(bytes_, path_);
    std::string what = "execution_plan[" + std::to_string(planIndex) + "]";
    auto plan = fb.table(planTables_[planIndex], what);
    std::vector<int32_t> planInputs = fb.ints(plan, field::kPlanInputs, what + ".inputs");
    uint32_t numValues = fb.vector(plan, field::kPlanValues, 4, what + ".values").count;
    auto ops = fb.vector(plan, field::kPlanOperators, 4, what + ".operators");
    std::vector<std::string> opNames;
    for (uint32_t i = 0; i < ops.count; ++i) {
      auto op = fb.tableAt(ops, i, what + ".operators");
      std::string overload = fb.string(op, field::kOperatorOverload, what);
      opNames.push_back(fb.string(op, field::kOperatorName, what) +
                        (overload.empty() ? "" : "." + overload));
    }
    auto chains = fb.vector(plan, field::kPlanChains, 4, what + ".chains");

    // The instructions of every chain, in order.
    struct Instr {
      uint8_t type;
      int32_t index = 0;
      std::vector<int32_t> args;
      uint32_t chain;
    };
    std::vector<Instr> instrs;
    for (uint32_t c = 0; c < chains.count; ++c) {
      std::string cwhat = what + ".chains[" + std::to_string(c) + "]";
      auto chain = fb.tableAt(chains, c, cwhat);
      auto list = fb.vector(chain, field::kChainInstructions, 4, cwhat + ".instructions");
      for (uint32_t i = 0; i < list.count; ++i) {
        std::string iwhat = cwhat + ".instructions[" + std::to_string(i) + "]";
        auto instr = fb.tableAt(list, i, iwhat);
        Instr in{fb.scalar<uint8_t>(instr, field::kInstructionArgsType, 0, iwhat), 0, {}, c};
        auto args = fb.subTable(instr, field::kInstructionArgs, iwhat);
        if (args && (in.type == kKernelCall || in.type == kDelegateCall)) {
          in.index = fb.scalar<int32_t>(*args, field::kCallIndex, 0, iwhat);
          in.args = fb.ints(*args, field::kCallArgs, iwhat + ".args");
        } else if (args && in.type == kMoveCall) {
          in.args = {fb.scalar<int32_t>(*args, field::kMoveFrom, 0, iwhat),
                     fb.scalar<int32_t>(*args, field::kMoveTo, 0, iwhat)};
        }
        instrs.push_back(std::move(in));
      }
    }

    // The one call of this delegate.
    std::vector<size_t> calls;
    for (size_t i = 0; i < instrs.size(); ++i)
      if (instrs[i].type == kDelegateCall &&
          instrs[i].index == static_cast<int32_t>(d.indexInMethod))
        calls.push_back(i);
    if (calls.empty())
      return io; // never called: nothing to carry
    if (calls.size() > 1) {
      io.unmappable =
          "method '" + d.method + "' calls the delegate " + std::to_string(calls.size()) + " times";
      return io;
    }
    const Instr &call = instrs[calls[0]];
    if (call.args.size() != numInputs + numOutputs) {
      io.unmappable = "the delegate call passes " + std::to_string(call.args.size()) +
                      " arguments; its Core ML model has " + std::to_string(numInputs) +
                      " inputs and " + std::to_string(numOutputs) + " outputs";
      return io;
    }
    for (int32_t v : call.args)
      if (v < 0 || static_cast<uint32_t>(v) >= numValues) {
        io.unmappable = "the delegate call names value " + std::to_string(v) + " of " +
                        std::to_string(numValues);
        return io;
      }
    for (const Instr &in : instrs)
      if (in.type == kJumpFalseCall) {
        io.unmappable = "method '" + d.method + "' has control flow (JumpFalseCall)";
        return io;
      }
    if (chains.count > 1) {
      io.unmappable = "method '" + d.method + "' has " + std::to_string(chains.count) + " chains";
      return io;
    }
    auto inputPos = [&](int32_t v) -> std::optional<uint32_t> {
      for (uint32_t i = 0; i < numInputs; ++i)
        if (call.args[i] == v)
          return i;
      return std::nullopt;
    };
    auto outputPos = [&](int32_t v) -> std::optional<uint32_t> {
      for (uint32_t o = 0; o < numOutputs; ++o)
        if (call.args[numInputs + o] == v)
          return o;
      return std::nullopt;
    };
    auto isMethodInput = [&](int32_t v) {
      return std::find(planInputs.begin(), planInputs.end(), v) != planInputs.end();
    };
    std::set<uint32_t> written;
    auto add = [&](uint32_t o, uint32_t i, int32_t v, std::string via) {
      if (!written.insert(i).second) {
        io.unmappable = "delegate input " + std::to_string(i) + " is written back twice";
        return false;
      }
      io.writeBacks.push_back(PteWriteBack{o, i, v, std::move(via), isMethodInput(v)});
      return true;
    };
    // Outputs that are the input's own value.
    for (uint32_t o = 0; o < numOutputs; ++o)
      if (auto i = inputPos(call.args[numInputs + o]))
        if (!add(o, *i, call.args[numInputs + o], "alias"))
          return io;
    // Instructions that write into a delegate input.
    for (size_t k = 0; k < instrs.size(); ++k) {
      const Instr &in = instrs[k];
      if (k == calls[0])
        continue;
      if (in.type == kMoveCall && in.args.size() == 2 && inputPos(in.args[1])) {
        io.unmappable = "a MoveCall writes delegate input " + std::to_string(*inputPos(in.args[1]));
        io.writeBacks.clear();
        return io;
      }
      if (in.type != kKernelCall || in.index < 0 || static_cast<size_t>(in.index) >= opNames.size())
        continue;
      const std::string &op = opNames[in.index];
      bool copy = op == "aten::copy_" || op == "aten::copy_.default" || op == "aten::copy_.out";
      if (!copy || in.args.size() < 2)
        continue;
      int32_t self = in.args[0], src = in.args[1], out = in.args.back();
      auto i = inputPos(self);
      if (!i)
        continue;
      auto o = outputPos(src);
      std::string target =
          "delegate input " + std::to_string(*i) + " (value " + std::to_string(self) + ")";
      if (!o || k < calls[0] || out != self) {
        io.unmappable =
            op + " writes " + target +
            (k < calls[0] ? " before the delegate call"
             : !o ? " from value " + std::to_string(src) + ", which the delegate does not produce"
                  : " into another value");
        io.writeBacks.clear();
        return io;
      }
      if (!add(*o, *i, self, "aten::copy_")) {
        io.writeBacks.clear();
        return io;
      }
    }
  } catch (const InputError &e) {
    io.unmappable = e.what();
    io.writeBacks.clear();
  }
  return io;
}

std::optional<uint32_t> PteFile::payloadSegment(const PteDelegate &d) const {
  if (d.location == "named-data")
    return namedData_.at(d.namedDataKey);
  if (d.location == "segment")
    return d.dataIndex;
  return std::nullopt;
}

namespace {

struct FlattenedIndex {
  nlohmann::json nodes;
  size_t indexStart = 0; ///< where the reversed index begins
};

FlattenedIndex readFlattenedIndex(std::span<const uint8_t> payload, const std::string &context) {
  // The index is JSON written byte-reversed at the end, possibly followed by
  // NUL padding: walk backwards to its closing '{' by brace depth.
  size_t end = payload.size();
  while (end > 0 && payload[end - 1] == 0)
    --end;
  if (end == 0 || payload[end - 1] != '{')
    throw InputError::at(context, "directory index",
                         "expected a reversed JSON index ending the payload, found none; is "
                         "this a Core ML delegate payload?");
  std::string json;
  int depth = 0;
  bool inString = false;
  size_t i = end;
  while (i > 0) {
    char c = static_cast<char>(payload[--i]);
    json.push_back(c);
    // In reversed text an escaping backslash follows the quote it escapes.
    bool escaped = i > 0 && payload[i - 1] == '\\';
    if (c == '"' && !escaped)
      inString = !inString;
    else if (!inString && c == '{')
      ++depth;
    else if (!inString && c == '}')
      --depth;
    if (depth == 0)
      break;
  }
  if (depth != 0)
    throw InputError::at(context, "directory index", "reversed JSON index is unterminated");
  size_t indexStart = i;
  auto index = parseJson(json, context, "directory index");
  if (index.is_discarded() || !index.is_object() || !index.contains("nodes") ||
      !index["nodes"].is_array() || index["nodes"].empty())
    throw InputError::at(context, "directory index",
                         "expected {\"nodes\": [...]} in the reversed JSON index");
  return FlattenedIndex{std::move(index["nodes"]), indexStart};
}

} // namespace

std::string flattenedDirectoryRootName(std::span<const uint8_t> payload,
                                       const std::string &context) {
  FlattenedIndex index = readFlattenedIndex(payload, context);
  const auto &root = index.nodes.back();
  if (!root.is_object() || !root.contains("name") || !root["name"].is_string())
    throw InputError::at(context, "directory index", "the root node has no name");
  return root["name"].get<std::string>();
}

std::vector<FlatFile> readFlattenedDirectory(std::span<const uint8_t> payload,
                                             const std::string &context) {
  FlattenedIndex index = readFlattenedIndex(payload, context);
  const auto &nodes = index.nodes;
  size_t indexStart = index.indexStart;

  std::vector<FlatFile> files;
  std::set<size_t> onPath;
  std::function<void(size_t, const std::string &, int)> visit = [&](size_t n,
                                                                    const std::string &prefix,
                                                                    int depthLeft) {
    std::string where = "directory index node " + std::to_string(n);
    if (n >= nodes.size() || !nodes[n].is_object())
      throw InputError::at(context, where, "node index out of range");
    if (depthLeft == 0 || onPath.count(n))
      throw InputError::at(context, where, "directory tree has a cycle or is too deep");
    const auto &node = nodes[n];
    // Every field is type-checked here: nlohmann's own exceptions would
    // name neither the file nor the node.
    auto field = [&](const nlohmann::json &obj, const char *key) -> const nlohmann::json * {
      auto it = obj.find(key);
      return it == obj.end() ? nullptr : &*it;
    };
    auto unsignedField = [&](const nlohmann::json &obj, const char *key,
                             const std::string &place) -> uint64_t {
      const nlohmann::json *v = field(obj, key);
      if (!v)
        return 0;
      if (!v->is_number_unsigned())
        failExpected(context, place + "." + key, "a non-negative integer", v->type_name());
      return v->get<uint64_t>();
    };
    int kind = -1;
    if (const nlohmann::json *k = field(node, "kind")) {
      if (!k->is_number_integer())
        failExpected(context, where + ".kind", "0 (file) or 1 (directory)", k->type_name());
      kind = k->get<int64_t>() == 0 ? 0 : k->get<int64_t>() == 1 ? 1 : 2;
    }
    if (kind == 0) {
      static const nlohmann::json kNoRegion = nlohmann::json::object();
      const nlohmann::json *regionField = field(node, "dataRegion");
      if (regionField && !regionField->is_object())
        failExpected(context, where + ".dataRegion", "an object", regionField->type_name());
      const nlohmann::json &region = regionField ? *regionField : kNoRegion;
      uint64_t off = unsignedField(region, "offset", where + ".dataRegion");
      uint64_t size = unsignedField(region, "size", where + ".dataRegion");
      if (off > indexStart || size > indexStart - off)
        throw InputError::at(context, where + " ('" + prefix + "')",
                             "data region [" + std::to_string(off) + ", +" + std::to_string(size) +
                                 ") runs into the index or past the end");
      files.push_back(FlatFile{prefix, payload.subspan(off, size)});
      return;
    }
    if (kind != 1)
      throw InputError::at(context, where, "expected kind 0 (file) or 1 (directory)");
    onPath.insert(n);
    static const nlohmann::json kNoChildren = nlohmann::json::object();
    const nlohmann::json *childrenField = field(node, "children");
    const nlohmann::json &children = childrenField ? *childrenField : kNoChildren;
    if (!children.is_object())
      throw InputError::at(context, where, "expected an object of children");
    for (const auto &[name, child] : children.items()) {
      if (!child.is_number_unsigned() || name.empty() || name == "." || name == ".." ||
          name.find('/') != std::string::npos)
        throw InputError::at(context, where, "bad child entry '" + name + "'");
      visit(child.get<size_t>(), prefix.empty() ? name : prefix + "/" + name, depthLeft - 1);
    }
    onPath.erase(n);
  };
  visit(nodes.size() - 1, "", kMaxTreeDepth);
  return files;
}

} // namespace anefit
