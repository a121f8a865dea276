//===- OpRegistryTest.cpp - The op table and its lookups ------------------===//
#include "ops/OpRegistry.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

using namespace anefit;

namespace {

TEST(OpRegistry, RowsPerOpsetMatchTheReference) {
  // Counts of the per-opset op list: ops introduced or changed in each opset,
  // plus the coreml dialect op and the proto-only write_state (opset 0).
  std::map<int, int> rows;
  for (const OpDef &def : allOps())
    ++rows[def.opset];
  EXPECT_EQ(rows[15], 152);
  EXPECT_EQ(rows[16], 14);
  EXPECT_EQ(rows[17], 51);
  EXPECT_EQ(rows[18], 10);
  EXPECT_EQ(rows[0], 2);
  EXPECT_EQ(rows.size(), 5u);
}

TEST(OpRegistry, RowsAreWellFormed) {
  std::set<std::pair<std::string_view, int>> seen;
  for (const OpDef &def : allOps()) {
    SCOPED_TRACE(std::string(def.name) + "@" + std::to_string(def.opset));
    EXPECT_TRUE(seen.insert({def.name, def.opset}).second) << "duplicate row";
    EXPECT_FALSE(def.params.empty());
    std::set<std::string_view> names;
    for (const ParamSpec &p : def.params) {
      EXPECT_TRUE(names.insert(p.name).second) << "duplicate parameter " << p.name;
      if (!p.domain.empty()) {
        EXPECT_FALSE(p.dtypes.empty()) << p.name;
      }
      // Every dtype named in the table is one we know.
      std::string_view rest = p.dtypes;
      while (!rest.empty()) {
        size_t bar = rest.find('|');
        std::string_view name = rest.substr(0, bar);
        EXPECT_TRUE(name == "string" || dtypeFromName(name)) << name;
        if (bar == std::string_view::npos)
          break;
        rest.remove_prefix(bar + 1);
      }
      if (!p.defaultValue.empty()) {
        EXPECT_TRUE(p.optional) << p.name << " has a default but is required";
      }
    }
  }
}

TEST(OpRegistry, FindOpPicksNewestRowNotAfterVersion) {
  const OpDef *conv15 = findOp("conv", 15);
  ASSERT_NE(conv15, nullptr);
  EXPECT_EQ(conv15->opset, 15);
  EXPECT_EQ(findOp("conv", 16), conv15);
  const OpDef *conv17 = findOp("conv", 18);
  ASSERT_NE(conv17, nullptr);
  EXPECT_EQ(conv17->opset, 17);
  // iOS17 relaxed conv.bias from const-only to any value.
  EXPECT_TRUE(conv15->param("bias")->constOnly);
  EXPECT_FALSE(conv17->param("bias")->constOnly);
  EXPECT_EQ(conv17->param("weight")->domain, "U");

  EXPECT_EQ(findOp("read_state", 17), nullptr);
  ASSERT_NE(findOp("read_state", 18), nullptr);
  EXPECT_EQ(findOp("gather", 16)->opset, 16);
  EXPECT_NE(findOp("gather", 16)->param("batch_dims"), nullptr);
  EXPECT_EQ(findOp("gather", 15)->param("batch_dims"), nullptr);
  EXPECT_EQ(findOp("no_such_op", 18), nullptr);
  EXPECT_EQ(findOp("coreml_update_state", 18)->opset, 0);
  EXPECT_EQ(findOp("write_state", 18)->params.size(), 2u);
}

TEST(OpRegistry, ParamsCarryFlagsDomainsAndDefaults) {
  const OpDef *concat = findOp("concat", 15);
  ASSERT_NE(concat, nullptr);
  EXPECT_TRUE(concat->param("values")->variadic);
  EXPECT_TRUE(concat->param("axis")->constOnly);
  EXPECT_FALSE(concat->param("axis")->optional);
  EXPECT_TRUE(concat->param("interleave")->optional);
  EXPECT_EQ(concat->param("interleave")->defaultValue, "False");

  const OpDef *conv = findOp("conv", 15);
  EXPECT_EQ(conv->param("pad_type")->defaultValue, "valid");
  EXPECT_EQ(conv->param("pad_type")->dtypes, "string");
  EXPECT_EQ(conv->param("x")->dtypes, "fp16|fp32");
  EXPECT_TRUE(conv->param("x")->allows(DType::F16));
  EXPECT_FALSE(conv->param("x")->allows(DType::I32));
  EXPECT_EQ(conv->inferName, "Conv");
  EXPECT_NE(conv->infer, nullptr);

  // avg_pool inherits the pooling parameters after its own.
  const OpDef *avg = findOp("avg_pool", 15);
  ASSERT_NE(avg, nullptr);
  EXPECT_NE(avg->param("kernel_sizes"), nullptr);
  EXPECT_NE(avg->param("exclude_padding_from_average"), nullptr);

  EXPECT_EQ(findOp("read_state", 18)->param("input")->kind, ParamKind::State);
  EXPECT_EQ(findOp("const", 15)->param("val")->kind, ParamKind::Attribute);
  EXPECT_EQ(findOp("crop_resize", 15)->infer, nullptr);
}

TEST(OpRegistry, OpsetStrings) {
  EXPECT_EQ(iosVersionOfOpset("CoreML5"), 15);
  EXPECT_EQ(iosVersionOfOpset("CoreML6"), 16);
  EXPECT_EQ(iosVersionOfOpset("CoreML7"), 17);
  EXPECT_EQ(iosVersionOfOpset("CoreML8"), 18);
  EXPECT_EQ(iosVersionOfOpset("CoreML9"), 18);
  EXPECT_EQ(iosVersionOfOpset("CoreML4"), 0);
  EXPECT_EQ(iosVersionOfOpset("ios18"), 0);
  EXPECT_EQ(iosVersionOfOpset(""), 0);
}

TEST(OpRegistry, RulesCoverTheOpsModelsUse) {
  for (const char *name : {"const",
                           "constexpr_affine_dequantize",
                           "constexpr_lut_to_dense",
                           "constexpr_sparse_to_dense",
                           "constexpr_blockwise_shift_scale",
                           "constexpr_cast",
                           "constexpr_lut_to_sparse",
                           "constexpr_sparse_blockwise_shift_scale",
                           "linear",
                           "matmul",
                           "conv",
                           "conv_transpose",
                           "add",
                           "mul",
                           "equal",
                           "logical_or",
                           "relu",
                           "silu",
                           "gelu",
                           "sigmoid",
                           "tanh",
                           "softmax",
                           "layer_norm",
                           "batch_norm",
                           "instance_norm",
                           "l2_norm",
                           "reduce_mean",
                           "reduce_sum",
                           "reshape",
                           "transpose",
                           "expand_dims",
                           "squeeze",
                           "concat",
                           "split",
                           "stack",
                           "slice_by_index",
                           "slice_by_size",
                           "slice_update",
                           "gather",
                           "gather_along_axis",
                           "gather_nd",
                           "scatter",
                           "scatter_nd",
                           "scatter_along_axis",
                           "cast",
                           "pad",
                           "tile",
                           "select",
                           "fill",
                           "fill_like",
                           "range_1d",
                           "cumsum",
                           "topk",
                           "argsort",
                           "reduce_argmax",
                           "reduce_argmin",
                           "band_part",
                           "scaled_dot_product_attention",
                           "read_state",
                           "write_state",
                           "coreml_update_state",
                           "avg_pool",
                           "max_pool",
                           "l2_pool",
                           "upsample_nearest_neighbor",
                           "upsample_bilinear",
                           "resize_bilinear",
                           "resize",
                           "shape",
                           "identity",
                           "clip",
                           "einsum"}) {
    const OpDef *def = findOp(name, 18);
    ASSERT_NE(def, nullptr) << name;
    EXPECT_NE(def->infer, nullptr) << name;
  }
}

} // namespace

#include "ops/OpDocs.h"

namespace {

// docs/ops.md is this text: scripts/generated_docs.sh writes it and checks the
// file (the test `docs`).
TEST(OpRegistry, MarkdownListsEveryOp) {
  std::string md = opsMarkdown();
  for (const OpDef &def : allOps())
    EXPECT_NE(md.find("| `" + std::string(def.name) + "` |"), std::string::npos) << def.name;
}

} // namespace
