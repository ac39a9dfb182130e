// The scalar reference: per format, dequantize a row exactly as the format
// defines it (the formulas of ggml-quants.c for GGUF blocks, compressed-
// tensors / transformers for the Hugging Face packings), then take the fixed-
// order 16-lane fused dot product of linear.h. The SIMD files must agree with
// this bit for bit; the tests hold them to it.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/dtype.h"
#include "kernels/kernel_abi.h"

namespace strata::kernels::detail {

namespace {

constexpr size_t kLanes = 16;

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;  // little-endian, as safetensors and GGUF store it (x86 only)
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float load_scale(ScaleType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case ScaleType::F32: return load_f32(p + 4 * i);
    case ScaleType::BF16: return bf16_to_f32(load_u16(p + 2 * i));
    case ScaleType::F16: return f16_to_f32(load_u16(p + 2 * i));
  }
  return 0.0f;
}

// ggml's E8M0 decoding for MXFP4 (ggml-impl.h ggml_e8m0_to_fp32_half):
// 2^(e-128), half the block scale, because the E2M1 table below is doubled.
// Every product below is exact, so this equals the OCP value table × 2^(e-127)
// (transformers' convert_moe_packed_tensors), except that e = 255 stays finite.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

// E2M1 values ×2 (ggml kvalues_mxfp4): 0, .5, 1, 1.5, 2, 3, 4, 6 and negatives.
constexpr int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Q4_K's 6-bit scale and min of sub-block j (ggml-quants.c get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K's 6-bit scale of 16-value sub-block j (0..15), as ggml's
// dequantize_row_q3_K unpacks scales[12]: the low 4 bits are the low (j < 8)
// or high (j >= 8) nibble of byte j % 8, the high 2 bits are bits
// 2·(j / 4) .. 2·(j / 4) + 1 of byte 8 + j % 4.
inline int scale_k3(int j, const uint8_t* s) {
  const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

// The GGUF block formats added after Q8_0/Q4_K/Q6_K, one function each,
// written from ggml-quants.c dequantize_row_* (block layouts in
// ggml-common.h). `row` holds in / (block size) whole blocks. Every product
// of a block scale and a small integer is exact in f32; the formats with a
// min (Q4_1, Q5_1, Q2_K, Q5_K) then round once when it is added.

// block_q4_0 {f16 d; qs[16]}: element j is the low nibble of qs[j], element
// j + 16 the high nibble; W = (q - 8) · d.
void dequant_q4_0(const uint8_t* row, size_t in, float* dst) {
  for (size_t b = 0; b < in / 32; ++b, row += 18, dst += 32) {
    const float d = f16_to_f32(load_u16(row));
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((row[2 + j] & 0xF) - 8) * d;
      dst[j + 16] = static_cast<float>((row[2 + j] >> 4) - 8) * d;
    }
  }
}

// block_q4_1 {f16 d, m; qs[16]}: nibbles as Q4_0, unsigned; W = q · d + m.
void dequant_q4_1(const uint8_t* row, size_t in, float* dst) {
  for (size_t b = 0; b < in / 32; ++b, row += 20, dst += 32) {
    const float d = f16_to_f32(load_u16(row)), m = f16_to_f32(load_u16(row + 2));
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(row[4 + j] & 0xF) * d + m;
      dst[j + 16] = static_cast<float>(row[4 + j] >> 4) * d + m;
    }
  }
}

// Q5_0 / Q5_1: the Q4 nibbles plus a fifth bit, bit j of the little-endian
// u32 qh for element j (0..31).
inline int q5_value(const uint8_t* qs, uint32_t qh, int i) {
  const int nib = i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
  return nib | static_cast<int>(((qh >> i) & 1) << 4);
}

// block_q5_0 {f16 d; qh[4]; qs[16]}: W = (q - 16) · d.
void dequant_q5_0(const uint8_t* row, size_t in, float* dst) {
  for (size_t b = 0; b < in / 32; ++b, row += 22, dst += 32) {
    const float d = f16_to_f32(load_u16(row));
    const uint32_t qh = load_u32(row + 2);
    for (int i = 0; i < 32; ++i) dst[i] = static_cast<float>(q5_value(row + 6, qh, i) - 16) * d;
  }
}

