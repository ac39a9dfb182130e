#include "kernels/linear.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/dispatch_internal.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata::kernels {

namespace {

using detail::Fmt;
using detail::MatDesc;
using detail::ScaleType;

[[noreturn]] void unsupported(const WeightMatrix& w, const std::string& why) {
  throw Error(std::string("weight matrix [") + std::to_string(w.out) + ", " + std::to_string(w.in) + "] of type " +
              dtype_name(w.dtype) + ": " + why);
}

size_t scale_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16:
    case DType::F16: return 2;
    case DType::F8_E8M0:
    case DType::U8: return 1;
    default: return 0;
  }
}

ScaleType float_scale_type(const WeightMatrix& w) {
  switch (w.scale_dtype) {
    case DType::F32: return ScaleType::F32;
    case DType::BF16: return ScaleType::BF16;
    case DType::F16: return ScaleType::F16;
    default: unsupported(w, std::string("scales of type ") + dtype_name(w.scale_dtype) + " (expected F32, BF16 or F16)");
  }
}

MatDesc resolve(const WeightMatrix& w) {
  MatDesc d;
  d.out = w.out;
  d.in = w.in;
  d.data = w.data;
  d.bias = w.bias;
  d.row_bytes = w.row_bytes();
  if (!w.data && w.out > 0) unsupported(w, "no data");
  if (w.out < 0 || w.in < 0) unsupported(w, "negative dimensions");
  // Fields a format does not use must be absent: a matrix read from a file
  // (a pack manifest) may carry any of them, and sizes are computed from
  // whichever are set.
  const bool fp8 = w.packing == Packing::Plain && w.dtype == DType::F8_E4M3;
  if (w.block_scale && !fp8) unsupported(w, "a block scale goes with FP8 weights only");
  const bool scaled = (w.packing == Packing::Plain && w.dtype == DType::I8) || w.packing == Packing::Int4x8 ||
                      w.packing == Packing::Mxfp4Split;
  if (w.scales && !scaled) unsupported(w, "scales go with int8, packed int4 or MXFP4 weights only");
  switch (w.packing) {
    case Packing::Plain:
      switch (w.dtype) {
        case DType::F32: d.fmt = Fmt::F32; break;
        case DType::BF16: d.fmt = Fmt::BF16; break;
        case DType::F16: d.fmt = Fmt::F16; break;
        case DType::F8_E4M3:
          d.fmt = Fmt::F8_E4M3;
          if (w.block_scale) {
            if (w.block_out <= 0 || w.block_in <= 0) unsupported(w, "FP8 block scale without a block size");
            d.block_scale = w.block_scale;
            d.block_out = w.block_out;
            d.block_in = w.block_in;
            d.block_cols = (w.in + w.block_in - 1) / w.block_in;
            d.row_offset = w.scale_row_offset;
          }
          break;
        case DType::I8:
          d.fmt = Fmt::I8_ROW;
          if (!w.scales || w.scale_group <= 0 || w.scale_group != w.in)
            unsupported(w, "int8 weights need one scale per row");
          d.scale_type = float_scale_type(w);
          break;
        case DType::Q8_0: d.fmt = Fmt::Q8_0; break;
        case DType::Q4_0: d.fmt = Fmt::Q4_0; break;
        case DType::Q4_1: d.fmt = Fmt::Q4_1; break;
        case DType::Q5_0: d.fmt = Fmt::Q5_0; break;
        case DType::Q5_1: d.fmt = Fmt::Q5_1; break;
        case DType::Q2_K: d.fmt = Fmt::Q2_K; break;
        case DType::Q3_K: d.fmt = Fmt::Q3_K; break;
        case DType::Q4_K: d.fmt = Fmt::Q4_K; break;
        case DType::Q5_K: d.fmt = Fmt::Q5_K; break;
        case DType::Q6_K: d.fmt = Fmt::Q6_K; break;
        case DType::MXFP4: d.fmt = Fmt::MXFP4; break;
        default: unsupported(w, "no kernel for this type");
      }
      if (dtype_is_block(w.dtype) && w.in % static_cast<int64_t>(dtype_block_elems(w.dtype)) != 0)
        unsupported(w, "rows are not a whole number of " + std::to_string(dtype_block_elems(w.dtype)) + "-value blocks");
      break;
    case Packing::Int4x8:
      if (w.dtype != DType::I32) unsupported(w, "packed int4 must be stored as I32 words");
      if (!w.scales || w.scale_group <= 0 || w.scale_group % 32 != 0 || w.in % w.scale_group != 0)
        unsupported(w, "packed int4 needs one scale per group of a multiple of 32 values that divides the row");
      d.fmt = Fmt::I4_GROUP;
      d.group = w.scale_group;
      d.scale_type = float_scale_type(w);
      break;
    case Packing::Mxfp4Split:
      if (w.dtype != DType::U8) unsupported(w, "MXFP4 blocks must be stored as U8");
      if (w.in % 32 != 0) unsupported(w, "MXFP4 rows must be a multiple of 32 values");
      if (!w.scales || w.scale_group != 32 || scale_size(w.scale_dtype) != 1)
        unsupported(w, "MXFP4 needs one E8M0 scale byte per 32 values");
      d.fmt = Fmt::MXFP4_SPLIT;
      break;
    case Packing::Interleaved16:
      switch (w.dtype) {
        case DType::Q8_0: d.fmt = Fmt::IL_Q8_0; break;
        case DType::MXFP4: d.fmt = Fmt::IL_MXFP4; break;
        case DType::Q4_K: d.fmt = Fmt::IL_Q4_K; break;
        default: unsupported(w, "no interleaved layout for this type");
      }
      if (w.out % detail::kIlRows != 0 || w.in % static_cast<int64_t>(dtype_block_elems(w.dtype)) != 0)
        unsupported(w, "an interleaved matrix has whole groups of 16 rows and whole blocks");
      break;
  }
  if (w.scales) {
    d.scales = w.scales;
    d.scale_row_bytes = static_cast<size_t>(w.in / w.scale_group) * scale_size(w.scale_dtype);
  }
  return d;
}

}  // namespace

