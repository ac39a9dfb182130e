// AVX-512 (F, BW, VL) kernels. Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx2 -mfma -mf16c (src/CMakeLists.txt) and only ever called after
// dispatch.cpp checked the CPU. See kernel_abi.h for why this file includes
// so little and keeps everything in an anonymous namespace.
#include "kernels/kernel_abi.h"

#if defined(STRATA_X86_SIMD)

// GCC 12 warns about the deliberately undefined pass-through operands inside
// its own avx512fintrin.h (_mm512_undefined_*); nothing of ours is involved.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace strata::kernels::detail {

namespace {

// ---- 16 f32 lanes: one zmm ---------------------------------------------------

struct V16 {
  __m512 v;
};

inline __mmask16 lanes_below(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline V16 vzero() { return {_mm512_setzero_ps()}; }
inline V16 vset1(float f) { return {_mm512_set1_ps(f)}; }
inline V16 vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V16 vload_partial(const float* p, int n) { return {_mm512_maskz_loadu_ps(lanes_below(n), p)}; }
inline void vstore(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
inline V16 vmul(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 vadd(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
// acc - a·b with one rounding (= fma(-a, b, acc)).
inline V16 vfnma(V16 a, V16 b, V16 acc) { return {_mm512_fnmadd_ps(a.v, b.v, acc.v)}; }
inline V16 vfma(V16 w, V16 x, V16 acc) { return {_mm512_fmadd_ps(w.v, x.v, acc.v)}; }
// a·b - c with one rounding: where a·b is exact, the scalar product-then-
// subtract gives the same bits.
inline V16 vfmsub(V16 a, V16 b, V16 c) { return {_mm512_fmsub_ps(a.v, b.v, c.v)}; }
inline V16 vmax(V16 a, V16 b) { return {_mm512_max_ps(a.v, b.v)}; }
// Lanes below n from b, the others from a.
inline V16 vblend_below(V16 a, V16 b, int n) { return {_mm512_mask_mov_ps(a.v, lanes_below(n), b.v)}; }
inline void vstore_partial(float* p, V16 a, int n) { _mm512_mask_storeu_ps(p, lanes_below(n), a.v); }
// The end of kernel_abi.h's exp(d) (simd_driver.inc's vexp_shifted): e · 2^n,
// 0 below kExpLow, NaN where d is NaN.
inline V16 vexp_finish(V16 d, V16 n, V16 e) {
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127)), 23);
  const __m512 y = _mm512_mul_ps(e.v, _mm512_castsi512_ps(bits));
  const __m512 kept = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d.v, _mm512_set1_ps(kExpLow), _CMP_GE_OQ), y);
  return {_mm512_mask_mov_ps(kept, _mm512_cmp_ps_mask(d.v, d.v, _CMP_UNORD_Q), d.v)};
}
inline V16 vfma_partial(V16 w, V16 x, V16 acc, int n) {
  return {_mm512_mask3_fmadd_ps(w.v, x.v, acc.v, lanes_below(n))};
}

// acc[j] += acc[j + w] for w = 8, 4, 2, 1.
inline float vreduce(V16 a) {
  const __m256 lo = _mm512_castps512_ps256(a.v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1));
  const __m256 t = _mm256_add_ps(lo, hi);
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 w = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w)));
}

// out[r · ldo + k] = vreduce(acc[r][k]) for a 4 × 4 tile, the sixteen trees
// side by side: each level adds the same lane pairs vreduce adds (j and j + 8,
// then j + 4, j + 2, j + 1), two or four accumulators a register, so every
// result has vreduce's bits in 15 additions instead of 64.
inline void vreduce_4x4(const V16 (&acc)[4][4], float* out, size_t ldo) {
  // Level 1, accumulators taken key-major (i = 4k + r), so that the last
  // level leaves row r's four keys in lanes 4r .. 4r + 3.
  __m512 l1[8];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = acc[(2 * i) % 4][(2 * i) / 4].v, b = acc[(2 * i + 1) % 4][(2 * i + 1) / 4].v;
    l1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 l2[4];
  for (int i = 0; i < 4; ++i)
    l2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  __m512 l3[2];
  for (int i = 0; i < 2; ++i)
    l3[i] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sums);
  for (int r = 0; r < 4; ++r) std::memcpy(out + static_cast<size_t>(r) * ldo, lanes + 4 * r, 4 * sizeof(float));
}
constexpr bool kReduce4x4 = true;

inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline V16 from_i8(__m128i q) { return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q))}; }
inline float f16_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

constexpr int kMatvecRows = 4;
constexpr int kSmallTileRows = 4;
constexpr int kSmallRows = 4;
// Every row count: with 32 registers, groups of four rows over cache-sized
// slices beat the panel path at prompts' row counts too, for the dense and
// interleaved formats (docs/PERFORMANCE.md, "groups of four for prompts too";
// AVX2's 16 registers do not: it keeps the panel path past four rows).
constexpr int kSmallBatch = INT32_MAX;
constexpr int kTileRows = 4;
constexpr int kTileBatch = 6;
constexpr int kIlMatvecGroups = 4;
constexpr int kIlBatchRows = 8;
constexpr int kIlSmallGroups = 2;
constexpr int kIlSmallRows = 4;
// Queries (attention rows) that share each key's loads: four rows of four
// accumulator chains, sixteen of the thirty-two registers.
constexpr int kAttentionRows = 4;

#include "kernels/simd_helpers.inc"

// ---- dense formats -------------------------------------------------------------

template <class E>
struct DenseDec {
  static constexpr int kChunk = 16;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    sink(0, E::decode(row + c * 16 * E::kBytes));
  }
  V16 tail(int64_t c, int n) const {
    alignas(64) uint8_t buf[64] = {};
    std::memcpy(buf, row + c * 16 * E::kBytes, static_cast<size_t>(n) * E::kBytes);
    return E::decode(buf);
  }
};

struct EF32 {
  static constexpr size_t kBytes = 4;
  static V16 decode(const uint8_t* p) { return {_mm512_loadu_ps(reinterpret_cast<const float*>(p))}; }
};
struct EBF16 {
  static constexpr size_t kBytes = 2;
  static V16 decode(const uint8_t* p) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16))};
  }
};
struct EF16 {
  static constexpr size_t kBytes = 2;
  static V16 decode(const uint8_t* p) { return {_mm512_cvtph_ps(load256(p))}; }
};
using DecF32 = DenseDec<EF32>;
using DecBF16 = DenseDec<EBF16>;
using DecF16 = DenseDec<EF16>;

