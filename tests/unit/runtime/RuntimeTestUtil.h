//===- RuntimeTestUtil.h - Building small programs for kernel tests -*- C++ -*-===//
//
// A tiny builder for one-function programs, so interpreter tests can state an
// op, its inputs and the expected result in a few lines.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "runtime/Interpreter.h"
#include "runtime/kernels/Isa.h"
#include "support/Error.h"
#include "support/Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace anefit::test {

using runtime::Shape;
using runtime::Tensor;

inline ConstantRef constF32(std::vector<float> v, std::vector<int64_t> shape) {
  return std::make_shared<Constant>(Constant::fromF32(std::move(v), std::move(shape)));
}
inline ConstantRef constI32(std::vector<int32_t> v, std::vector<int64_t> shape) {
  return std::make_shared<Constant>(Constant::fromI32(std::move(v), std::move(shape)));
}
inline ConstantRef constBool(std::vector<bool> v, std::vector<int64_t> shape) {
  return std::make_shared<Constant>(Constant::fromBool(std::move(v), std::move(shape)));
}
inline ConstantRef constStr(std::string s) {
  return std::make_shared<Constant>(Constant::scalarString(std::move(s)));
}
inline ConstantRef scalarI32(int32_t v) { return constI32({v}, {}); }
inline ConstantRef scalarF32(float v) { return constF32({v}, {}); }
inline ConstantRef scalarBool(bool v) { return constBool({v}, {}); }
inline ConstantRef constF16(const std::vector<float> &v, std::vector<int64_t> shape) {
  std::vector<uint16_t> bits;
  for (float f : v)
    bits.push_back(floatToHalf(f));
  return std::make_shared<Constant>(Constant::fromF16Bits(std::move(bits), std::move(shape)));
}

/// Random test data from a fixed seed: a randomized test draws the same cases
/// at every run. A test file keeps one, with a seed of its own.
class SeededRandom {
public:
  explicit SeededRandom(uint32_t seed) : engine_(seed) {}

  /// A uniform integer in [lo, hi].
  int64_t pick(int64_t lo, int64_t hi) { return uniformInt(engine_, lo, hi); }
  /// A uniform float in [lo, hi).
  float uniform(float lo, float hi) { return uniformFloat(engine_, lo, hi); }
  std::mt19937 &engine() { return engine_; }

private:
  std::mt19937 engine_;
};

/// Every kernel instruction set this CPU runs, the portable one first: a
/// test that loops over them checks each path on every machine (the AVX2
/// paths on AVX-512 machines too).
inline std::vector<runtime::KernelIsa> kernelIsas() {
  std::vector<runtime::KernelIsa> v = {runtime::KernelIsa::Portable};
  if (runtime::cpuHasNeon())
    v.push_back(runtime::KernelIsa::Neon);
  if (runtime::cpuHasAvx2())
    v.push_back(runtime::KernelIsa::Avx2);
  if (runtime::cpuHasAvxVnni())
    v.push_back(runtime::KernelIsa::Avx2Vnni);
  if (runtime::cpuHasAvx512())
    v.push_back(runtime::KernelIsa::Avx512);
  if (runtime::cpuHasAvx512Vnni())
    v.push_back(runtime::KernelIsa::Avx512Vnni);
  return v;
}

/// Holds the kernels to one instruction set for its scope.
struct IsaGuard {
  explicit IsaGuard(runtime::KernelIsa isa) { runtime::setKernelIsaForTesting(isa); }
  ~IsaGuard() { runtime::setKernelIsaForTesting(std::nullopt); }
  IsaGuard(const IsaGuard &) = delete;
  IsaGuard &operator=(const IsaGuard &) = delete;
};

