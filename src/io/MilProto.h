//===- MilProto.h - Model protobuf <-> IR ------------------------*- C++ -*-===//
//
// Conversion between the serialized Core ML Model protobuf (proto/Model.proto,
// formats.md §2-3) and anefit's Model/Program IR. Only ML Program models are
// read; other model kinds are recognised by their field number and refused.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace anefit {

class WeightWriter;

/// Parses a serialized Model protobuf into the IR. `fileName` is used in messages. `openWeights` is
/// called once per distinct BlobFileValue.fileName; it may return null (weights not opened).
std::unique_ptr<Model> parseModelProto(std::span<const uint8_t> bytes, const std::string &fileName,
                                       const WeightOpener &openWeights);

/// Serializes `model` deterministically. Every blob-backed constant (Constant::Kind::Blob) has its
/// bytes appended to `weights` (blob by blob, reading from its source store) and is referenced as
/// "@model_path/weights/weight.bin" at the returned offset. If `weights` is null and the model has
/// blob constants, throw InputError ("ML Programs with weights must be saved as .mlpackage").
std::string serializeModelProto(const Model &model, WeightWriter *weights);

/// The weight-file name written for every blob constant.
inline constexpr const char *kDefaultWeightFileName = "@model_path/weights/weight.bin";

} // namespace anefit
