#pragma once
// Converting weights to a smaller format (pack --trunk int8, --experts
// q8|int4|mxfp4). Each target is a format the kernels already read, so a
// converted model runs through the same code as a shipped one; quality is
// judged with `strata compare`. Rounding is to nearest (ties away from zero,
// as ggml's reference quantizers do).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/linear.h"

namespace strata::kernels {

enum class QuantTarget {
  Int8Row,  // I8, one f32 scale per row (amax / 127)
  Q8_0,     // GGUF Q8_0 blocks of 32 (f16 scale amax / 127)
  Int4,     // compressed-tensors int4, groups of 32, bf16 scales (amax / 7)
  Mxfp4,    // GGUF MXFP4 blocks of 32 (E8M0 scale, E2M1 values)
};

// A matrix that owns its converted bytes; `matrix` points into them.
struct OwnedMatrix {
  WeightMatrix matrix;
  std::vector<uint8_t> data, scales;
  std::vector<float> bias;
};

// Decodes every row of `w` (any supported format) and re-encodes it as
// `target`; the bias, if any, is kept. Throws strata::Error when `w.in` is
// not a multiple of 32 for the block targets.
std::unique_ptr<OwnedMatrix> quantize_matrix(const WeightMatrix& w, QuantTarget target);

// One row of n values; `out` holds the target's row bytes (and `scales` its
// scale entries for Int8Row: 1 float, Int4: n/32 bf16).
void quantize_row_q8_0(const float* x, int64_t n, uint8_t* out);
void quantize_row_mxfp4(const float* x, int64_t n, uint8_t* out);
void quantize_row_int8(const float* x, int64_t n, int8_t* out, float* scale);
void quantize_row_int4(const float* x, int64_t n, uint32_t* packed, uint16_t* bf16_scales);

}  // namespace strata::kernels
