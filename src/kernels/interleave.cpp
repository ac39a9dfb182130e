#include "kernels/interleave.h"

#include <emmintrin.h>

#include <cstring>
#include <vector>

#include "kernels/kernel_abi.h"
#include "util/error.h"

namespace strata::kernels {

namespace {

constexpr int64_t kRows = detail::kIlRows;

// 16 byte vectors (row r = in[r]) transposed: out[c] holds byte c of every
// row. SSE2 is part of x86-64, so this needs no run-time dispatch.
void transpose16x16(const __m128i in[16], __m128i out[16]) {
  __m128i t[16], u[16], v[8], w[8];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm_unpacklo_epi8(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi8(in[2 * i], in[2 * i + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // rows 4q .. 4q + 3
    const __m128i* a = t + 4 * q;
    u[4 * q] = _mm_unpacklo_epi16(a[0], a[2]);
    u[4 * q + 1] = _mm_unpackhi_epi16(a[0], a[2]);
    u[4 * q + 2] = _mm_unpacklo_epi16(a[1], a[3]);
    u[4 * q + 3] = _mm_unpackhi_epi16(a[1], a[3]);
  }
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = _mm_unpacklo_epi32(u[k], u[k + 4]);
    v[2 * k + 1] = _mm_unpackhi_epi32(u[k], u[k + 4]);
    w[2 * k] = _mm_unpacklo_epi32(u[k + 8], u[k + 12]);
    w[2 * k + 1] = _mm_unpackhi_epi32(u[k + 8], u[k + 12]);
  }
  for (int k = 0; k < 8; ++k) {
    out[2 * k] = _mm_unpacklo_epi64(v[k], w[k]);
    out[2 * k + 1] = _mm_unpackhi_epi64(v[k], w[k]);
  }
}

inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void store16(uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }

// Nibble pairs: `a` and `b` hold 32 values 0..15 in order, one per byte
// (values 0..15 in a, 16..31 in b); returns byte p = v[2p] | v[2p + 1] << 4.
inline __m128i pair_nibbles(__m128i even_odd_a, __m128i even_odd_b) {
  const __m128i lo = _mm_set1_epi16(0x000F), hi = _mm_set1_epi16(0x00F0);
  const __m128i a = _mm_or_si128(_mm_and_si128(even_odd_a, lo), _mm_and_si128(_mm_srli_epi16(even_odd_a, 4), hi));
  const __m128i b = _mm_or_si128(_mm_and_si128(even_odd_b, lo), _mm_and_si128(_mm_srli_epi16(even_odd_b, 4), hi));
  return _mm_packus_epi16(a, b);
}

// One group of 16 rows (`src`, row r at src + r · row_bytes) to `dst`.
void interleave_group(DType t, const uint8_t* src, size_t row_bytes, int64_t in, uint8_t* dst) {
  const uint8_t* rows[kRows];
  for (int64_t r = 0; r < kRows; ++r) rows[r] = src + static_cast<size_t>(r) * row_bytes;
  __m128i v[16], o[16];
  const __m128i nib = _mm_set1_epi8(0x0F);
  switch (t) {
    case DType::Q8_0:  // block_q8_0 {f16 d; int8 qs[32]}
      for (int64_t b = 0; b < in / 32; ++b, dst += detail::kIlQ8_0Bytes) {
        const size_t off = static_cast<size_t>(b) * 34;
        for (int64_t r = 0; r < kRows; ++r) std::memcpy(dst + 2 * r, rows[r] + off, 2);
        for (int half = 0; half < 2; ++half) {
          for (int r = 0; r < 16; ++r) v[r] = load16(rows[r] + off + 2 + 16 * half);
          transpose16x16(v, o);
          for (int c = 0; c < 16; ++c) store16(dst + 32 + 16 * (16 * half + c), o[c]);
        }
      }
      break;
    case DType::MXFP4:  // block_mxfp4 {u8 e; u8 qs[16]}: qs[k] = e[k] | e[k + 16] << 4
      for (int64_t b = 0; b < in / 32; ++b, dst += detail::kIlMxfp4Bytes) {
        const size_t off = static_cast<size_t>(b) * 17;
        for (int64_t r = 0; r < kRows; ++r) {
          dst[r] = rows[r][off];
          const __m128i q = load16(rows[r] + off + 1);
          v[r] = pair_nibbles(_mm_and_si128(q, nib), _mm_and_si128(_mm_srli_epi16(q, 4), nib));
        }
        transpose16x16(v, o);
        for (int p = 0; p < 16; ++p) store16(dst + 16 + 16 * p, o[p]);
      }
      break;
    case DType::Q4_K:  // block_q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}
      for (int64_t sb = 0; sb < in / 256; ++sb, dst += detail::kIlQ4_KBytes) {
        const size_t off = static_cast<size_t>(sb) * 144;
        for (int64_t r = 0; r < kRows; ++r) {
          std::memcpy(dst + 2 * r, rows[r] + off, 2);
          std::memcpy(dst + 32 + 2 * r, rows[r] + off + 2, 2);
          for (int k = 0; k < 12; ++k) dst[64 + 16 * k + r] = rows[r][off + 4 + k];
        }
        // Sub-blocks 2k and 2k + 1 are the low and high nibbles of
        // qs[32k .. 32k + 31] (ggml's dequantize_row_q4_K).
        for (int j = 0; j < 8; ++j) {
          const int shift = 4 * (j % 2);
          for (int64_t r = 0; r < kRows; ++r) {
            const uint8_t* qs = rows[r] + off + 16 + 32 * (j / 2);
            const __m128i a = _mm_and_si128(_mm_srli_epi16(load16(qs), shift), nib);
            const __m128i c = _mm_and_si128(_mm_srli_epi16(load16(qs + 16), shift), nib);
            v[r] = pair_nibbles(a, c);
          }
          transpose16x16(v, o);
          for (int p = 0; p < 16; ++p) store16(dst + 256 + 256 * j + 16 * p, o[p]);
        }
      }
      break;
    default: break;
  }
}

WeightMatrix interleaved_view(const WeightMatrix& w, const uint8_t* data) {
  WeightMatrix v = w;
  v.packing = Packing::Interleaved16;
  v.data = data;
  return v;
}

}  // namespace

bool interleavable(const WeightMatrix& w) {
  if (w.packing != Packing::Plain || !w.data || w.out <= 0 || w.out % kRows != 0 || w.block_scale) return false;
  switch (w.dtype) {
    case DType::Q8_0:
    case DType::MXFP4: return w.in % 32 == 0;
    case DType::Q4_K: return w.in % 256 == 0;
    default: return false;
  }
}

WeightMatrix interleave(const WeightMatrix& w, uint8_t* dst) {
  if (!interleavable(w)) throw Error("internal: interleave() of a matrix without an interleaved layout");
  const size_t group = static_cast<size_t>(kRows) * w.row_bytes();
  for (int64_t g = 0; g < w.out / kRows; ++g)
    interleave_group(w.dtype, w.data + static_cast<size_t>(g) * group, w.row_bytes(), w.in, dst + static_cast<size_t>(g) * group);
  return interleaved_view(w, dst);
}

WeightMatrix interleave_in_place(const WeightMatrix& w) {
  std::vector<uint8_t> scratch;
  return interleave_in_place(w, scratch);
}

WeightMatrix interleave_in_place(const WeightMatrix& w, std::vector<uint8_t>& scratch) {
  const int64_t groups = interleave_groups(w);
  for (int64_t g = 0; g < groups; ++g) interleave_group_in_place(w, g, scratch);
  return interleaved_in_place(w);
}

int64_t interleave_groups(const WeightMatrix& w) {
  if (!interleavable(w)) throw Error("internal: interleave_in_place() of a matrix without an interleaved layout");
  return w.out / kRows;
}

void interleave_group_in_place(const WeightMatrix& w, int64_t g, std::vector<uint8_t>& scratch) {
  if (!interleavable(w) || g < 0 || g >= w.out / kRows)
    throw Error("internal: interleave_group_in_place() of a group the matrix lacks");
  const size_t group = static_cast<size_t>(kRows) * w.row_bytes();
  if (scratch.size() < group) scratch.resize(group);
  uint8_t* p = const_cast<uint8_t*>(w.data) + static_cast<size_t>(g) * group;
  std::memcpy(scratch.data(), p, group);
  interleave_group(w.dtype, scratch.data(), w.row_bytes(), w.in, p);
}

WeightMatrix interleaved_in_place(const WeightMatrix& w) {
  if (!interleavable(w)) throw Error("internal: interleaved_in_place() of a matrix without an interleaved layout");
  return interleaved_view(w, w.data);
}

}  // namespace strata::kernels
