//===- WeightData.cpp - Reading and writing the weights rewrites change ---===//
#include "transforms/WeightData.h"

#include "runtime/Convert.h"
#include "support/DType.h"
#include "support/Error.h"

#include <cmath>
#include <cstring>

namespace anefit {
namespace {

/// Every element of `c` as float (numeric dtypes; int4/uint4 unpacked
/// LSB-first as the interpreter reads them).
std::vector<float> elementsAsFloat(const Constant &c) {
  uint64_t n = c.numElements();
  std::span<const uint8_t> bytes = c.data();
  std::vector<float> out(n);
  DType t = c.type.dtype();
  switch (t) {
  case DType::F16: {
    std::vector<uint16_t> h(n);
    if (n)
      std::memcpy(h.data(), bytes.data(), 2 * n);
    runtime::halfToFloatN(h.data(), out.data(), static_cast<int64_t>(n));
    return out;
  }
  case DType::F32:
    std::memcpy(out.data(), bytes.data(), n * 4);
    return out;
  case DType::I8:
    for (uint64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(static_cast<int8_t>(bytes[i]));
    return out;
  case DType::U8:
    for (uint64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(bytes[i]);
    return out;
  case DType::I4:
  case DType::U4: {
    // Two values per byte through a table of the 256 byte values.
    float table[256][2];
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 2; ++k) {
        int v = (b >> (4 * k)) & 0xF;
        table[b][k] = static_cast<float>(t == DType::I4 && v >= 8 ? v - 16 : v);
      }
    for (uint64_t i = 0; i + 1 < n; i += 2) {
      out[i] = table[bytes[i / 2]][0];
      out[i + 1] = table[bytes[i / 2]][1];
    }
    if (n % 2)
      out[n - 1] = table[bytes[n / 2]][0];
    return out;
  }
  default:
    for (uint64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(c.elementAsDouble(i));
    return out;
  }
}

} // namespace

const Constant *paramConstant(const Operation &op, std::string_view param) {
  if (const Constant *c = op.constInput(param))
    return c;
  return op.attribute(param);
}

std::optional<DenseWeight> denseWeight(const Operation &producer, std::string *why) {
  auto fail = [&](std::string reason) -> std::optional<DenseWeight> {
    if (why)
      *why = std::move(reason);
    return std::nullopt;
  };
  if (producer.outputs.empty())
    return fail("it has no result");
  const Type &outType = producer.output()->type;
  auto shape = outType.staticShape();
  if (!shape || !isFloat(outType.dtype()))
    return fail("its result is not a float tensor of static shape");
  DenseWeight w;
  w.shape = *shape;
  w.dtype = outType.dtype();
  try {
    if (producer.type == "const") {
      const Constant *c = producer.attribute("val");
      if (!c || !c->isTensorLike() || !isFloat(c->type.dtype()))
        return fail("its value is not a float tensor");
      w.values = elementsAsFloat(*c);
      return w;
    }
    if (producer.type != "constexpr_blockwise_shift_scale")
      return fail("'" + producer.type + "' weights are not read by this rewrite");
    const Constant *data = paramConstant(producer, "data");
    const Constant *scale = paramConstant(producer, "scale");
    const Constant *offset = paramConstant(producer, "offset");
    if (!data || !scale || !data->isTensorLike() || !scale->isTensorLike())
      return fail("its data or scale is not constant");
    auto ds = data->type.staticShape();
    auto ss = scale->type.staticShape();
    if (!ds || !ss || *ds != w.shape || ss->size() != ds->size() ||
        (offset && offset->type.staticShape() != ss))
      return fail("its data, scale and offset shapes do not match");
    size_t rank = ds->size();
    if (rank == 0)
      return fail("its data is a scalar");
    std::vector<int64_t> block(rank), sstride(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
      if ((*ss)[d] < 1 || (*ds)[d] % (*ss)[d])
        return fail("its scale does not tile the data");
      block[d] = (*ds)[d] / (*ss)[d];
    }
    for (size_t d = rank; d-- > 1;)
      sstride[d - 1] = sstride[d] * (*ss)[d];
    std::vector<float> q = elementsAsFloat(*data);
    std::vector<float> sc = elementsAsFloat(*scale);
    std::vector<float> of = offset ? elementsAsFloat(*offset) : std::vector<float>();
    w.values.resize(q.size());
    int64_t last = (*ds)[rank - 1];
    int64_t rows = last ? static_cast<int64_t>(q.size()) / last : 0;
    std::vector<int64_t> idx(rank, 0); // index of the row's first element
    int64_t lastBlock = block[rank - 1];
    for (int64_t r = 0; r < rows; ++r) {
      int64_t base = 0;
      for (size_t d = 0; d + 1 < rank; ++d)
        base += idx[d] / block[d] * sstride[d];
      const float *qr = q.data() + r * last;
      float *wr = w.values.data() + r * last;
      // One scale (and offset) per run of lastBlock columns.
      for (int64_t c0 = 0; c0 < last; c0 += lastBlock) {
        int64_t s = base + c0 / lastBlock;
        float sc0 = sc[static_cast<size_t>(s)],
              of0 = of.empty() ? 0.0f : of[static_cast<size_t>(s)];
        for (int64_t c = c0; c < c0 + lastBlock; ++c)
          wr[c] = (qr[c] - of0) * sc0;
      }
      for (size_t d = rank - 1; d-- > 0;) {
        if (++idx[d] < (*ds)[d])
          break;
        idx[d] = 0;
      }
    }
    // Materialized at the op's dtype, as Core ML holds the weight.
    if (w.dtype == DType::F16)
      runtime::roundToHalfN(w.values.data(), static_cast<int64_t>(w.values.size()));
    return w;
  } catch (const InputError &e) {
    return fail(e.what());
  }
}

std::vector<uint8_t> packElements(const std::vector<float> &values, DType dtype) {
  size_t n = values.size();
  std::vector<uint8_t> out;
  switch (dtype) {
  case DType::F16: {
    std::vector<uint16_t> h(n);
    runtime::floatToHalfN(values.data(), h.data(), static_cast<int64_t>(n));
    out.resize(2 * n);
    if (n)
      std::memcpy(out.data(), h.data(), 2 * n);
    break;
  }
  case DType::F32:
    out.resize(4 * n);
    std::memcpy(out.data(), values.data(), 4 * n);
    break;
  case DType::I8:
  case DType::U8:
    out.resize(n);
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<uint8_t>(static_cast<int>(values[i]) & 0xFF);
    break;
  case DType::I4:
  case DType::U4:
    out.assign((n + 1) / 2, 0);
    for (size_t i = 0; i < n; ++i)
      out[i / 2] |= static_cast<uint8_t>((static_cast<int>(values[i]) & 0xF) << (4 * (i % 2)));
    break;
  default:
    throw InputError("packElements: cannot write " + std::string(dtypeName(dtype)) + " weights");
  }
  return out;
}

ConstantRef makeWeightConstant(const std::shared_ptr<OwnedBlobs> &store, Type type,
                               std::vector<uint8_t> bytes) {
  if (bytes.size() <= 64) {
    auto c = std::make_shared<Constant>();
    c->type = std::move(type);
    c->bytes = std::move(bytes);
    return c;
  }
  return std::make_shared<const Constant>(
      OwnedBlobs::add(store, std::move(type), std::move(bytes)));
}

std::optional<ConstantRef> sliceRows(const std::shared_ptr<OwnedBlobs> &store, const Constant &c,
                                     int64_t begin, int64_t end) {
  auto shape = c.type.staticShape();
  if (!c.isTensorLike() || !shape || shape->empty() || begin < 0 || end > (*shape)[0] ||
      begin >= end)
    return std::nullopt;
  uint64_t rowElems = 1;
  for (size_t d = 1; d < shape->size(); ++d)
    rowElems *= static_cast<uint64_t>((*shape)[d]);
  uint64_t bits = static_cast<uint64_t>(dtypeBits(c.type.dtype()));
  if ((rowElems * bits) % 8)
    return std::nullopt;
  uint64_t rowBytes = rowElems * bits / 8;
  std::span<const uint8_t> all = c.data();
  if (all.size() < static_cast<uint64_t>(end) * rowBytes)
    return std::nullopt;
  std::vector<uint8_t> bytes(all.begin() + static_cast<int64_t>(begin * rowBytes),
                             all.begin() + static_cast<int64_t>(end * rowBytes));
  std::vector<int64_t> s = *shape;
  s[0] = end - begin;
  return makeWeightConstant(store, Type::tensor(c.type.dtype(), s), std::move(bytes));
}

std::shared_ptr<OwnedBlobs> newWeightStore(std::string_view pass) {
  return std::make_shared<OwnedBlobs>("@model_path/weights/" + std::string(pass) + ".bin");
}

} // namespace anefit