/// Makes the AVX-512 kernels prefetch their weight rows, or not, for its
/// scope (runtime::kernelPrefetches() chooses by CPU otherwise).
struct PrefetchGuard {
  explicit PrefetchGuard(bool on) { runtime::setKernelPrefetchForTesting(on); }
  ~PrefetchGuard() { runtime::setKernelPrefetchForTesting(std::nullopt); }
  PrefetchGuard(const PrefetchGuard &) = delete;
  PrefetchGuard &operator=(const PrefetchGuard &) = delete;
};

inline const char *isaName(runtime::KernelIsa isa) { return runtime::kernelIsaName(isa); }

/// One parameter of an op under construction: a value or a constant.
struct Arg {
  std::string name;
  std::vector<Binding> bindings;
  Arg(std::string n, Value *v) : name(std::move(n)), bindings{Binding::of(v)} {}
  Arg(std::string n, ConstantRef c) : name(std::move(n)), bindings{Binding::of(std::move(c))} {}
  Arg(std::string n, std::vector<Value *> vs) : name(std::move(n)) {
    for (Value *v : vs)
      bindings.push_back(Binding::of(v));
  }
};

class ProgramBuilder {
public:
  ProgramBuilder() : fn(program.addFunction("main")) { fn->opset = "CoreML8"; }

  Value *input(const std::string &name, DType t, std::vector<int64_t> shape) {
    return fn->addInput(name, Type::tensor(t, shape));
  }
  Value *state(const std::string &name, DType t, std::vector<int64_t> shape) {
    return fn->addInput(name, Type::state(Type::tensor(t, shape)));
  }
  /// Appends `type` with `args`, producing outputs of the given types.
  std::vector<Value *> ops(const std::string &type, std::vector<Arg> args,
                           std::vector<Type> outTypes) {
    auto op = std::make_unique<Operation>(type, type + "_" + std::to_string(counter++));
    for (Arg &a : args)
      op->setInput(a.name, std::move(a.bindings));
    std::vector<Value *> outs;
    for (size_t i = 0; i < outTypes.size(); ++i)
      outs.push_back(op->addOutput(op->name + "_out" + std::to_string(i), outTypes[i]));
    fn->body->append(std::move(op));
    return outs;
  }
  Value *op(const std::string &type, std::vector<Arg> args, Type outType) {
    return ops(type, std::move(args), {std::move(outType)})[0];
  }
  Value *op(const std::string &type, std::vector<Arg> args, DType t, std::vector<int64_t> shape) {
    return op(type, std::move(args), Type::tensor(t, shape));
  }
  void output(Value *v) { fn->body->outputs.push_back(v); }

  Program program;
  Function *fn;
  int counter = 0;
};

/// Runs the builder's function once; returns its outputs in order.
inline std::vector<Tensor> runOnce(ProgramBuilder &b, const runtime::TensorMap &inputs = {},
                                   runtime::Precision p = runtime::Precision::FP32) {
  runtime::RunOptions opts;
  opts.precision = p;
  runtime::Interpreter interp(*b.fn, opts);
  std::vector<Tensor> out;
  for (auto &nt : interp.run(inputs))
    out.push_back(std::move(nt.tensor));
  return out;
}

/// Compares every element within atol + rtol * |expected| (NaN equals NaN).
inline void expectNear(const Tensor &got, const std::vector<float> &want, const Shape &shape,
                       float atol = 1e-5f, float rtol = 1e-5f) {
  ASSERT_EQ(got.shape(), shape);
  ASSERT_EQ(got.numElements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    float g = got.floatAt(static_cast<int64_t>(i));
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
      continue;
    }
    if (std::isinf(want[i])) {
      EXPECT_EQ(g, want[i]) << "element " << i;
      continue;
    }
    EXPECT_NEAR(g, want[i], atol + rtol * std::fabs(want[i])) << "element " << i;
  }
}

inline void expectInts(const Tensor &got, const std::vector<int64_t> &want, const Shape &shape) {
  ASSERT_EQ(got.shape(), shape);
  EXPECT_EQ(got.toInts(), want);
}

} // namespace anefit::test