// E4M3 → f16 bits → f32 (exact): sign-extending the byte to 16 bits and
// shifting left by 7 puts the 7-bit magnitude in f16's exponent/mantissa
// (bias 7 → 15 is then a factor 2^-8) and the sign in bit 15; bit 14 is
// cleared. f16 makes E4M3 subnormals exact, and the 2^8 goes into the scale
// (256·s is exact, so f · (256·s) rounds once, like the scalar q · s).
// 0x7f / 0xff are NaN: sign | 0x7fc00000 like the scalar decoder (and a NaN
// times a scale stays that NaN there too).
struct DecF8 {
  static constexpr int kChunk = 16;
  const uint8_t* row = nullptr;
  const float* srow = nullptr;
  int64_t block_in = 0;
  int64_t blk_lo = 1, blk_hi = 0;  // the scale block cached in s / s256
  float s = 0.0f, s256 = 0.0f;
  bool lane_scales = false;  // scale blocks do not fall on 16-column boundaries

  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    if (m.block_scale) {
      srow = m.block_scale + (m.row_offset + o) / m.block_out * m.block_cols;
      block_in = m.block_in;
      lane_scales = block_in % 16 != 0;
    }
  }
  static __m512 f16_of(__m128i b) {
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(-0x4080));
    return _mm512_cvtph_ps(h);
  }
  static V16 nan_fixed(__m128i b, __m512 f) {
    const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    if (nan) {
      const __m512i bits = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(f), _mm512_set1_epi32(INT32_MIN)),
                                           _mm512_set1_epi32(0x7fc00000));
      f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
    }
    return {f};
  }
  V16 decode(const uint8_t* p, int64_t col, int n) {
    const __m128i b = load128(p);
    const __m512 f = f16_of(b);
    __m512 w;
    if (!srow) {
      w = _mm512_mul_ps(f, _mm512_set1_ps(256.0f));
    } else if (!lane_scales && n == 16) {
      if (col < blk_lo || col >= blk_hi) load_block(col);
      w = s256 - s256 == 0.0f ? _mm512_mul_ps(f, _mm512_set1_ps(s256))
                              : _mm512_mul_ps(_mm512_mul_ps(f, _mm512_set1_ps(256.0f)), _mm512_set1_ps(s));
    } else {
      alignas(64) float sc[16] = {};
      for (int j = 0; j < n; ++j) sc[j] = srow[(col + j) / block_in];
      w = _mm512_mul_ps(_mm512_mul_ps(f, _mm512_set1_ps(256.0f)), _mm512_load_ps(sc));
    }
    return nan_fixed(b, w);
  }
  // 256·s is exact unless it overflows (s >= 2^120): then scale in two steps.
  void load_block(int64_t col) {
    const int64_t b = col / block_in;
    blk_lo = b * block_in;
    blk_hi = blk_lo + block_in;
    s = srow[b];
    s256 = s * 256.0f;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    sink(0, decode(row + c * 16, c * 16, 16));
  }
  V16 tail(int64_t c, int n) {
    alignas(16) uint8_t buf[16] = {};
    std::memcpy(buf, row + c * 16, static_cast<size_t>(n));
    return decode(buf, c * 16, n);
  }
};

struct DecI8 {
  static constexpr int kChunk = 16;
  const uint8_t* row = nullptr;
  float s = 0.0f;
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    s = load_scale(m.scale_type, scale_ptr(m, o), 0);
  }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    sink(0, vmul(from_i8(load128(row + c * 16)), vset1(s)));
  }
  V16 tail(int64_t c, int n) const {
    alignas(16) uint8_t buf[16] = {};
    std::memcpy(buf, row + c * 16, static_cast<size_t>(n));
    return vmul(from_i8(load128(buf)), vset1(s));
  }
};

// ---- block formats: a 16-entry f32 table per block, indexed by nibble ---------
//
// Each table entry is computed with the scalar reference's operation (e.g.
// E2M1 × scale), so looking it up gives the same bits.

// Elements 0..31 from 16 bytes where byte k holds element 2k (low nibble) and
// 2k+1 (high nibble), i.e. little-endian word w holds elements 8w..8w+7 at
// bits 4j: give lane i word i/8 (of the half), shifted right by 4·(i % 8)
// (vpermps reads only the low 4 bits of each index).
inline void interleaved_nibbles(const uint8_t* p, __m512i& i0, __m512i& i1) {
  const __m512i v = _mm512_zextsi128_si512(load128(p));
  const __m512i sel = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i shift = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  i0 = _mm512_srlv_epi32(_mm512_permutexvar_epi32(sel, v), shift);
  i1 = _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(sel, _mm512_set1_epi32(2)), v), shift);
}

inline __m512 e2m1_table(float d) {
  const __m512 kv = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return _mm512_mul_ps(kv, _mm512_set1_ps(d));
}

inline V16 lookup(__m512i idx, __m512 lut) { return {_mm512_permutexvar_ps(idx, lut)}; }

struct DecI4 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  const uint8_t* srow = nullptr;
  ScaleType st = ScaleType::F32;
  int64_t per = 1;              // chunks per scale group
  int64_t g_lo = 1, g_hi = 0;   // chunks of the cached group
  float s = 0.0f;
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    srow = scale_ptr(m, o);
    st = m.scale_type;
    per = m.group / 32;
  }
  float scale(int64_t c) {
    if (c < g_lo || c >= g_hi) {
      const int64_t g = c / per;
      g_lo = g * per;
      g_hi = g_lo + per;
      s = load_scale(st, srow, g);
    }
    return s;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    const __m512 q = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 lut = _mm512_mul_ps(q, _mm512_set1_ps(scale(c)));
    __m512i i0, i1;
    interleaved_nibbles(row + c * 16, i0, i1);
    sink(0, lookup(i0, lut));
    sink(1, lookup(i1, lut));
  }
};

