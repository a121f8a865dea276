//===- MiniEval.h - A tiny evaluator to prove rewrites equal ----*- C++ -*-===//
//
// Runs the few op types the state tests use (const, state ops, concat,
// slice_by_index, slice_update, add, sub, mul, identity, shape, gather) on
// doubles, keeping states across calls, so a test can run a program and its
// rewrite side by side over several steps. Not the product's interpreter.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace anefit::test {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
};

inline std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = (int64_t)shape.size() - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

/// Calls fn(multiIndex, flatIndex) for every element of `shape`.
inline void forEachIndex(const std::vector<int64_t> &shape,
                         const std::function<void(const std::vector<int64_t> &, int64_t)> &fn) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    fn(idx, flat);
    for (int64_t i = (int64_t)shape.size() - 1; i >= 0; --i) {
      if (++idx[i] < shape[i])
        break;
      idx[i] = 0;
    }
  }
}

class MiniEval {
public:
  /// State values by state name, kept across run() calls (zeros at first use).
  std::map<std::string, Tensor> states;

  /// Runs `fn` on `inputs` (by input name); returns outputs by name.
  std::map<std::string, Tensor> run(const Function &fn,
                                    const std::map<std::string, Tensor> &inputs) {
    env_.clear();
    for (const auto &in : fn.inputs) {
      if (in->type.isState()) {
        if (!states.count(in->name)) {
          Tensor z;
          z.shape = *in->type.staticShape();
          z.data.assign(*in->type.numElements(), 0.0);
          states[in->name] = z;
        }
        stateOf_[in.get()] = in->name;
      } else {
        env_[in.get()] = inputs.at(in->name);
      }
    }
    for (const auto &op : fn.body->ops)
      exec(*op);
    std::map<std::string, Tensor> out;
    for (const Value *v : fn.body->outputs)
      out[v->name] = env_.at(v);
    return out;
  }

private:
  std::map<const Value *, Tensor> env_;
  std::map<const Value *, std::string> stateOf_;

  Tensor get(const Operation &op, const char *param, size_t i = 0) {
    const Binding &b = op.input(param)->bindings.at(i);
    if (b.isValue())
      return env_.at(b.value);
    return fromConst(*b.constant);
  }
  static Tensor fromConst(const Constant &c) {
    Tensor t;
    t.shape = *c.type.staticShape();
    t.data = c.asDoubles();
    return t;
  }
  std::vector<int64_t> ints(const Operation &op, const char *param) {
    std::vector<int64_t> v;
    for (double d : get(op, param).data)
      v.push_back((int64_t)d);
    return v;
  }