// block_q5_1 {f16 d, m; qh[4]; qs[16]}: W = q · d + m.
void dequant_q5_1(const uint8_t* row, size_t in, float* dst) {
  for (size_t b = 0; b < in / 32; ++b, row += 24, dst += 32) {
    const float d = f16_to_f32(load_u16(row)), m = f16_to_f32(load_u16(row + 2));
    const uint32_t qh = load_u32(row + 4);
    for (int i = 0; i < 32; ++i) dst[i] = static_cast<float>(q5_value(row + 8, qh, i)) * d + m;
  }
}

// block_q2_K {scales[16]; qs[64]; f16 d, dmin}: 16 sub-blocks of 16, scale
// byte s of sub-block k holds sc (low nibble) and m (high nibble);
// W = (d·sc) · q - dmin·m. Each 128-value half reads 32 bytes of qs: sub-
// blocks 2j and 2j+1 take bits 2j..2j+1 of bytes 0..15 and 16..31.
void dequant_q2_k(const uint8_t* row, size_t in, float* dst) {
  for (size_t b = 0; b < in / 256; ++b, row += 84) {
    const uint8_t* sc = row;
    const uint8_t* q = row + 16;
    const float d = f16_to_f32(load_u16(row + 80)), dmin = f16_to_f32(load_u16(row + 82));
    for (int half = 0; half < 2; ++half, q += 32)
      for (int k = 0; k < 8; ++k) {  // sub-block 8·half + k
        const uint8_t s = *sc++;
        const float dl = d * static_cast<float>(s & 0xF), ml = dmin * static_cast<float>(s >> 4);
        const uint8_t* qk = q + 16 * (k & 1);
        for (int l = 0; l < 16; ++l) *dst++ = dl * static_cast<float>((qk[l] >> (2 * (k / 2))) & 3) - ml;
      }
  }
}

// block_q3_K {hmask[32]; qs[64]; scales[12]; f16 d}: 16 sub-blocks of 16,
// low two bits laid out as Q2_K's; the third bit of sub-block 8·half + k is
// bit 4·half + k / 2 of hmask (bytes 0..15 or 16..31 as for qs), and a clear
// bit subtracts 4: q in -4..3; W = (d · (scale - 32)) · q.
void dequant_q3_k(const uint8_t* row, size_t in, float* dst) {
  for (size_t b = 0; b < in / 256; ++b, row += 110) {
    const uint8_t* hm = row;
    const uint8_t* q = row + 32;
    const float d = f16_to_f32(load_u16(row + 108));
    for (int half = 0; half < 2; ++half, q += 32)
      for (int k = 0; k < 8; ++k) {
        const float dl = d * static_cast<float>(scale_k3(8 * half + k, row + 96) - 32);
        const int shift = 2 * (k / 2), bit = 4 * half + k / 2, off = 16 * (k & 1);
        for (int l = 0; l < 16; ++l) {
          const int v = ((q[off + l] >> shift) & 3) - ((hm[off + l] >> bit) & 1 ? 0 : 4);
          *dst++ = dl * static_cast<float>(v);
        }
      }
  }
}

// block_q5_K {f16 d, dmin; scales[12]; qh[32]; qs[128]}: Q4_K with a fifth
// bit: sub-block j (0..7) takes bit j of qh[l] for its element l;
// W = (d·sc) · q - dmin·m with q in 0..31.
void dequant_q5_k(const uint8_t* row, size_t in, float* dst) {
  for (size_t b = 0; b < in / 256; ++b, row += 176) {
    const float d = f16_to_f32(load_u16(row)), dmin = f16_to_f32(load_u16(row + 2));
    const uint8_t* qh = row + 16;
    const uint8_t* q = row + 48;
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      scale_min_k4(j, row + 4, s, m);
      const float d1 = d * s, m1 = dmin * m;
      const uint8_t* qj = q + 32 * (j / 2);
      for (int l = 0; l < 32; ++l) {
        const int nib = j % 2 ? qj[l] >> 4 : qj[l] & 0xF;
        *dst++ = d1 * static_cast<float>(nib | (((qh[l] >> j) & 1) << 4)) - m1;
      }
    }
  }
}