struct DecMxfp4Split {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  const uint8_t* srow = nullptr;
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    srow = scale_ptr(m, o);
  }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const __m512 lut = e2m1_table(e8m0_half(srow[c]));
    __m512i i0, i1;
    interleaved_nibbles(row + c * 16, i0, i1);
    sink(0, lookup(i0, lut));
    sink(1, lookup(i1, lut));
  }
};

struct DecMxfp4 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 17;
    const __m512 lut = e2m1_table(e8m0_half(b[0]));
    const __m512i idx = _mm512_cvtepu8_epi32(load128(b + 1));
    sink(0, lookup(idx, lut));
    sink(1, lookup(_mm512_srli_epi32(idx, 4), lut));
  }
};

struct DecQ8_0 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 34;
    const V16 d = vset1(f16_scale(b));
    sink(0, vmul(from_i8(load128(b + 2)), d));
    sink(1, vmul(from_i8(load128(b + 18)), d));
  }
};

// Q4_0 / Q4_1 / Q5_0 / Q5_1: one 32-value block per chunk; the low nibbles
// of qs[16] are elements 0..15, the high nibbles 16..31. A 16-entry table
// per block as for MXFP4, entry q holding the scalar's value: (q - 8)·d, or
// q·d + m as one fma (q·d is exact, so one rounding either way). Q5's fifth
// bit of element i is bit i of the u32 qh: a lane mask that picks a second
// table, of the values for q + 16.
inline __m512 iota16() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// Lanes whose bit in `hi` is set look up `lut_hi`, the others `lut_lo`.
inline V16 lookup2(__m512i idx, __m512 lut_lo, __m512 lut_hi, __mmask16 hi) {
  return {_mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(idx, lut_lo), hi, idx, lut_hi)};
}

struct DecQ4_0 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 18;
    const __m512 lut = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(8)), _mm512_set1_ps(f16_scale(b)));
    const __m512i idx = _mm512_cvtepu8_epi32(load128(b + 2));
    sink(0, lookup(idx, lut));
    sink(1, lookup(_mm512_srli_epi32(idx, 4), lut));
  }
};

struct DecQ4_1 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 20;
    const __m512 lut = _mm512_fmadd_ps(iota16(), _mm512_set1_ps(f16_scale(b)), _mm512_set1_ps(f16_scale(b + 2)));
    const __m512i idx = _mm512_cvtepu8_epi32(load128(b + 4));
    sink(0, lookup(idx, lut));
    sink(1, lookup(_mm512_srli_epi32(idx, 4), lut));
  }
};

struct DecQ5_0 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 22;
    const __m512 d = _mm512_set1_ps(f16_scale(b));
    const __m512 lut_lo = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(16)), d);
    const __m512 lut_hi = _mm512_mul_ps(iota16(), d);
    const uint32_t qh = load_u32(b + 2);
    const __m512i idx = _mm512_cvtepu8_epi32(load128(b + 6));
    sink(0, lookup2(idx, lut_lo, lut_hi, static_cast<__mmask16>(qh)));
    sink(1, lookup2(_mm512_srli_epi32(idx, 4), lut_lo, lut_hi, static_cast<__mmask16>(qh >> 16)));
  }
};

struct DecQ5_1 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 24;
    const __m512 d = _mm512_set1_ps(f16_scale(b)), mn = _mm512_set1_ps(f16_scale(b + 2));
    const __m512 lut_lo = _mm512_fmadd_ps(iota16(), d, mn);
    const __m512 lut_hi = _mm512_fmadd_ps(_mm512_add_ps(iota16(), _mm512_set1_ps(16)), d, mn);
    const uint32_t qh = load_u32(b + 4);
    const __m512i idx = _mm512_cvtepu8_epi32(load128(b + 8));
    sink(0, lookup2(idx, lut_lo, lut_hi, static_cast<__mmask16>(qh)));
    sink(1, lookup2(_mm512_srli_epi32(idx, 4), lut_lo, lut_hi, static_cast<__mmask16>(qh >> 16)));
  }
};

