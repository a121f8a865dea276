//===- RandomInput.cpp - Random input tensors for a function --------------===//
#include "runtime/RandomInput.h"

#include "support/Random.h"

namespace anefit::runtime {

Tensor randomInput(const Value &in, const FeatureDescription *desc, std::mt19937_64 &rng) {
  Shape shape;
  for (size_t d = 0; d < in.type.shape().size(); ++d) {
    const Dim &dim = in.type.shape()[d];
    int64_t n = dim.isStatic() ? dim.size : 1;
    if (!dim.isStatic() && desc && d < desc->type.shape.size() && desc->type.shape[d] > 0)
      n = desc->type.shape[d];
    shape.push_back(n);
  }
  DType t = computeDType(in.type.dtype());
  Tensor out = Tensor::zeros(t, shape);
  for (int64_t i = 0; i < out.numElements(); ++i) {
    if (t == DType::F32)
      out.mutableData<float>()[i] = normalFloat(rng);
    else if (t == DType::I32)
      out.mutableData<int32_t>()[i] = static_cast<int32_t>(uniformInt(rng, 0, 7));
    else
      out.mutableData<uint8_t>()[i] = static_cast<uint8_t>(uniformInt(rng, 0, 7) & 1);
  }
  return out.convertTo(in.type.dtype());
}

} // namespace anefit::runtime
