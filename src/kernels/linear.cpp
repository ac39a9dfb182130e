#include "kernels/linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "util/thread_pool.h"

namespace strata::kernels {

namespace {

// One accumulation lane per index mod 16, reduced as a fixed binary tree: the
// order never depends on n's split across threads or on batch size.
constexpr size_t kLanes = 16;

inline float reduce_lanes(float* acc) {
  for (size_t w = kLanes / 2; w > 0; w /= 2)
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

float dot(const float* a, const float* b, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  for (size_t j = 0; i + j < n; ++j) acc[j] += a[i + j] * b[i + j];
  return reduce_lanes(acc);
}

WeightMatrix WeightMatrix::row_slice(int64_t row0, int64_t rows) const {
  WeightMatrix s = *this;
  s.out = rows;
  s.data = data + static_cast<size_t>(row0) * static_cast<size_t>(in) * dtype_size(dtype);
  if (bias) s.bias = bias + row0;
  if (block_scale) {
    // A head's slice need not start on a scale-block boundary, so keep the
    // absolute row offset and resolve scales against the parent's grid.
    s.block_scale = block_scale;
    s.scale_row_offset = scale_row_offset + row0;
  }
  return s;
}

void dequantize_row(const WeightMatrix& w, int64_t o, float* dst) {
  const size_t in = static_cast<size_t>(w.in);
  const uint8_t* row = w.data + static_cast<size_t>(o) * in * dtype_size(w.dtype);
  switch (w.dtype) {
    // Checkpoint data need not be aligned to its element size (safetensors
    // places tensors right after a header of any length): load via memcpy.
    case DType::F32:
      std::memcpy(dst, row, in * sizeof(float));
      break;
    case DType::BF16:
      for (size_t i = 0; i < in; ++i) dst[i] = bf16_to_f32(load_u16(row + 2 * i));
      break;
    case DType::F16:
      for (size_t i = 0; i < in; ++i) dst[i] = f16_to_f32(load_u16(row + 2 * i));
      break;
    case DType::F8_E4M3: {
      for (size_t i = 0; i < in; ++i) dst[i] = fp8_e4m3_to_f32(row[i]);
      if (w.block_scale) {
        const int64_t ro = (w.scale_row_offset + o) / w.block_out;
        const int64_t nbi = (w.in + w.block_in - 1) / w.block_in;
        const float* srow = w.block_scale + ro * nbi;
        for (size_t i = 0; i < in; ++i) dst[i] *= srow[static_cast<int64_t>(i) / w.block_in];
      }
      break;
    }
    default:
      std::fill_n(dst, in, 0.0f);
      break;
  }
}

void linear(const WeightMatrix& w, const float* x, size_t n, float* y, ThreadPool* pool) {
  const size_t in = static_cast<size_t>(w.in), out = static_cast<size_t>(w.out);
  auto body = [&](size_t o0, size_t o1) {
    thread_local std::vector<float> row;
    row.resize(in);
    for (size_t o = o0; o < o1; ++o) {
      dequantize_row(w, static_cast<int64_t>(o), row.data());
      const float b = w.bias ? w.bias[o] : 0.0f;
      for (size_t r = 0; r < n; ++r) {
        float v = dot(row.data(), x + r * in, in);
        y[r * out + o] = w.bias ? v + b : v;
      }
    }
  };
  // Each output row costs `in · n` multiply-adds; keep chunks big enough that
  // scheduling stays cheap relative to the work.
  size_t min_chunk = std::max<size_t>(1, 16384 / std::max<size_t>(1, in * n));
  if (pool)
    pool->parallel_for(out, body, min_chunk);
  else
    body(0, out);
}

void linear_transposed(const WeightMatrix& w, const float* x, float* y) {
  const size_t in = static_cast<size_t>(w.in);
  std::vector<float> row(in);
  std::fill_n(y, in, 0.0f);
  for (int64_t o = 0; o < w.out; ++o) {
    dequantize_row(w, o, row.data());
    const float xo = x[o];
    for (size_t i = 0; i < in; ++i) y[i] += xo * row[i];
  }
}

}  // namespace strata::kernels
