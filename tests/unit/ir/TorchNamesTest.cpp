//===- TorchNamesTest.cpp - PyTorch node names in op names ----------------===//
#include "ir/TorchNames.h"

#include <gtest/gtest.h>

using namespace anefit;

TEST(TorchNames, NodeFromOpName) {
  EXPECT_EQ(torchNodeOf("aten_index_put_default_3"), "aten_index_put_default_3");
  EXPECT_EQ(torchNodeOf("aten_mul_tensor_7_cast_fp16"), "aten_mul_tensor_7");
  EXPECT_EQ(torchNodeOf("aten_mul_tensor_7_to_fp32_cast"), "aten_mul_tensor_7");
  EXPECT_EQ(torchNodeOf("aten_add_tensor_to_int32"), "aten_add_tensor");
  EXPECT_EQ(torchNodeOf("executorch_prim_x_cast_foo"), "executorch_prim_x_cast_foo")
      << "foo is no dtype, so it is part of the name";
  EXPECT_EQ(torchNodeOf("quantized_decomposed_dequantize_per_tensor_default"),
            "quantized_decomposed_dequantize_per_tensor_default");
  EXPECT_EQ(torchNodeOf("conv_0"), "");
  EXPECT_EQ(torchNodeOf("aten_"), "aten_");
}

TEST(TorchNames, AtenOpFromOpName) {
  EXPECT_EQ(atenOpOf("aten_index_put_default_3"), "aten.index_put.default");
  EXPECT_EQ(atenOpOf("aten_prod_dim_int_0"), "aten.prod.dim_int");
  EXPECT_EQ(atenOpOf("aten_mul_Tensor_7_cast_fp16"), "aten.mul.tensor");
  EXPECT_EQ(atenOpOf("aten_slice_copy_tensor_2_to_int32_cast"), "aten.slice_copy.tensor");
  EXPECT_EQ(atenOpOf("aten_relu_4"), "aten.relu.default");
  EXPECT_EQ(atenOpOf("executorch_foo_1"), "");
  EXPECT_EQ(atenOpOf("conv_0"), "");
}
