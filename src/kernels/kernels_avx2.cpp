// AVX2 + FMA + F16C kernels: the same functions as kernels_avx512.cpp with the
// 16 lanes held in two ymm registers. Compiled with -mavx2 -mfma -mf16c
// (src/CMakeLists.txt); see kernel_abi.h for the include discipline.
#include "kernels/kernel_abi.h"

#if defined(STRATA_X86_SIMD)

#include <cmath>
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace strata::kernels::detail {

namespace {

// ---- 16 f32 lanes: lanes 0..7 in lo, 8..15 in hi ----------------------------

struct V16 {
  __m256 lo, hi;
};

inline __m256i lanes_below8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline V16 vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 vset1(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
inline V16 vload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V16 vload_partial(const float* p, int n) {
  return {_mm256_maskload_ps(p, lanes_below8(n)), _mm256_maskload_ps(p + 8, lanes_below8(n - 8))};
}
inline void vstore(float* p, V16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
inline V16 vmul(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V16 vadd(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
// acc - a·b with one rounding (= fma(-a, b, acc)).
inline V16 vfnma(V16 a, V16 b, V16 acc) {
  return {_mm256_fnmadd_ps(a.lo, b.lo, acc.lo), _mm256_fnmadd_ps(a.hi, b.hi, acc.hi)};
}
inline V16 vfma(V16 w, V16 x, V16 acc) {
  return {_mm256_fmadd_ps(w.lo, x.lo, acc.lo), _mm256_fmadd_ps(w.hi, x.hi, acc.hi)};
}
// a·b - c with one rounding: where a·b is exact, the scalar product-then-
// subtract (and product-then-add, vfma) give the same bits.
inline V16 vfmsub(V16 a, V16 b, V16 c) {
  return {_mm256_fmsub_ps(a.lo, b.lo, c.lo), _mm256_fmsub_ps(a.hi, b.hi, c.hi)};
}
inline V16 vmax(V16 a, V16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
// Lanes below n from b, the others from a.
inline V16 vblend_below(V16 a, V16 b, int n) {
  return {_mm256_blendv_ps(a.lo, b.lo, _mm256_castsi256_ps(lanes_below8(n))),
          _mm256_blendv_ps(a.hi, b.hi, _mm256_castsi256_ps(lanes_below8(n - 8)))};
}
inline void vstore_partial(float* p, V16 a, int n) {
  _mm256_maskstore_ps(p, lanes_below8(n), a.lo);
  _mm256_maskstore_ps(p + 8, lanes_below8(n - 8), a.hi);
}
// The end of kernel_abi.h's exp(d) (simd_driver.inc's vexp_shifted): e · 2^n,
// 0 below kExpLow, NaN where d is NaN.
inline __m256 exp_finish8(__m256 d, __m256 n, __m256 e) {
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
  const __m256 kept = _mm256_and_ps(y, _mm256_cmp_ps(d, _mm256_set1_ps(kExpLow), _CMP_GE_OQ));
  return _mm256_blendv_ps(kept, d, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
}
inline V16 vexp_finish(V16 d, V16 n, V16 e) { return {exp_finish8(d.lo, n.lo, e.lo), exp_finish8(d.hi, n.hi, e.hi)}; }
inline V16 vfma_partial(V16 w, V16 x, V16 acc, int n) {
  const V16 r = vfma(w, x, acc);
  return {_mm256_blendv_ps(acc.lo, r.lo, _mm256_castsi256_ps(lanes_below8(n))),
          _mm256_blendv_ps(acc.hi, r.hi, _mm256_castsi256_ps(lanes_below8(n - 8)))};
}

// acc[j] += acc[j + w] for w = 8, 4, 2, 1.
inline float vreduce(V16 a) {
  const __m256 t = _mm256_add_ps(a.lo, a.hi);
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 w = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w)));
}

// No 4 × 4 tiles of dots here (kAttentionRows is 1).
constexpr bool kReduce4x4 = false;

inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
// 16 int8 → 16 f32 (exact).
inline V16 from_i8(__m128i q) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))};
}
inline float f16_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

constexpr int kMatvecRows = 4;
constexpr int kSmallTileRows = 2;
constexpr int kSmallRows = 2;
constexpr int kSmallBatch = 4;
constexpr int kTileRows = 3;
constexpr int kTileBatch = 2;
constexpr int kIlMatvecGroups = 2;
constexpr int kIlBatchRows = 4;
constexpr int kIlSmallGroups = 1;
constexpr int kIlSmallRows = 2;
// Queries (attention rows) that share each key's loads: one here, where
// sixteen lanes are two registers and four rows' accumulators would spill.
constexpr int kAttentionRows = 1;

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
  static V16 decode(const uint8_t* p) { return vload(reinterpret_cast<const float*>(p)); }
};
struct EBF16 {
  static constexpr size_t kBytes = 2;
  static __m256 half(const uint8_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static V16 decode(const uint8_t* p) { return {half(p), half(p + 16)}; }
};
struct EF16 {
  static constexpr size_t kBytes = 2;
  static V16 decode(const uint8_t* p) { return {_mm256_cvtph_ps(load128(p)), _mm256_cvtph_ps(load128(p + 16))}; }
};
using DecF32 = DenseDec<EF32>;
using DecBF16 = DenseDec<EBF16>;
using DecF16 = DenseDec<EF16>;

// See kernels_avx512.cpp DecF8: E4M3 → f16 bits → f32, 2^8 folded into the
// scale, NaN fixed up.
struct DecF8 {
  static constexpr int kChunk = 16;
  const uint8_t* row = nullptr;
  const float* srow = nullptr;
  int64_t block_in = 0;
  int64_t blk_lo = 1, blk_hi = 0;  // the scale block cached in s / s256
  float s = 0.0f, s256 = 0.0f;
  bool lane_scales = false;

  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    if (m.block_scale) {
      srow = m.block_scale + (m.row_offset + o) / m.block_out * m.block_cols;
      block_in = m.block_in;
      lane_scales = block_in % 16 != 0;
    }
  }
  // The f16 form of 8 bytes.
  static __m256 f16_of(__m128i b8) {
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b8), 7), _mm_set1_epi16(-0x4080)));
  }
  static __m256 nan_fixed(__m128i b8, __m256 f) {
    const __m128i nan8 = _mm_cmpeq_epi8(_mm_and_si128(b8, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    if (_mm_testz_si128(nan8, _mm_set_epi64x(0, -1))) return f;
    const __m256i bits = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(f), _mm256_set1_epi32(INT32_MIN)),
                                         _mm256_set1_epi32(0x7fc00000));
    return _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan8)));
  }
  V16 decode(const uint8_t* p, int64_t col, int n) {
    const __m128i b = load128(p), b_hi = _mm_srli_si128(b, 8);
    V16 f{f16_of(b), f16_of(b_hi)};
    if (!srow) {
      f = vmul(f, vset1(256.0f));
    } else if (!lane_scales && n == 16) {
      if (col < blk_lo || col >= blk_hi) load_block(col);
      f = s256 - s256 == 0.0f ? vmul(f, vset1(s256)) : vmul(vmul(f, vset1(256.0f)), vset1(s));
    } else {
      alignas(64) float sc[16] = {};
      for (int j = 0; j < n; ++j) sc[j] = srow[(col + j) / block_in];
      f = vmul(vmul(f, vset1(256.0f)), vload(sc));
    }
    return {nan_fixed(b, f.lo), nan_fixed(b_hi, f.hi)};
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

// ---- block formats: small ints via byte shuffles, then × scale ---------------

inline __m128i low_nibbles(__m128i v) { return _mm_and_si128(v, _mm_set1_epi8(0x0F)); }
inline __m128i high_nibbles(__m128i v) { return _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F)); }
// E2M1 × 2 (ggml kvalues_mxfp4) by nibble.
inline __m128i e2m1x2(__m128i nib) {
  return _mm_shuffle_epi8(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12), nib);
}
// Byte k of p holds element 2k (low nibble) and 2k+1 (high nibble).
inline void interleaved_nibbles(const uint8_t* p, __m128i& e0, __m128i& e1) {
  const __m128i v = load128(p), lo = low_nibbles(v), hi = high_nibbles(v);
  e0 = _mm_unpacklo_epi8(lo, hi);
  e1 = _mm_unpackhi_epi8(lo, hi);
}

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
    const V16 sv = vset1(scale(c));
    __m128i e0, e1;
    interleaved_nibbles(row + c * 16, e0, e1);
    sink(0, vmul(from_i8(_mm_sub_epi8(e0, _mm_set1_epi8(8))), sv));
    sink(1, vmul(from_i8(_mm_sub_epi8(e1, _mm_set1_epi8(8))), sv));
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
    const V16 d = vset1(e8m0_half(srow[c]));
    __m128i e0, e1;
    interleaved_nibbles(row + c * 16, e0, e1);
    sink(0, vmul(from_i8(e2m1x2(e0)), d));
    sink(1, vmul(from_i8(e2m1x2(e1)), d));
  }
};