void dequant_row(const MatDesc& w, int64_t o, float* dst) {
  if (w.fmt == Fmt::IL_Q8_0 || w.fmt == Fmt::IL_MXFP4 || w.fmt == Fmt::IL_Q4_K) return il_dequant_row(w, o, dst);
  const size_t in = static_cast<size_t>(w.in);
  const uint8_t* row = w.data + static_cast<size_t>(o) * w.row_bytes;
  const uint8_t* srow = w.scales ? w.scales + static_cast<size_t>(o) * w.scale_row_bytes : nullptr;
  switch (w.fmt) {
    case Fmt::F32:
      std::memcpy(dst, row, in * sizeof(float));
      break;
    case Fmt::BF16:
      for (size_t i = 0; i < in; ++i) dst[i] = bf16_to_f32(load_u16(row + 2 * i));
      break;
    case Fmt::F16:
      for (size_t i = 0; i < in; ++i) dst[i] = f16_to_f32(load_u16(row + 2 * i));
      break;
    case Fmt::F8_E4M3:
      for (size_t i = 0; i < in; ++i) dst[i] = fp8_e4m3_to_f32(row[i]);
      if (w.block_scale) {
        const float* s = w.block_scale + (w.row_offset + o) / w.block_out * w.block_cols;
        for (size_t i = 0; i < in; ++i) dst[i] *= s[static_cast<int64_t>(i) / w.block_in];
      }
      break;
    case Fmt::I8_ROW: {
      const float s = load_scale(w.scale_type, srow, 0);
      for (size_t i = 0; i < in; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(row[i])) * s;
      break;
    }
    case Fmt::I4_GROUP:
      // compressed-tensors unpack_from_int32: weight 8k+j is bits 4j..4j+3 of
      // word k, stored offset by +8; symmetric, so W = (u - 8) · scale.
      for (size_t g = 0; g < in / static_cast<size_t>(w.group); ++g) {
        const float s = load_scale(w.scale_type, srow, static_cast<int64_t>(g));
        for (size_t j = 0; j < static_cast<size_t>(w.group); ++j) {
          const size_t i = g * static_cast<size_t>(w.group) + j;
          const uint32_t word = load_u32(row + 4 * (i / 8));
          const int q = static_cast<int>((word >> (4 * (i % 8))) & 0xF) - 8;
          dst[i] = static_cast<float>(q) * s;
        }
      }
      break;
    case Fmt::MXFP4_SPLIT:
      // transformers convert_moe_packed_tensors: low nibble -> even element.
      for (size_t g = 0; g < in / 32; ++g) {
        const float d = e8m0_half(srow[g]);
        for (size_t k = 0; k < 16; ++k) {
          const uint8_t b = row[g * 16 + k];
          dst[g * 32 + 2 * k] = static_cast<float>(kE2M1x2[b & 0xF]) * d;
          dst[g * 32 + 2 * k + 1] = static_cast<float>(kE2M1x2[b >> 4]) * d;
        }
      }
      break;
    case Fmt::MXFP4:
      // ggml block_mxfp4 {e; qs[16]}: low nibbles are elements 0..15, high 16..31.
      for (size_t b = 0; b < in / 32; ++b) {
        const uint8_t* blk = row + b * 17;
        const float d = e8m0_half(blk[0]);
        for (size_t j = 0; j < 16; ++j) {
          dst[b * 32 + j] = static_cast<float>(kE2M1x2[blk[1 + j] & 0xF]) * d;
          dst[b * 32 + j + 16] = static_cast<float>(kE2M1x2[blk[1 + j] >> 4]) * d;
        }
      }
      break;
    case Fmt::Q8_0:
      // block_q8_0 {f16 d; int8 qs[32]}: W = qs · d.
      for (size_t b = 0; b < in / 32; ++b) {
        const uint8_t* blk = row + b * 34;
        const float d = f16_to_f32(load_u16(blk));
        for (size_t j = 0; j < 32; ++j) dst[b * 32 + j] = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * d;
      }
      break;
    case Fmt::Q4_0: dequant_q4_0(row, in, dst); break;
    case Fmt::Q4_1: dequant_q4_1(row, in, dst); break;
    case Fmt::Q5_0: dequant_q5_0(row, in, dst); break;
    case Fmt::Q5_1: dequant_q5_1(row, in, dst); break;
    case Fmt::Q2_K: dequant_q2_k(row, in, dst); break;
    case Fmt::Q3_K: dequant_q3_k(row, in, dst); break;
    case Fmt::Q5_K: dequant_q5_k(row, in, dst); break;
    case Fmt::Q4_K:
      // block_q4_K {f16 d, dmin; scales[12]; qs[128]}: 8 sub-blocks of 32,
      // W = d·sc · q - dmin·m; sub-blocks 2k, 2k+1 share qs[32k..32k+31]
      // (low nibbles, then high nibbles).
      for (size_t b = 0; b < in / 256; ++b) {
        const uint8_t* blk = row + b * 144;
        const float d = f16_to_f32(load_u16(blk));
        const float dmin = f16_to_f32(load_u16(blk + 2));
        const uint8_t* sc = blk + 4;
        const uint8_t* q = blk + 16;
        float* y = dst + b * 256;
        for (int j = 0; j < 8; j += 2) {
          uint8_t s, m;
          scale_min_k4(j, sc, s, m);
          const float d1 = d * s, m1 = dmin * m;
          scale_min_k4(j + 1, sc, s, m);
          const float d2 = d * s, m2 = dmin * m;
          for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
          for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
          q += 32;
        }
      }
      break;
    case Fmt::Q6_K:
      // block_q6_K {ql[128]; qh[64]; int8 scales[16]; f16 d}: 6-bit q - 32,
      // W = d · scale[16-group] · q, in ggml's interleaved nibble order.
      for (size_t b = 0; b < in / 256; ++b) {
        const uint8_t* blk = row + b * 210;
        const uint8_t* ql = blk;
        const uint8_t* qh = blk + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
        const float d = f16_to_f32(load_u16(blk + 208));
        float* y = dst + b * 256;
        for (int half = 0; half < 2; ++half) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
            y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
          }
          y += 128;
          ql += 64;
          qh += 32;
          sc += 8;
        }
      }
      break;
    case Fmt::IL_Q8_0:
    case Fmt::IL_MXFP4:
    case Fmt::IL_Q4_K: break;  // handled above
  }
}