// Q2_K / Q3_K, 128 values (half a super-block) per chunk: the half's 32
// bytes of qs, shifted right by 2k, give sub-blocks 2k (bytes 0..15) and
// 2k+1 (bytes 16..31) in their low two bits. A super-block's 16 sub-block
// scales are decoded (exactly) when the row enters it.
inline __m256i two_bits(__m256i q, int k) {
  return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
}

// W = (d·sc) · q - dmin·m: vfmsub rounds once, as the scalar.
struct DecQ2K {
  static constexpr int kChunk = 128;
  const uint8_t* row = nullptr;
  int64_t sb = -1;
  alignas(64) float dl[16], ml[16];
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    sb = -1;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    const uint8_t* b = row + (c >> 1) * 84;
    if ((c >> 1) != sb) {
      sb = c >> 1;
      const __m512i sc = _mm512_cvtepu8_epi32(load128(b));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(0xF)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4));
      _mm512_store_ps(dl, _mm512_mul_ps(_mm512_set1_ps(f16_scale(b + 80)), lo));  // d·sc: exact
      _mm512_store_ps(ml, _mm512_mul_ps(_mm512_set1_ps(f16_scale(b + 82)), hi));  // dmin·m: exact
    }
    const int half = static_cast<int>(c & 1);
    const __m256i q = load256(b + 16 + 32 * half);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = two_bits(q, k);
      const int s = 8 * half + 2 * k;
      sink(2 * k, vfmsub(vset1(dl[s]), from_i8(_mm256_castsi256_si128(v)), vset1(ml[s])));
      sink(2 * k + 1, vfmsub(vset1(dl[s + 1]), from_i8(_mm256_extracti128_si256(v, 1)), vset1(ml[s + 1])));
    }
  }
};

// W = (d·(scale - 32)) · q, q = low two bits - (hmask bit clear ? 4 : 0):
// both factors and the product are exact.
struct DecQ3K {
  static constexpr int kChunk = 128;
  const uint8_t* row = nullptr;
  int64_t sb = -1;
  alignas(64) float ds[16];
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    sb = -1;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    const uint8_t* b = row + (c >> 1) * 110;
    if ((c >> 1) != sb) {
      sb = c >> 1;
      uint64_t lo, hi;
      scales_k3(b + 96, lo, hi);
      const __m128i sc = _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)),
                                      _mm_set1_epi8(32));
      _mm512_store_ps(ds, vmul(from_i8(sc), vset1(f16_scale(b + 108))).v);  // d·(scale - 32): exact
    }
    const int half = static_cast<int>(c & 1);
    const __m256i q = load256(b + 32 + 32 * half), hm = load256(b);
    for (int k = 0; k < 4; ++k) {
      const __mmask32 clear = _mm256_testn_epi8_mask(hm, _mm256_set1_epi8(static_cast<char>(1 << (4 * half + k))));
      const __m256i l2 = two_bits(q, k);
      const __m256i v = _mm256_mask_sub_epi8(l2, clear, l2, _mm256_set1_epi8(4));
      const int s = 8 * half + 2 * k;
      sink(2 * k, vmul(from_i8(_mm256_castsi256_si128(v)), vset1(ds[s])));
      sink(2 * k + 1, vmul(from_i8(_mm256_extracti128_si256(v, 1)), vset1(ds[s + 1])));
    }
  }
};

// The 8 (d·sc, dmin·m) pairs of a Q4_K / Q5_K super-block (both start with
// f16 d, dmin and the same 12 bytes of 6-bit scales and mins): all exact.
inline void k4_scales(const uint8_t* b, float* d1, float* m1) {
  uint64_t sc, mn;
  scales_mins_k4(b + 4, sc, mn);
  const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc))));
  const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mn))));
  _mm256_storeu_ps(d1, _mm256_mul_ps(_mm256_set1_ps(f16_scale(b)), scf));
  _mm256_storeu_ps(m1, _mm256_mul_ps(_mm256_set1_ps(f16_scale(b + 2)), mnf));
}