struct DecMxfp4 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 17;
    const V16 d = vset1(e8m0_half(b[0]));
    const __m128i v = load128(b + 1);
    sink(0, vmul(from_i8(e2m1x2(low_nibbles(v))), d));
    sink(1, vmul(from_i8(e2m1x2(high_nibbles(v))), d));
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

// 0x10 in each byte of `bytes` whose bit `bit` is set, else 0: the fifth bit
// of a Q5 value, in place.
inline __m128i bit_as_16(__m128i bytes, int bit) {
  const __m128i m = _mm_set1_epi8(static_cast<char>(1 << bit));
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(bytes, m), m), _mm_set1_epi8(0x10));
}
// Q5_0 / Q5_1: bits 0..15 of `bits` as 16 bytes (byte i from bit i), then
// bit_as_16.
inline __m128i fifth_bits(uint32_t bits) {
  const __m128i spread = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bits)),
                                          _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const __m128i m = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(spread, m), m), _mm_set1_epi8(0x10));
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: one 32-value block per chunk; the low nibbles
// of qs[16] are elements 0..15, the high nibbles 16..31. Values q · d (exact)
// or q · d + m (vfma, one rounding, as the scalar).
struct DecQ4_0 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 18;
    const V16 d = vset1(f16_scale(b));
    const __m128i v = load128(b + 2), k8 = _mm_set1_epi8(8);
    sink(0, vmul(from_i8(_mm_sub_epi8(low_nibbles(v), k8)), d));
    sink(1, vmul(from_i8(_mm_sub_epi8(high_nibbles(v), k8)), d));
  }
};

