#pragma once
// y = x · Wᵀ for weights kept in their stored precision: each weight is
// dequantized to f32 on the fly, inside the kernel, exactly as its format
// defines it (never requantized); activations and accumulation stay f32.
//
// The accumulation order is part of the contract. For output (r, o):
//   acc[j] = 0 for the 16 lanes j;
//   for i = 0 .. in-1 in increasing order: acc[i % 16] = fma(W[o][i], x[r][i], acc[i % 16]);
//   fold the lanes as a fixed tree: for w = 8, 4, 2, 1: acc[j] += acc[j + w] (j < w);
//   y = acc[0] (+ bias[o], a plain f32 add).
// Every implementation (scalar, AVX2, AVX-512; see dispatch.h) computes that
// same expression, so a row's result is the same bits whether it is multiplied
// alone or inside a batch, at any thread count, on any x86-64 machine.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/dtype.h"

namespace strata {
class ThreadPool;
}

namespace strata::kernels {

// How the bytes of a row encode the weights, beyond `dtype`.
enum class Packing : uint8_t {
  // One `dtype` element per weight: F32, BF16, F16, F8_E4M3 (optional
  // block_scale), I8 (with `scales`, one per row); or GGUF blocks: Q8_0, Q4_0,
  // Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4 (ggml's block
  // layouts, ggml-common.h).
  Plain,
  // compressed-tensors "pack-quantized" int4 (Kimi-K2 `weight_packed`): dtype
  // I32, word k of a row holds weights 8k..8k+7, weight 8k+j in bits 4j..4j+3
  // stored as q+8; W = q · scale[i / scale_group] (`scales`, symmetric;
  // scale_group a multiple of 32: Kimi-K2 uses 32).
  Int4x8,
  // gpt-oss MXFP4 as Hugging Face ships it (`*_blocks` + `*_scales`): dtype
  // U8, 16 bytes per 32 weights, byte k holds weight 2k (low nibble) and 2k+1
  // (high nibble) as E2M1; `scales` holds one E8M0 byte (bias 127) per 32.
  Mxfp4Split,
  // A GGUF block type (Q8_0, MXFP4, Q4_K) rewritten by interleave() so that
  // the kernels read 16 rows at once: rows in groups of 16, each group
  // holding per block of columns the 16 rows' scales and then, column by
  // column, the 16 rows' quantized levels (layouts in kernel_abi.h). Same
  // size as the source. Its accumulation order differs from the one above:
  // for output (r, o), acc = 0 and for each 32-column block b in order:
  //   s = 0; for i in the block in order: s = fma(q[o][i], x[r][i], s)
  //     (q the exact level: Q8_0 int8, MXFP4 ggml's doubled E2M1 value,
  //     Q4_K 0..15);
  //   acc = fma(s, scale[o][b], acc)  (Q8_0 d; MXFP4 2^(e-128); Q4_K d·sc);
  //   Q4_K only: acc = fma(-(dmin·m)[o][b], xs, acc), xs = the block's x
  //     summed in order from 0;
  // y = acc (+ bias[o]). Every ISA computes exactly this.
  Interleaved16,
};

// A [out × in] row-major weight matrix as stored in a checkpoint.
struct WeightMatrix {
  DType dtype = DType::F32;
  int64_t out = 0;
  int64_t in = 0;
  const uint8_t* data = nullptr;
  Packing packing = Packing::Plain;
  // FP8 block scaling (DeepSeek-V3 "weight_scale_inv"): W[o][i] = q[o][i] *
  // scale[o / block_out][i / block_in]; null for unscaled formats.
  const float* block_scale = nullptr;
  int64_t block_out = 0;
  int64_t block_in = 0;
  // Rows of a row_slice() are addressed in the parent's scale grid.
  int64_t scale_row_offset = 0;
  // Scales kept in their stored type, `in / scale_group` of them per row,
  // rows contiguous: I8 (F32/BF16/F16, scale_group == in), Int4x8 (F32/BF16/
  // F16, scale_group 32·k), Mxfp4Split (F8_E8M0, scale_group 32).
  const uint8_t* scales = nullptr;
  DType scale_dtype = DType::F32;
  int64_t scale_group = 0;
  const float* bias = nullptr;  // optional, length `out`, f32

