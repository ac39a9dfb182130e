#pragma once
// How a weight matrix reaches the shaders: its format as the number the
// shaders are compiled for (weights.glsl's FMT_*), and WeightRef, the struct
// that names its arrays by device address (the same layout as weights.glsl's
// WeightRef, inside an op's push constants).
#include <cstdint>
#include <string>

#include "kernels/linear.h"

namespace strata::vk {

enum class WeightFormat : uint32_t {
  F32, BF16, F16, F8_E4M3, I8_ROW, I4_GROUP, MXFP4_SPLIT, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
  Q6_K, MXFP4,
  // Packing::Interleaved16 (products only: linear_il.comp).
  IL_Q8_0, IL_MXFP4, IL_Q4_K,
};

inline bool is_interleaved(WeightFormat f) { return f >= WeightFormat::IL_Q8_0; }
// The shaders' name for it ("q8_0"): shader "linear_q8_0" multiplies by it.
const char* format_name(WeightFormat f);
// Throws strata::Error when the shaders cannot read `w` (the interleaved
// when it is too large to address (past 4 GiB).
WeightFormat weight_format(const kernels::WeightMatrix& w);

struct WeightRef {
  uint64_t data = 0, scales = 0, block_scale = 0, bias = 0;
  uint32_t out_rows = 0, in_cols = 0, row_bytes = 0, scale_row_bytes = 0;
  uint32_t scale_type = 0, group = 0;
  uint32_t block_out = 1, block_in = 1, block_cols = 0, row_offset = 0;
  uint32_t has_bias = 0, has_block_scale = 0;
};
static_assert(sizeof(WeightRef) == 80);

// The host bytes each array of `w` spans (0 where it has none): what a
// device copy of it must hold.
struct WeightSpans {
  uint64_t data = 0, scales = 0, block_scale = 0, bias = 0;
};
WeightSpans weight_spans(const kernels::WeightMatrix& w);

// WeightRef of `w` whose arrays were copied to the given device addresses
// (0 for the arrays it has none of).
WeightRef weight_ref(const kernels::WeightMatrix& w, uint64_t data, uint64_t scales, uint64_t block_scale,
                     uint64_t bias);

}  // namespace strata::vk