struct DecQ4_1 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 20;
    const V16 d = vset1(f16_scale(b)), mn = vset1(f16_scale(b + 2));
    const __m128i v = load128(b + 4);
    sink(0, vfma(from_i8(low_nibbles(v)), d, mn));
    sink(1, vfma(from_i8(high_nibbles(v)), d, mn));
  }
};

struct DecQ5_0 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 22;
    const V16 d = vset1(f16_scale(b));
    const uint32_t qh = load_u32(b + 2);
    const __m128i v = load128(b + 6), k16 = _mm_set1_epi8(16);
    sink(0, vmul(from_i8(_mm_sub_epi8(_mm_or_si128(low_nibbles(v), fifth_bits(qh)), k16)), d));
    sink(1, vmul(from_i8(_mm_sub_epi8(_mm_or_si128(high_nibbles(v), fifth_bits(qh >> 16)), k16)), d));
  }
};

struct DecQ5_1 {
  static constexpr int kChunk = 32;
  const uint8_t* row = nullptr;
  void init(const MatDesc& m, int64_t o) { row = row_ptr(m, o); }
  template <class S>
  void chunk(int64_t c, S&& sink) const {
    const uint8_t* b = row + c * 24;
    const V16 d = vset1(f16_scale(b)), mn = vset1(f16_scale(b + 2));
    const uint32_t qh = load_u32(b + 4);
    const __m128i v = load128(b + 8);
    sink(0, vfma(from_i8(_mm_or_si128(low_nibbles(v), fifth_bits(qh))), d, mn));
    sink(1, vfma(from_i8(_mm_or_si128(high_nibbles(v), fifth_bits(qh >> 16))), d, mn));
  }
};

// Q2_K / Q3_K, 128 values (half a super-block) per chunk: the half's 32
// bytes of qs, shifted right by 2k, give sub-blocks 2k (bytes 0..15) and
// 2k+1 (bytes 16..31) in their low two bits. A super-block's 16 sub-block
// scales are decoded (exactly) when the row enters it.
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i two_bits(__m256i q, int k) {
  return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
}

// W = (d·sc) · q - dmin·m: vfmsub rounds once, as the scalar.
struct DecQ2K {
  static constexpr int kChunk = 128;
  const uint8_t* row = nullptr;
  int64_t sb = -1;
  alignas(32) float dl[16], ml[16];
  void init(const MatDesc& m, int64_t o) {
    row = row_ptr(m, o);
    sb = -1;
  }
  template <class S>
  void chunk(int64_t c, S&& sink) {
    const uint8_t* b = row + (c >> 1) * 84;
    if ((c >> 1) != sb) {
      sb = c >> 1;
      const __m128i sc = load128(b);
      vstore(dl, vmul(from_i8(low_nibbles(sc)), vset1(f16_scale(b + 80))));   // d·sc: exact
      vstore(ml, vmul(from_i8(high_nibbles(sc)), vset1(f16_scale(b + 82))));  // dmin·m: exact
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
  alignas(32) float ds[16];
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
      vstore(ds, vmul(from_i8(sc), vset1(f16_scale(b + 108))));  // d·(scale - 32): exact
    }
    const int half = static_cast<int>(c & 1);
    const __m256i q = load256(b + 32 + 32 * half), hm = load256(b);
    for (int k = 0; k < 4; ++k) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * half + k)));
      const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
      const __m256i v = _mm256_sub_epi8(two_bits(q, k), _mm256_and_si256(clear, _mm256_set1_epi8(4)));
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