size_t WeightMatrix::row_bytes() const {
  switch (packing) {
    case Packing::Int4x8:
    case Packing::Mxfp4Split: return static_cast<size_t>(in / 2);
    case Packing::Plain:
    case Packing::Interleaved16: break;
  }
  if (dtype_is_block(dtype)) return dtype_row_bytes(dtype, static_cast<uint64_t>(in)).value_or(0);
  return static_cast<size_t>(in) * dtype_size(dtype);
}

WeightMatrix WeightMatrix::row_slice(int64_t row0, int64_t rows) const {
  if (packing == Packing::Interleaved16 && (row0 % detail::kIlRows != 0 || rows % detail::kIlRows != 0))
    throw Error("internal: a slice of an interleaved matrix must cover whole groups of 16 rows");
  WeightMatrix s = *this;
  s.out = rows;
  s.data = data + static_cast<size_t>(row0) * row_bytes();
  if (bias) s.bias = bias + row0;
  if (scales && scale_group > 0)
    s.scales = scales + static_cast<size_t>(row0) * static_cast<size_t>(in / scale_group) * scale_size(scale_dtype);
  if (block_scale) {
    // A head's slice need not start on a scale-block boundary, so keep the
    // absolute row offset and resolve scales against the parent's grid.
    s.block_scale = block_scale;
    s.scale_row_offset = scale_row_offset + row0;
  }
  return s;
}

void check_supported(const WeightMatrix& w) { (void)resolve(w); }

void dequantize_row(const WeightMatrix& w, int64_t o, float* dst) {
  detail::active_table().dequant_row(resolve(w), o, dst);
}

float dot(const float* a, const float* b, size_t n) { return detail::active_table().dot(a, b, n); }

void dots(const float* a, const float* const* b, size_t count, size_t n, float* out) {
  detail::active_table().dots(a, b, count, n, out);
}

void axpy(float a, const float* x, float* y, size_t n) { detail::active_table().axpy(a, x, y, n); }

void axpys(const float* w, const float* const* x, size_t count, float* y, size_t n) {
  detail::active_table().axpys(w, x, count, y, n);
}

void dots_rows(const float* const* a, size_t rows, const float* const* b, size_t count, size_t n, float* out,
               size_t ldo) {
  detail::active_table().dots_rows(a, rows, b, count, n, out, ldo);
}

void axpys_rows(const float* const* w, size_t rows, const float* const* x, size_t count, float* const* y, size_t n) {
  detail::active_table().axpys_rows(w, rows, x, count, y, n);
}

size_t linear_sum_floats(const WeightMatrix& w, size_t n) {
  return w.packing == Packing::Interleaved16 && w.dtype == DType::Q4_K ? n * static_cast<size_t>(w.in / 32) : 0;
}

size_t linear_row_floats(const WeightMatrix& w) {
  return detail::active_table().needs_row ? static_cast<size_t>(std::max<int64_t>(w.in, 0)) : 0;
}