// The sixteen lanes' sum by the SIMD kernels' fixed tree (vreduce):
// acc[j] += acc[j + w] for w = 8, 4, 2, 1.
float lane_sum(float (&acc)[kLanes]) {
  for (size_t w = kLanes / 2; w > 0; w /= 2)
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

float dot(const float* a, const float* b, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] = std::fma(a[i + j], b[i + j], acc[j]);
  for (size_t j = 0; i + j < n; ++j) acc[j] = std::fma(a[i + j], b[i + j], acc[j]);
  return lane_sum(acc);
}

void dots(const float* a, const float* const* b, size_t count, size_t n, float* out) {
  for (size_t j = 0; j < count; ++j) out[j] = dot(a, b[j], n);
}

void axpy(float a, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void axpys(const float* w, const float* const* x, size_t count, float* y, size_t n) {
  for (size_t j = 0; j < count; ++j) axpy(w[j], x[j], y, n);
}

void dots_rows(const float* const* a, size_t rows, const float* const* b, size_t count, size_t n, float* out,
               size_t ldo) {
  for (size_t r = 0; r < rows; ++r) dots(a[r], b, count, n, out + r * ldo);
}

void axpys_rows(const float* const* w, size_t rows, const float* const* x, size_t count, float* const* y, size_t n) {
  for (size_t r = 0; r < rows; ++r) axpys(w[r], x, count, y[r], n);
}

// ---- interleaved layouts (Packing::Interleaved16) --------------------------

// Block b (32 columns) of row o: W[o][32b + i] = q[i] · scale - min, q[i] the
// block's exact levels.
struct IlBlock {
  float q[32];
  float scale = 0.0f, min = 0.0f;
};

void il_block(const MatDesc& w, int64_t o, int64_t b, IlBlock& out) {
  const uint8_t* group = w.data + static_cast<size_t>(o / kIlRows) * kIlRows * w.row_bytes;
  const int64_t r = o % kIlRows;
  switch (w.fmt) {
    case Fmt::IL_Q8_0: {
      const uint8_t* blk = group + static_cast<size_t>(b) * kIlQ8_0Bytes;
      out.scale = f16_to_f32(load_u16(blk + 2 * r));
      for (int i = 0; i < 32; ++i) out.q[i] = static_cast<float>(static_cast<int8_t>(blk[32 + 16 * i + r]));
      break;
    }
    case Fmt::IL_MXFP4: {
      const uint8_t* blk = group + static_cast<size_t>(b) * kIlMxfp4Bytes;
      out.scale = e8m0_half(blk[r]);
      for (int p = 0; p < 16; ++p) {
        const uint8_t v = blk[16 + 16 * p + r];
        out.q[2 * p] = static_cast<float>(kE2M1x2[v & 0xF]);
        out.q[2 * p + 1] = static_cast<float>(kE2M1x2[v >> 4]);
      }
      break;
    }
    case Fmt::IL_Q4_K: {
      const uint8_t* sb = group + static_cast<size_t>(b / 8) * kIlQ4_KBytes;
      uint8_t packed[12];
      for (int k = 0; k < 12; ++k) packed[k] = sb[64 + 16 * k + r];
      uint8_t sc, m;
      scale_min_k4(static_cast<int>(b % 8), packed, sc, m);
      out.scale = f16_to_f32(load_u16(sb + 2 * r)) * static_cast<float>(sc);
      out.min = f16_to_f32(load_u16(sb + 32 + 2 * r)) * static_cast<float>(m);
      const uint8_t* pairs = sb + 256 + 256 * (b % 8);
      for (int p = 0; p < 16; ++p) {
        const uint8_t v = pairs[16 * p + r];
        out.q[2 * p] = static_cast<float>(v & 0xF);
        out.q[2 * p + 1] = static_cast<float>(v >> 4);
      }
      break;
    }
    default: break;
  }
}

// The order linear.h defines for interleaved formats: per block a fused chain
// over its 32 columns, then one fused multiply by the row's block scale (and,
// Q4_K, one by its min and the block's plain sum of x).
void il_matmul(const MatDesc& w, const float* x, size_t n, float* y, size_t ldy, int64_t o0, int64_t o1) {
  const size_t in = static_cast<size_t>(w.in);
  const int64_t blocks = w.in / 32;
  IlBlock blk;
  for (int64_t o = o0; o < o1; ++o) {
    for (size_t r = 0; r < n; ++r) {
      const float* xr = x + r * in;
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        il_block(w, o, b, blk);
        const float* xb = xr + 32 * b;
        float s = 0.0f;
        for (int i = 0; i < 32; ++i) s = std::fma(blk.q[i], xb[i], s);
        acc = std::fma(s, blk.scale, acc);
        if (w.fmt == Fmt::IL_Q4_K) {
          float xs = 0.0f;
          for (int i = 0; i < 32; ++i) xs += xb[i];
          acc = std::fma(-blk.min, xs, acc);
        }
      }
      y[r * ldy + static_cast<size_t>(o)] = w.bias ? acc + w.bias[o] : acc;
    }
  }
}

