//===- Sources.cpp - Findings joined to the user's source -----------------===//
#include "report/Sources.h"

#include "support/Error.h"

#include <map>

namespace anefit::report {

void attachSources(ane::CheckReport &report, const Model &model, const ETRecord &record,
                   const std::string &sourceRoot) {
  if (model.debugHandles.empty())
    throw InputError::at(record.path, "",
                         "no op of " + report.modelPath +
                             " carries an ExecuTorch debug handle to join by (the ETRecord "
                             "joins a .pte's Core ML delegates)");
  auto [agree, total] = delegateMapAgreement(record, model.debugHandles);
  if (agree != total)
    throw InputError::at(record.path, "delegate_map",
                         "expected the program of " + report.modelPath + ": " +
                             std::to_string(total - agree) + " of its " + std::to_string(total) +
                             " Core ML ops have other debug handles in this ETRecord (another "
                             "export)");
  // Each finding's op, for its operands and output.
  std::map<std::string, const Operation *> ops;
  for (const ane::FunctionReport &fr : report.functions)
    for (const ane::OpReport &op : fr.ops)
      ops[fr.name + "/" + op.name] = op.op;
  std::map<std::string, std::string> writes; // graph output -> buffer
  for (const auto &[buffer, output] : record.mutations)
    writes[output] = buffer;

  for (ane::Finding &f : report.findings) {
    ane::Finding::Source src;
    if (f.op.empty()) {
      src.note = "a finding about the whole function";
    } else if (f.debugHandles.empty()) {
      src.note = "no ExecuTorch debug handle: an op Core ML's conversion added";
    } else {
      SourceOrigin origin = record.originOf(f.debugHandles);
      if (!origin.node) {
        src.note = "no node of the ETRecord has its debug handles";
      } else {
        src.node = origin.node->name;
        src.module = origin.node->modulePath;
        src.moduleType = origin.node->moduleType;
        if (origin.frame) {
          src.file = relativeSource(origin.frame->file, sourceRoot);
          src.line = origin.frame->line;
          src.function = origin.frame->function;
          src.code = origin.frame->code;
        } else {
          src.note = "its node's stack holds only PyTorch's own frames";
        }
      }
    }
    if (auto it = ops.find(f.function + "/" + f.op); it != ops.end() && it->second) {
      const Operation *op = it->second;
      for (const auto &out : op->outputs)
        if (auto w = writes.find(out->name); w != writes.end())
          src.buffer = w->second;
      if (src.buffer.empty())
        for (const Value *v : op->operandValues())
          if (!v->definingOp || v->definingOp->type == "cast")
            if (auto b =
                    record.bufferPath(v->definingOp ? v->definingOp->inputValue("x")
                                                          ? v->definingOp->inputValue("x")->name
                                                          : v->name
                                                    : v->name)) {
              src.buffer = *b;
              break;
            }
    }
    f.source = std::move(src);
  }
}

} // namespace anefit::report