  void exec(const Operation &op) {
    const std::string &t = op.type;
    auto set = [&](Tensor v) { env_[op.output(0)] = std::move(v); };
    if (t == "const") {
      set(fromConst(*op.attribute("val")));
    } else if (t == "read_state") {
      set(states.at(stateOf_.at(op.inputValue("input"))));
    } else if (t == "write_state") {
      states[stateOf_.at(op.inputValue("input"))] = get(op, "data");
    } else if (t == "coreml_update_state") {
      Tensor v = get(op, "value");
      states[stateOf_.at(op.inputValue("state"))] = v;
      set(v);
    } else if (t == "identity") {
      set(get(op, "x"));
    } else if (t == "cast") {
      // Values are exact small integers in these tests; a cast keeps them.
      set(get(op, "x"));
    } else if (t == "equal" || t == "select") {
      // Numpy broadcasting over 2 or 3 operands.
      std::vector<Tensor> ins;
      for (const char *p : t == "equal" ? std::vector<const char *>{"x", "y"}
                                        : std::vector<const char *>{"cond", "a", "b"})
        ins.push_back(get(op, p));
      size_t rank = 0;
      for (auto &in : ins)
        rank = std::max(rank, in.shape.size());
      std::vector<int64_t> shape(rank, 1);
      for (auto &in : ins)
        for (size_t d = 0; d < in.shape.size(); ++d) {
          int64_t &s = shape[rank - in.shape.size() + d];
          s = std::max(s, in.shape[d]);
        }
      auto at = [&](const Tensor &in, const std::vector<int64_t> &idx) {
        auto st = stridesOf(in.shape);
        int64_t o = 0;
        for (size_t d = 0; d < in.shape.size(); ++d)
          o += (in.shape[d] == 1 ? 0 : idx[rank - in.shape.size() + d]) * st[d];
        return in.data[o];
      };
      Tensor r{shape, {}};
      forEachIndex(shape, [&](const std::vector<int64_t> &idx, int64_t) {
        if (t == "equal")
          r.data.push_back(at(ins[0], idx) == at(ins[1], idx) ? 1.0 : 0.0);
        else
          r.data.push_back(at(ins[0], idx) != 0 ? at(ins[1], idx) : at(ins[2], idx));
      });
      set(r);
    } else if (t == "relu") {
      Tensor x = get(op, "x");
      for (double &v : x.data)
        v = v > 0 ? v : 0;
      set(x);
    } else if (t == "add" || t == "sub" || t == "mul") {
      Tensor x = get(op, "x"), y = get(op, "y");
      Tensor big = x.data.size() >= y.data.size() ? x : y;
      for (size_t i = 0; i < big.data.size(); ++i) {
        double a = x.data[x.data.size() == 1 ? 0 : i], b = y.data[y.data.size() == 1 ? 0 : i];
        big.data[i] = t == "add" ? a + b : t == "sub" ? a - b : a * b;
      }
      set(big);
    } else if (t == "shape") {
      Tensor x = get(op, "x");
      Tensor s{{(int64_t)x.shape.size()}, {}};
      for (int64_t d : x.shape)
        s.data.push_back((double)d);
      set(s);
    } else if (t == "gather") {
      Tensor x = get(op, "x");
      auto idx = ints(op, "indices");
      Tensor r{get(op, "indices").shape, {}};
      for (int64_t i : idx)
        r.data.push_back(x.data.at(i < 0 ? i + x.shape[0] : i));
      set(r);
    } else if (t == "concat") {
      int64_t axis = ints(op, "axis")[0];
      std::vector<Tensor> parts;
      for (size_t i = 0; i < op.input("values")->bindings.size(); ++i)
        parts.push_back(get(op, "values", i));
      if (axis < 0)
        axis += (int64_t)parts[0].shape.size();
      Tensor r{parts[0].shape, {}};
      r.shape[axis] = 0;
      for (auto &p : parts)
        r.shape[axis] += p.shape[axis];
      r.data.assign(r.shape.empty() ? 1 : [&] {
        int64_t n = 1;
        for (int64_t d : r.shape)
          n *= d;
        return n;
      }(), 0.0);
      auto rs = stridesOf(r.shape);
      int64_t offset = 0;
      for (auto &p : parts) {
        forEachIndex(p.shape, [&](const std::vector<int64_t> &idx, int64_t flat) {
          int64_t o = 0;
          for (size_t d = 0; d < idx.size(); ++d)
            o += (idx[d] + ((int64_t)d == axis ? offset : 0)) * rs[d];
          r.data[o] = p.data[flat];
        });
        offset += p.shape[axis];
      }
      set(r);
    } else if (t == "slice_by_index" || t == "slice_update") {
      Tensor x = get(op, "x");
      auto b = ints(op, "begin"), e = ints(op, "end");
      for (size_t d = 0; d < b.size(); ++d) {
        if (b[d] < 0)
          b[d] += x.shape[d];
        if (e[d] < 0)
          e[d] += x.shape[d];
      }
      auto xs = stridesOf(x.shape);
      std::vector<int64_t> shape(b.size());
      for (size_t d = 0; d < b.size(); ++d)
        shape[d] = e[d] - b[d];
      if (t == "slice_by_index") {
        Tensor r{shape, {}};
        forEachIndex(shape, [&](const std::vector<int64_t> &idx, int64_t) {
          int64_t o = 0;
          for (size_t d = 0; d < idx.size(); ++d)
            o += (idx[d] + b[d]) * xs[d];
          r.data.push_back(x.data[o]);
        });
        set(r);
      } else {
        Tensor u = get(op, "update");
        forEachIndex(shape, [&](const std::vector<int64_t> &idx, int64_t flat) {
          int64_t o = 0;
          for (size_t d = 0; d < idx.size(); ++d)
            o += (idx[d] + b[d]) * xs[d];
          x.data[o] = u.data[flat];
        });
        set(x);
      }
    } else {
      throw std::runtime_error("MiniEval: no kernel for " + t);
    }
  }
};

/// A tensor of `shape` filled with step*100 + index, so every step differs.
inline Tensor pattern(const std::vector<int64_t> &shape, int step) {
  Tensor t{shape, {}};
  forEachIndex(shape, [&](const std::vector<int64_t> &, int64_t flat) {
    t.data.push_back(step * 100.0 + (double)flat);
  });
  return t;
}

} // namespace anefit::test