bool is_interleaved(Fmt f) { return f == Fmt::IL_Q8_0 || f == Fmt::IL_MXFP4 || f == Fmt::IL_Q4_K; }

void matmul(const MatDesc& w, const float* x, size_t n, float* y, size_t ldy, int64_t o0, int64_t o1) {
  if (is_interleaved(w.fmt)) return il_matmul(w, x, n, y, ldy, o0, o1);
  const size_t in = static_cast<size_t>(w.in);
  float* row = w.row;
  for (int64_t o = o0; o < o1; ++o) {
    dequant_row(w, o, row);
    for (size_t r = 0; r < n; ++r) {
      const float v = dot(row, x + r * in, in);
      y[r * ldy + static_cast<size_t>(o)] = w.bias ? v + w.bias[o] : v;
    }
  }
}

}  // namespace

float exp_shifted(float d) {
  if (d != d) return d;
  if (!(d >= kExpLow)) return 0.0f;
  const float n = std::fma(d, kExpLog2e, kExpRound) - kExpRound;
  float r = std::fma(-n, kExpLn2Hi, d);
  r = std::fma(-n, kExpLn2Lo, r);
  float p = kExpP[0];
  for (int k = 1; k < 6; ++k) p = std::fma(p, r, kExpP[k]);
  const float e = std::fma(p, r * r, r) + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return e * std::bit_cast<float>(bits);
}

void softmax(float* x, size_t n) {
  if (n == 0) return;
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  float acc[kLanes] = {};
  for (size_t i = 0; i < n; ++i) {
    x[i] = exp_shifted(x[i] - m);
    acc[i % kLanes] += x[i];
  }
  const float sum = lane_sum(acc);
  if (sum != sum) {  // NaN's bits differ by how they arose: one for every ISA
    for (size_t i = 0; i < n; ++i) x[i] = kSoftmaxNaN;
    return;
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

void il_dequant_row(const MatDesc& w, int64_t o, float* dst) {
  IlBlock blk;
  for (int64_t b = 0; b < w.in / 32; ++b) {
    il_block(w, o, b, blk);
    for (int i = 0; i < 32; ++i) {
      const float v = blk.q[i] * blk.scale;
      dst[32 * b + i] = w.fmt == Fmt::IL_Q4_K ? v - blk.min : v;
    }
  }
}

const KernelTable kScalarTable = {"scalar", matmul, dequant_row, dot,     dots, axpy, axpys, dots_rows, axpys_rows,
                                   softmax,  /*needs_row=*/true};

}  // namespace strata::kernels::detail