// See kernels_avx512.cpp DecQ4K.
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
    const uint8_t* q = b + 16 + 32 * (c & 3);
    for (int h = 0; h < 2; ++h) {  // low nibbles: sub-block j; high: j + 1
      const __m256 dv = _mm256_set1_ps(d1[j + h]), mv = _mm256_set1_ps(m1[j + h]);
      for (int v = 0; v < 2; ++v) {
        const __m128i raw = load128(q + 16 * v);
        const V16 qf = from_i8(h ? high_nibbles(raw) : low_nibbles(raw));
        // d1·q is exact, so the fused form rounds once, like product-then-subtract.
        sink(2 * h + v, V16{_mm256_fmsub_ps(dv, qf.lo, mv), _mm256_fmsub_ps(dv, qf.hi, mv)});
      }
    }
  }
};

// Q5_K: DecQ4K plus the fifth bit, bit j of qh[l] for element l of
// sub-block j.
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
    const uint8_t* q = b + 48 + 32 * (c & 3);
    for (int h = 0; h < 2; ++h) {  // low nibbles: sub-block j; high: j + 1
      const V16 dv = vset1(d1[j + h]), mv = vset1(m1[j + h]);
      for (int v = 0; v < 2; ++v) {
        const __m128i raw = load128(q + 16 * v);
        const __m128i hi = bit_as_16(load128(b + 16 + 16 * v), j + h);
        sink(2 * h + v, vfmsub(dv, from_i8(_mm_or_si128(h ? high_nibbles(raw) : low_nibbles(raw), hi)), mv));
      }
    }
  }
};

// See kernels_avx512.cpp DecQ6K: 128 values per chunk, built 32 at a time
// with 256-bit byte operations.
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
      const __m128i sc = load128(b + 192);
      const __m256 d = _mm256_set1_ps(f16_scale(b + 208));
      _mm256_store_ps(ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
      _mm256_store_ps(ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
    }
    const int half = static_cast<int>(c & 1);
    const uint8_t* p = b + 64 * half;
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    auto make = [&](__m256i lo, __m256i hi) {
      return _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30)), k32);
    };
    alignas(32) int8_t q[128];
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), make(ql0, _mm256_slli_epi16(qh, 4)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32), make(ql1, _mm256_slli_epi16(qh, 2)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64), make(_mm256_srli_epi16(ql0, 4), qh));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 96), make(_mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 2)));
    const float* s = ds + 8 * half;
    for (int v = 0; v < 8; ++v) sink(v, vmul(from_i8(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * v))), vset1(s[v])));
  }
};

// ---- interleaved formats (simd_interleaved.inc) -------------------------------

inline V16 from_u8(__m128i q) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)))};
}
inline V16 from_f16x16(const uint8_t* p) { return {_mm256_cvtph_ps(load128(p)), _mm256_cvtph_ps(load128(p + 16))}; }

// e8m0_half of 8 exponents.
inline __m256 e8m0_half8(__m256i e) {
  const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i lt2 = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, lt2));
}
inline V16 e8m0_half16(const uint8_t* p) {
  const __m128i e = load128(p);
  return {e8m0_half8(_mm256_cvtepu8_epi32(e)), e8m0_half8(_mm256_cvtepu8_epi32(_mm_srli_si128(e, 8)))};
}

// The nibble pairs of a block: byte r of pair p holds row r's columns 2p (low)
// and 2p + 1 (high).
template <class S>
inline void il_levels_e2m1(const uint8_t* pairs, int p, S&& sink) {
  const __m128i v = load128(pairs + 16 * p);
  sink(from_i8(e2m1x2(low_nibbles(v))), from_i8(e2m1x2(high_nibbles(v))));
}
template <class S>
inline void il_levels_u4(const uint8_t* pairs, int p, S&& sink) {
  const __m128i v = load128(pairs + 16 * p);
  sink(from_u8(low_nibbles(v)), from_u8(high_nibbles(v)));
}

#include "kernels/simd_interleaved.inc"

#include "kernels/simd_driver.inc"

void simd_axpy(float a, const float* x, float* y, size_t n) {
  const __m256 av = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  if (i < n) {
    const __m256i m = lanes_below8(static_cast<int>(n - i));
    _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(av, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
  }
}

const KernelTable kTable = {"avx2",          simd_matmul, simd_dequant_row, simd_dot, simd_dots, simd_axpy, simd_axpys,
                            simd_dots_rows, simd_axpys_rows, simd_softmax,   /*needs_row=*/false};

}  // namespace

const KernelTable* avx2_table() { return &kTable; }

}  // namespace strata::kernels::detail

#else

namespace strata::kernels::detail {
const KernelTable* avx2_table() { return nullptr; }
}  // namespace strata::kernels::detail

#endif