// Q4_K, 64 values per chunk: 32 bytes of qs give sub-block 2k (low nibbles)
// and 2k+1 (high nibbles). A super-block's 8 (d·sc, dmin·m) pairs are
// decoded once, when the row enters it.
struct DecQ4K {
  static constexpr int kChunk = 64;
  const uint8_t* row = nullptr;
  int64_t sb = -1;
  alignas(32) float d1[8], m1[8];
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    sb = -1;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    const uint8_t* b = row + (c >> 2) * 144;
    if ((c >> 2) != sb) {
      sb = c >> 2;
      k4_scales(b, d1, m1);
    }
    const int j = static_cast<int>(c & 3) * 2;
    // table[q] = d1·q - m1; d1·q is exact, so the fused form rounds once, as
    // the scalar product-then-subtract does.
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 lut0 = _mm512_fmsub_ps(_mm512_set1_ps(d1[j]), iota, _mm512_set1_ps(m1[j]));
    const __m512 lut1 = _mm512_fmsub_ps(_mm512_set1_ps(d1[j + 1]), iota, _mm512_set1_ps(m1[j + 1]));
    // Low nibbles index lut0 directly (vpermps reads bits 0-3); the high
    // nibbles are shifted down once for all 32 bytes.
    const uint8_t* q = b + 16 + 32 * (c & 3);
    const __m256i hi = _mm256_srli_epi16(load256(q), 4);
    sink(0, lookup(_mm512_cvtepu8_epi32(load128(q)), lut0));
    sink(1, lookup(_mm512_cvtepu8_epi32(load128(q + 16)), lut0));
    sink(2, lookup(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(hi)), lut1));
    sink(3, lookup(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(hi, 1)), lut1));
  }
};

// Q5_K: DecQ4K with two tables per sub-block (q and q + 16), picked per
// lane by bit j of qh[l] for element l of sub-block j.
struct DecQ5K {
  static constexpr int kChunk = 64;
  const uint8_t* row = nullptr;
  int64_t sb = -1;
  alignas(32) float d1[8], m1[8];
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    sb = -1;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    const uint8_t* b = row + (c >> 2) * 176;
    if ((c >> 2) != sb) {
      sb = c >> 2;
      k4_scales(b, d1, m1);
    }
    const int j = static_cast<int>(c & 3) * 2;
    const __m512 iota = iota16(), iota_hi = _mm512_add_ps(iota16(), _mm512_set1_ps(16));
    const __m256i qh = load256(b + 16);
    const uint8_t* q = b + 48 + 32 * (c & 3);
    const __m256i hi = _mm256_srli_epi16(load256(q), 4);
    const __m512i idx[4] = {_mm512_cvtepu8_epi32(load128(q)), _mm512_cvtepu8_epi32(load128(q + 16)),
                            _mm512_cvtepu8_epi32(_mm256_castsi256_si128(hi)),
                            _mm512_cvtepu8_epi32(_mm256_extracti128_si256(hi, 1))};
    for (int h = 0; h < 2; ++h) {  // low nibbles: sub-block j; high: j + 1
      const __m512 dv = _mm512_set1_ps(d1[j + h]), mv = _mm512_set1_ps(m1[j + h]);
      const __m512 lut_lo = _mm512_fmsub_ps(dv, iota, mv), lut_hi = _mm512_fmsub_ps(dv, iota_hi, mv);
      const __mmask32 bit = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (j + h))));
      sink(2 * h, lookup2(idx[2 * h], lut_lo, lut_hi, static_cast<__mmask16>(bit)));
      sink(2 * h + 1, lookup2(idx[2 * h + 1], lut_lo, lut_hi, static_cast<__mmask16>(bit >> 16)));
    }
  }
};

