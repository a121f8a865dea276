//===- RobustnessTest.cpp - Inference never crashes on odd input ----------===//
//
// Every op of the table is built with its parameters bound to a spread of
// odd arguments (wrong kinds, wrong dtypes, absurd or negative dims, empty
// and huge constants, unknown ranks) and must come back with types or an
// error message, never a crash, hang or huge allocation. Run under the
// sanitizers this is a small structured fuzzer.
//
//===----------------------------------------------------------------------===//
#include "OpTestUtil.h"

#include "ops/OpRegistry.h"
#include "ops/OpVerifier.h"
#include "ops/TypeInference.h"

#include <gtest/gtest.h>

using namespace anefit;
using namespace anefit::test;

namespace {

std::vector<Arg> oddArguments() {
  return {
      Arg(std::string("fp16(1, 8, 4, 4)")),
      Arg(std::string("fp32(4611686018427387904, 4611686018427387904)")),
      Arg(std::string("int32(-3)")),
      Arg(std::string("int32")),
      Arg(std::string("bool(0)")),
      Arg(std::string("fp32(*)")),
      Arg(std::string("fp16(s0, ?, 3)")),
      Arg(std::string("state fp16(1, 64, 2)")),
      Arg(ints({2147483647, -2147483647, 0})),
      Arg(ints({})),
      Arg(i32(-1)),
      Arg(i32(0)),
      Arg(boolean(true)),
      Arg(str("same")),
      Arg(f32(-1e30f)),
      Arg(std::vector<std::string>{"fp32(2, 3)", "int32(9)"}),
  };
}

TEST(Robustness, EveryOpSurvivesOddArguments) {
  std::vector<Arg> args = oddArguments();
  size_t inferred = 0, rejected = 0;
  for (const OpDef &def : allOps()) {
    int ios = def.opset == 0 ? 18 : def.opset;
    for (size_t pick = 0; pick < args.size(); ++pick) {
      SCOPED_TRACE(std::string(def.name) + "@" + std::to_string(def.opset) + " pick " +
                   std::to_string(pick));
      // Rotate through the arguments so each parameter meets each kind.
      OpHarness h("CoreML" + std::to_string(ios - 10));
      std::vector<std::pair<std::string, Arg>> inputs;
      for (size_t i = 0; i < def.params.size(); ++i)
        inputs.emplace_back(std::string(def.params[i].name), args[(pick + i) % args.size()]);
      Operation *op = h.add(std::string(def.name), inputs, {"fp32(2)"});
      std::string error;
      auto types = inferOutputTypes(*op, ios, error);
      if (types) {
        ++inferred;
        for (const Type &t : *types)
          EXPECT_LE(t.hasRank() ? t.rank() : 0, 64);
      } else {
        ++rejected;
      }
      Diagnostics ds = verifyOps(h.program);
      for (const Diagnostic &d : ds)
        EXPECT_FALSE(d.message.empty());
    }
  }
  // Both outcomes occur: the sweep exercises the rules, not only their guards.
  EXPECT_GT(inferred, 100u);
  EXPECT_GT(rejected, 100u);
}

} // namespace
