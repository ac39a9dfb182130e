#pragma once
// y = x · Wᵀ for weights kept in their stored precision. Every output element
// is one dot product evaluated in a fixed order, so a row's result is the same
// bits whether it is multiplied alone or inside a batch, at any thread count.
#include <cstddef>
#include <cstdint>

#include "formats/dtype.h"

namespace strata {
class ThreadPool;
}

namespace strata::kernels {

// A [out × in] row-major weight matrix as stored in a checkpoint.
struct WeightMatrix {
  DType dtype = DType::F32;
  int64_t out = 0;
  int64_t in = 0;
  const uint8_t* data = nullptr;
  // FP8 block scaling (DeepSeek-V3 "weight_scale_inv"): W[o][i] = q[o][i] *
  // scale[o / block_out][i / block_in]; null for unscaled formats.
  const float* block_scale = nullptr;
  int64_t block_out = 0;
  int64_t block_in = 0;
  // Rows of a row_slice() are addressed in the parent's scale grid.
  int64_t scale_row_offset = 0;
  const float* bias = nullptr;  // optional, length `out`, f32

  bool valid() const { return data != nullptr; }
  // The first `rows` output rows starting at `row0`: used by attention to
  // address one head's slice of a fused projection.
  WeightMatrix row_slice(int64_t row0, int64_t rows) const;
};

// y[b][o] = Σ_i W[o][i] · x[b][i] (+ bias[o]) for b < n.
// x is [n × W.in], y is [n × W.out]; both f32, row-major.
void linear(const WeightMatrix& w, const float* x, size_t n, float* y, ThreadPool* pool);

// y[i] = Σ_o x[o] · W[o][i] for one vector x of length W.out (no bias):
// the transposed product MLA uses to absorb kv_b_proj into the query.
void linear_transposed(const WeightMatrix& w, const float* x, float* y);

// Dequantizes row `o` of W into `dst` (length W.in).
void dequantize_row(const WeightMatrix& w, int64_t o, float* dst);

// Dot product with a fixed 16-lane accumulation order.
float dot(const float* a, const float* b, size_t n);

}  // namespace strata::kernels