  bool valid() const { return data != nullptr; }
  // Bytes of one stored row of `data`.
  size_t row_bytes() const;
  // The first `rows` output rows starting at `row0`: used by attention to
  // address one head's slice of a fused projection.
  WeightMatrix row_slice(int64_t row0, int64_t rows) const;
};

// Whether a and b are stored alike (present or not, format, packing, shape):
// one kernel and one job layout serve both.
inline bool same_layout(const WeightMatrix& a, const WeightMatrix& b) {
  return a.valid() == b.valid() && a.dtype == b.dtype && a.packing == b.packing && a.out == b.out && a.in == b.in;
}

// Throws strata::Error naming the problem if the kernels cannot use `w`
// (unsupported type, a row that is not whole blocks, missing scales).
void check_supported(const WeightMatrix& w);

// Scratch a product needs beyond x and y. Kernels keep none of their own and
// never allocate: the caller plans it once (the backend's step workspace).
struct LinearScratch {
  // linear_sum_floats(w, n) values: per-block sums of x (Q4_K interleaved).
  std::span<float> sums;
  // linear_row_floats(w) values for each thread that runs part of the
  // product (the pool's size, or one without a pool): the row a kernel
  // dequantizes before its dots (the scalar kernels).
  std::span<float> rows;
};
size_t linear_sum_floats(const WeightMatrix& w, size_t n);
size_t linear_row_floats(const WeightMatrix& w);

// y[b][o] = Σ_i W[o][i] · x[b][i] (+ bias[o]) for b < n.
// x is [n × W.in], y is [n × W.out]; both f32, row-major. Throws
// strata::Error when `scratch` is smaller than the sizes above.
void linear(const WeightMatrix& w, const float* x, size_t n, float* y, ThreadPool* pool, LinearScratch scratch);
// The same with scratch of its own, allocated per call: for tests and tools,
// not for a forward pass.
void linear(const WeightMatrix& w, const float* x, size_t n, float* y, ThreadPool* pool);

// One product of a linear_batch(): y = x · Wᵀ over n rows, with `sums`
// holding linear_sum_floats(*w, n) values (its own: no two jobs of a batch
// share them unless they read the same x).
struct LinearJob {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;
  size_t n = 0;
  float* y = nullptr;
  std::span<float> sums;
};
// linear() for every job, all over the pool at once: the jobs' groups of
// rows (those linear() splits one product into) make one list the threads
// share, with one hand-off for the batch. Many small products (a prompt's
// experts) then keep every thread busy, where one after another each would
// leave threads idle at its end and wait for the slowest. Each job's bits are
// linear()'s. `rows`: linear_row_floats() of the widest job for each pool
// thread (one without a pool). Jobs' outputs must not overlap each other or
// any job's input.
void linear_batch(std::span<const LinearJob> jobs, ThreadPool* pool, std::span<float> rows);

// y[i] = Σ_o x[o] · W[o][i] for one vector x of length W.out (no bias):
// the transposed product MLA uses to absorb kv_b_proj into the query. Each
// y[i] accumulates fma(x[o], W[o][i], ·) over o in increasing order. `row`
// holds W.in values (scratch).
void linear_transposed(const WeightMatrix& w, const float* x, float* y, std::span<float> row);
// The same with a row of its own (tests and tools).
void linear_transposed(const WeightMatrix& w, const float* x, float* y);

// Dequantizes row `o` of W into `dst` (length W.in).
void dequantize_row(const WeightMatrix& w, int64_t o, float* dst);

// Dot product in the order described above (16 fused lanes, fixed tree).
float dot(const float* a, const float* b, size_t n);

// out[j] = dot(a, b[j], n) for j < count, bit for bit. Several dots run side
// by side (one accumulator chain each), which hides the latency that a single
// chain of fused multiply-adds waits on: attention scores one query against
// many cached keys this way.
void dots(const float* a, const float* const* b, size_t count, size_t n, float* out);

// y[i] = fma(a, x[i], y[i]) for i < n.
void axpy(float a, const float* x, float* y, size_t n);

// axpy(w[j], x[j], y, n) for j = 0, 1, ..., count - 1, bit for bit: each y[i]
// is the same chain of fused multiply-adds in the same order, but kept in a
// register across the j (attention's weighted sum of many cached rows).
void axpys(const float* w, const float* const* x, size_t count, float* y, size_t n);

// dots(a[r], b, count, n, out + r * ldo) for r < rows, bit for bit. On
// AVX-512 the rows share each b[j]'s loads, four at a time (several queries
// of a prompt against the same cached keys), where the plain dots load every
// key once per query.
void dots_rows(const float* const* a, size_t rows, const float* const* b, size_t count, size_t n, float* out,
               size_t ldo);

// axpys(w[r], x, count, y[r], n) for r < rows, bit for bit, the rows sharing
// each x[j]'s loads as dots_rows does.
void axpys_rows(const float* const* w, size_t rows, const float* const* x, size_t count, float* const* y, size_t n);

}  // namespace strata::kernels