// Q6_K, 128 values (one half of a super-block) per chunk. With 512-bit byte
// operations: ql's 64 bytes give values 0..63 (low nibbles) and 64..127 (high
// nibbles) in order; qh's 32 bytes, repeated in both 256-bit halves and
// shifted per half, give the two high bits. A super-block's 16 scales d·sc
// (exact) are decoded when the row enters it. W = (d·sc)·(q - 32) is exact
// (≤ 23 significant bits), so the grouping of the scalar d·sc·q does not
// matter (and q = 32 gives -0 for a negative scale, as there).
struct DecQ6K {
  static constexpr int kChunk = 128;
  const uint8_t* row = nullptr;
  int64_t sb = -1;
  alignas(64) float ds[16];
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    sb = -1;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    const uint8_t* b = row + (c >> 1) * 210;
    if ((c >> 1) != sb) {
      sb = c >> 1;
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(b + 192)));
      _mm512_store_ps(ds, _mm512_mul_ps(_mm512_set1_ps(f16_scale(b + 208)), sc));
    }
    const int half = static_cast<int>(c & 1);
    const __m512i ql = _mm512_loadu_si512(b + 64 * half);
    const __m512i qh = _mm512_broadcast_i64x4(load256(b + 128 + 32 * half));
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32);
    // Values 0..31 take qh bits 0-1 (<< 4), 32..63 bits 2-3 (<< 2), 64..95
    // bits 4-5 (as is), 96..127 bits 6-7 (>> 2); 16-bit shifts, then the
    // mask keeps each byte's own bits.
    const __m512i hi_a = _mm512_and_si512(
        _mm512_sllv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1)), m30);
    const __m512i hi_b = _mm512_and_si512(
        _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1)), m30);
    alignas(64) int8_t q[128];
    _mm512_store_si512(q, _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(ql, m4), hi_a), k32));
    _mm512_store_si512(q + 64, _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hi_b), k32));
    const float* s = ds + 8 * half;
    for (int v = 0; v < 8; ++v) sink(v, vmul(from_i8(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * v))), vset1(s[v])));
  }
};

// ---- interleaved formats (simd_interleaved.inc) -------------------------------

inline V16 from_u8(__m128i q) { return {_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q))}; }
inline V16 from_f16x16(const uint8_t* p) { return {_mm512_cvtph_ps(load256(p))}; }

// e8m0_half of 16 exponent bytes.
inline V16 e8m0_half16(const uint8_t* p) {
  const __m512i e = _mm512_cvtepu8_epi32(load128(p));
  const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  return {_mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), big, small))};
}

// The nibble pairs of a block: byte r of pair p holds row r's columns 2p (low)
// and 2p + 1 (high), looked up in `lut` (vpermps reads only the low 4 bits of
// an index).
template <class S>
inline void il_nibble_pair(const uint8_t* pairs, int p, __m512 lut, S&& sink) {
  const __m512i idx = _mm512_cvtepu8_epi32(load128(pairs + 16 * p));
  sink(lookup(idx, lut), lookup(_mm512_srli_epi32(idx, 4), lut));
}
template <class S>
inline void il_levels_e2m1(const uint8_t* pairs, int p, S&& sink) {
  il_nibble_pair(pairs, p, e2m1_table(1.0f), sink);
}
template <class S>
inline void il_levels_u4(const uint8_t* pairs, int p, S&& sink) {
  il_nibble_pair(pairs, p, iota16(), sink);
}

#include "kernels/simd_interleaved.inc"

#include "kernels/simd_driver.inc"

void simd_axpy(float a, const float* x, float* y, size_t n) {
  const __m512 av = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = lanes_below(static_cast<int>(n - i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

const KernelTable kTable = {"avx512",          simd_matmul, simd_dequant_row, simd_dot, simd_dots, simd_axpy, simd_axpys,
                            simd_dots_rows, simd_axpys_rows, simd_softmax,     /*needs_row=*/false};

}  // namespace

const KernelTable* avx512_table() { return &kTable; }

}  // namespace strata::kernels::detail

#else

namespace strata::kernels::detail {
const KernelTable* avx512_table() { return nullptr; }
}  // namespace strata::kernels::detail

#endif
