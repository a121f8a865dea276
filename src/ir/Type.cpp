//===- Type.cpp - Types of MIL values -------------------------------------===//
#include "ir/Type.h"

namespace anefit {

std::string Dim::str() const {
  switch (kind) {
  case Kind::Static:
    return std::to_string(size);
  case Kind::Symbolic:
    return symbol;
  case Kind::Unknown:
    return "?";
  case Kind::Variadic:
    return "*";
  }
  return "?";
}

Type Type::tensor(DType dtype, std::vector<Dim> shape) {
  Type t;
  t.kind_ = Kind::Tensor;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

Type Type::tensor(DType dtype, const std::vector<int64_t> &shape) {
  std::vector<Dim> dims;
  dims.reserve(shape.size());
  for (int64_t d : shape)
    dims.push_back(Dim::of(d));
  return tensor(dtype, std::move(dims));
}

Type Type::unranked(DType dtype) {
  Type t = tensor(dtype, std::vector<Dim>{});
  t.rankKnown_ = false;
  return t;
}

Type Type::state(Type wrapped) {
  Type t;
  t.kind_ = Kind::State;
  t.elements_.push_back(std::move(wrapped));
  return t;
}

Type Type::list(Type element, Dim length) {
  Type t;
  t.kind_ = Kind::List;
  t.elements_.push_back(std::move(element));
  t.listLength_ = std::move(length);
  return t;
}

Type Type::tuple(std::vector<Type> elements) {
  Type t;
  t.kind_ = Kind::Tuple;
  t.elements_ = std::move(elements);
  return t;
}

Type Type::dict(Type key, Type value) {
  Type t;
  t.kind_ = Kind::Dict;
  t.elements_.push_back(std::move(key));
  t.elements_.push_back(std::move(value));
  return t;
}

bool Type::hasStaticShape() const {
  if (!hasRank())
    return false;
  for (const Dim &d : shape())
    if (!d.isStatic())
      return false;
  return true;
}

std::optional<std::vector<int64_t>> Type::staticShape() const {
  if (!(isTensor() || isState()) || !hasStaticShape())
    return std::nullopt;
  std::vector<int64_t> out;
  for (const Dim &d : shape())
    out.push_back(d.size);
  return out;
}

std::optional<int64_t> Type::numElements() const {
  auto s = staticShape();
  if (!s)
    return std::nullopt;
  // Shapes come from files: an absurd shape must not overflow into a small count.
  int64_t n = 1;
  for (int64_t d : *s)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return std::nullopt;
  return n;
}

std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank, bool orRank) {
  if (axis < -rank || axis > rank || (axis == rank && !orRank))
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

Type Type::withDType(DType t) const {
  Type r = *this;
  r.dtype_ = t;
  return r;
}

Type Type::withShape(std::vector<Dim> shape) const {
  Type r = *this;
  r.shape_ = std::move(shape);
  r.rankKnown_ = true;
  return r;
}

bool Type::operator==(const Type &o) const {
  if (kind_ != o.kind_)
    return false;
  switch (kind_) {
  case Kind::Tensor:
    return dtype_ == o.dtype_ && rankKnown_ == o.rankKnown_ && shape_ == o.shape_;
  case Kind::List:
    return elements_ == o.elements_ && listLength_ == o.listLength_;
  default:
    return elements_ == o.elements_;
  }
}

std::string Type::shapeStr() const {
  if (kind_ == Kind::State)
    return elements_.at(0).shapeStr();
  if (kind_ != Kind::Tensor)
    return "";
  std::string s = "(";
  if (!rankKnown_)
    return "(*, " + std::string(dtypeName(dtype_)) + ")";
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i)
      s += ", ";
    s += shape_[i].str();
  }
  // Python's tuple repr: "(3," for rank 1 (no space), "(1, 3" + ", " otherwise.
  if (shape_.size() == 1)
    s += ",";
  else if (shape_.size() > 1)
    s += ", ";
  s += dtypeName(dtype_);
  s += ")";
  return s;
}

std::string Type::kindStr() const {
  switch (kind_) {
  case Kind::Tensor:
    return isScalar() ? "Scalar" : "Tensor";
  case Kind::State:
    return "State";
  case Kind::List:
    return "List";
  case Kind::Tuple:
    return "Tuple";
  case Kind::Dict:
    return "Dict";
  }
  return "Tensor";
}

std::string Type::str() const {
  switch (kind_) {
  case Kind::Tensor:
  case Kind::State:
    return shapeStr() + "(" + kindStr() + ")";
  case Kind::List: {
    std::string len = listLength_.isStatic() ? std::to_string(listLength_.size) : "?";
    return "List[" + len + ", " + elements_.at(0).shapeStr() + "](List)";
  }
  case Kind::Tuple: {
    std::string s = "Tuple[";
    for (size_t i = 0; i < elements_.size(); ++i)
      s += (i ? ", " : "") + elements_[i].str();
    return s + "](Tuple)";
  }
  case Kind::Dict:
    return "Dict[" + elements_.at(0).str() + ", " + elements_.at(1).str() + "](Dict)";
  }
  return "";
}

} // namespace anefit