namespace {

// Rows of W a thread takes at a time: whole row tiles (interleaved: 4 tiles
// of 16 rows, the widest n = 1 tile; remainders of a chunk run narrower,
// slower tiles). Which thread computes a row never changes its bits.
size_t row_group(const WeightMatrix& w) { return w.packing == Packing::Interleaved16 ? 4 * detail::kIlRows : 8; }

size_t row_groups(const LinearJob& j) {
  return j.n == 0 || j.w->out <= 0 ? 0 : (static_cast<size_t>(j.w->out) + row_group(*j.w) - 1) / row_group(*j.w);
}

// The product's description, pointing at its block sums when its format
// needs them.
MatDesc describe(const LinearJob& j) {
  MatDesc d = resolve(*j.w);
  if (linear_sum_floats(*j.w, j.n)) d.block_sums = j.sums.data();
  return d;
}

// Checks the matrix and the scratch, and fills the block sums (once per
// product, in the order linear.h gives) when its format needs them.
void prepare(const LinearJob& j) {
  (void)resolve(*j.w);
  const size_t sums = linear_sum_floats(*j.w, j.n);
  if (j.sums.size() < sums)
    throw Error("internal: a product of [" + std::to_string(j.w->out) + ", " + std::to_string(j.w->in) + "] over " +
                std::to_string(j.n) + " rows was given less scratch than it needs");
  for (size_t i = 0; i < sums; ++i) {
    float s = 0.0f;
    for (size_t k = 0; k < 32; ++k) s += j.x[32 * i + k];
    j.sums[i] = s;
  }
}

}  // namespace

void linear(const WeightMatrix& w, const float* x, size_t n, float* y, ThreadPool* pool, LinearScratch scratch) {
  const LinearJob job{&w, x, n, y, scratch.sums};
  linear_batch({&job, 1}, pool, scratch.rows);
}

void linear_batch(std::span<const LinearJob> jobs, ThreadPool* pool, std::span<float> rows) {
  const detail::KernelTable& t = detail::active_table();
  const size_t threads = pool ? static_cast<size_t>(pool->size()) : 1;
  size_t groups = 0, row = 0;
  double work = 0;  // multiply-adds
  for (const LinearJob& j : jobs) {
    if (j.n == 0 || j.w->out <= 0) continue;
    prepare(j);
    row = std::max(row, linear_row_floats(*j.w));
    const size_t g = row_groups(j);
    groups += g;
    work += static_cast<double>(g * row_group(*j.w)) * static_cast<double>(std::max<int64_t>(j.w->in, 1)) *
            static_cast<double>(j.n);
  }
  if (groups == 0) return;
  if (rows.size() < row * threads)
    throw Error("internal: a batch of products was given less row scratch than its threads need");
  // The work, captured by one pointer so that the pool's std::function holds
  // it without allocating. A range of the batch's groups runs job by job.
  struct Work {
    const detail::KernelTable* t;
    std::span<const LinearJob> jobs;
    size_t row;
    float* rows;
    void operator()(int worker, size_t g0, size_t g1) const {
      size_t first = 0;  // the batch's index of this job's first group
      for (const LinearJob& j : jobs) {
        const size_t g = row_groups(j);
        if (g != 0 && g0 < first + g && g1 > first) {
          MatDesc mine = describe(j);
          if (row) mine.row = rows + static_cast<size_t>(worker) * row;
          const size_t group = row_group(*j.w), out = static_cast<size_t>(j.w->out);
          const size_t a = std::max(g0, first) - first, b = std::min(g1, first + g) - first;
          t->matmul(mine, j.x, j.n, j.y, out, static_cast<int64_t>(a * group), static_cast<int64_t>(std::min(b * group, out)));
        }
        first += g;
        if (first >= g1) break;
      }
    }
  } run{&t, jobs, row, rows.data()};
  // Keep chunks big enough that scheduling stays cheap relative to the work.
  const size_t min_chunk =
      std::max<size_t>(1, static_cast<size_t>(65536.0 * static_cast<double>(groups) / std::max(work, 1.0)));
  if (pool)
    pool->parallel_for_indexed(groups, [w = &run](int worker, size_t g0, size_t g1) { (*w)(worker, g0, g1); },
                               min_chunk);
  else
    run(0, 0, groups);
}

void linear(const WeightMatrix& w, const float* x, size_t n, float* y, ThreadPool* pool) {
  const size_t threads = pool ? static_cast<size_t>(pool->size()) : 1;
  std::vector<float> sums(linear_sum_floats(w, n)), rows(linear_row_floats(w) * threads);
  linear(w, x, n, y, pool, LinearScratch{sums, rows});
}

void linear_transposed(const WeightMatrix& w, const float* x, float* y, std::span<float> row) {
  const detail::KernelTable& t = detail::active_table();
  const MatDesc d = resolve(w);
  const size_t in = static_cast<size_t>(w.in);
  if (row.size() < in) throw Error("internal: linear_transposed() was given less scratch than a row");
  std::fill_n(y, in, 0.0f);
  for (int64_t o = 0; o < w.out; ++o) {
    t.dequant_row(d, o, row.data());
    t.axpy(x[o], row.data(), y, in);
  }
}

void linear_transposed(const WeightMatrix& w, const float* x, float* y) {
  std::vector<float> row(static_cast<size_t>(std::max<int64_t>(w.in, 0)));
  linear_transposed(w, x, y, row);
}

}  // namespace strata::kernels
