// One weight of a matrix in its stored format, dequantized exactly as the CPU
// kernels do (kernels/kernels_scalar.cpp: ggml-quants.c's formulas for the
// GGUF blocks, compressed-tensors and transformers for the Hugging Face
// packings). FMT picks the format at compile time; its numbers are
// vulkan/vk_formats.h's WeightFormat. Every product of a block scale and a
// small integer is exact in f32; the formats with a min round once more when
// it is subtracted, the same operations in the same order as on the CPU.

#define FMT_F32 0
#define FMT_BF16 1
#define FMT_F16 2
#define FMT_F8_E4M3 3
#define FMT_I8_ROW 4
#define FMT_I4_GROUP 5
#define FMT_MXFP4_SPLIT 6
#define FMT_Q8_0 7
#define FMT_Q4_0 8
#define FMT_Q4_1 9
#define FMT_Q5_0 10
#define FMT_Q5_1 11
#define FMT_Q2_K 12
#define FMT_Q3_K 13
#define FMT_Q4_K 14
#define FMT_Q5_K 15
#define FMT_Q6_K 16
#define FMT_MXFP4 17

// A matrix as the shaders see it (vk_formats.h's WeightRef, the same layout).
struct WeightRef {
  Bytes data;          // the rows, row_bytes apart
  Bytes scales;        // I8_ROW, I4_GROUP, MXFP4_SPLIT: scale_row_bytes per row, in scale_type
  Floats block_scale;  // F8_E4M3 with a scale grid
  Floats bias;
  uint out_rows, in_cols, row_bytes, scale_row_bytes;
  uint scale_type;     // 0 f32, 1 bf16, 2 f16
  uint group;          // I4_GROUP: values per scale
  uint block_out, block_in, block_cols, row_offset;
  uint has_bias, has_block_scale;
};

uint byte_at(Bytes b, uint k) { return uint(b.v[k]); }
uint u16_at(Bytes b, uint k) { return uint(b.v[k]) | (uint(b.v[k + 1]) << 8); }
uint u32_at(Bytes b, uint k) { return u16_at(b, k) | (u16_at(b, k + 2) << 16); }
int i8_at(Bytes b, uint k) { return int(int8_t(b.v[k])); }

float scale_at(WeightRef w, uint o, uint s) {
  const uint k = o * w.scale_row_bytes;
  if (w.scale_type == 0) return uintBitsToFloat(u32_at(w.scales, k + 4 * s));
  if (w.scale_type == 1) return bf16_value(u16_at(w.scales, k + 2 * s));
  return f16_value(u16_at(w.scales, k + 2 * s));
}

// OCP FP8 E4M3 ("fn"): no infinities, S.1111.111 is NaN, bias 7.
float fp8_e4m3_value(uint b) {
  const uint sign = (b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 0x7u;
  if (e == 0xfu && m == 0x7u) return uintBitsToFloat(sign | 0x7fc00000u);
  if (e == 0u) {
    const float v = float(m) * (1.0 / 512.0);
    return sign != 0u ? -v : v;
  }
  return uintBitsToFloat(sign | ((e + 120u) << 23) | (m << 20));
}

// ggml's E8M0 for MXFP4, half the block scale: 2^(e-128) (e = 0, 1 subnormal).
float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23)); }

// E2M1 values ×2 (ggml kvalues_mxfp4).
float e2m1x2(uint q) {
  const int t[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return float(t[q & 15u]);
}

// Where weight() reads a matrix's bytes: W_ROW(w, o) is where output o's
// row starts, and W_BYTE (a byte), W_I8, W_U16, W_U32 (any alignment),
// W_HALF (2-aligned), W_F32 (4-aligned) read at a byte offset from there.
// By default from the matrix in device memory; a shader that stages rows in
// shared memory (linear_row.comp) defines W_STAGED and its own.
#ifndef W_STAGED
#define W_ROW(w, o) ((o) * (w).row_bytes)
#define W_BYTE(w, k) byte_at((w).data, (k))
#define W_I8(w, k) i8_at((w).data, (k))
#define W_U16(w, k) u16_at((w).data, (k))
#define W_U32(w, k) u32_at((w).data, (k))
#define W_HALF(w, k) uint(Halves((w).data).v[(k) >> 1])
#define W_F32(w, k) Floats((w).data).v[(k) >> 2]
#endif

// Q4_K / Q5_K: the 6-bit scale (which = 0) or min (which = 1) of sub-block j.
uint scale_min_k4(WeightRef w, uint q, uint j, uint which) {
  if (j < 4u) return W_BYTE(w, q + j + 4u * which) & 63u;
  if (which == 0u) return (W_BYTE(w, q + j + 4u) & 0xFu) | ((W_BYTE(w, q + j - 4u) >> 6) << 4);
  return (W_BYTE(w, q + j + 4u) >> 4) | ((W_BYTE(w, q + j) >> 6) << 4);
}

// Q5_0 / Q5_1: the nibble of element i (0..31) and bit i of qh.
uint q5_value(WeightRef w, uint qs, uint qh, uint i) {
  const uint nib = i < 16u ? W_BYTE(w, qs + i) & 0xFu : W_BYTE(w, qs + i - 16u) >> 4;
  return nib | (((qh >> i) & 1u) << 4);
}

#ifndef NO_WEIGHT_FN
float weight(WeightRef w, uint o, uint i) {
  const uint row = W_ROW(w, o);
#if FMT == FMT_F32
  return W_F32(w, row + 4u * i);
#elif FMT == FMT_BF16
  return bf16_value(W_HALF(w, row + 2u * i));
#elif FMT == FMT_F16
  return f16_value(W_HALF(w, row + 2u * i));
#elif FMT == FMT_F8_E4M3
  precise float v = fp8_e4m3_value(W_BYTE(w, row + i));
  if (w.has_block_scale != 0u)
    v = v * w.block_scale.v[(w.row_offset + o) / w.block_out * w.block_cols + i / w.block_in];
  return v;
#elif FMT == FMT_I8_ROW
  precise float v = float(W_I8(w, row + i)) * scale_at(w, o, 0u);
  return v;
#elif FMT == FMT_I4_GROUP
  const uint word = W_U32(w, row + 4u * (i / 8u));
  const int q = int((word >> (4u * (i % 8u))) & 0xFu) - 8;
  precise float v = float(q) * scale_at(w, o, i / w.group);
  return v;
#elif FMT == FMT_MXFP4_SPLIT
  const uint b = W_BYTE(w, row + i / 2u);
  precise float v = e2m1x2((i & 1u) != 0u ? b >> 4 : b & 0xFu) * e8m0_half(byte_at(w.scales, o * w.scale_row_bytes + i / 32u));
  return v;
#elif FMT == FMT_MXFP4
  const uint blk = row + (i / 32u) * 17u, j = i % 32u;
  const uint b = W_BYTE(w, blk + 1u + (j % 16u));
  precise float v = e2m1x2(j < 16u ? b & 0xFu : b >> 4) * e8m0_half(W_BYTE(w, blk));
  return v;
#elif FMT == FMT_Q8_0
  // Blocks are 34 bytes from a 256-aligned start: the scale is one 16-bit load.
  const uint blk = row + (i / 32u) * 34u;
  precise float v = float(W_I8(w, blk + 2u + i % 32u)) * f16_value(W_HALF(w, blk));
  return v;
#elif FMT == FMT_Q4_0
  const uint blk = row + (i / 32u) * 18u, j = i % 32u;
  const uint b = W_BYTE(w, blk + 2u + (j % 16u));
  precise float v = float(int(j < 16u ? b & 0xFu : b >> 4) - 8) * f16_value(W_U16(w, blk));
  return v;
#elif FMT == FMT_Q4_1
  const uint blk = row + (i / 32u) * 20u, j = i % 32u;
  const uint b = W_BYTE(w, blk + 4u + (j % 16u));
  precise float v = float(j < 16u ? b & 0xFu : b >> 4) * f16_value(W_U16(w, blk)) + f16_value(W_U16(w, blk + 2u));
  return v;
#elif FMT == FMT_Q5_0
  const uint blk = row + (i / 32u) * 22u;
  precise float v = float(int(q5_value(w, blk + 6u, W_U32(w, blk + 2u), i % 32u)) - 16) * f16_value(W_U16(w, blk));
  return v;
#elif FMT == FMT_Q5_1
  const uint blk = row + (i / 32u) * 24u;
  precise float v = float(q5_value(w, blk + 8u, W_U32(w, blk + 4u), i % 32u)) * f16_value(W_U16(w, blk)) +
                    f16_value(W_U16(w, blk + 2u));
  return v;
#elif FMT == FMT_Q2_K
  // 16 sub-blocks of 16: sub-block 8·half + k reads bits 2·(k/2) of bytes
  // 16·(k&1) .. +15 of its half's 32 bytes of qs.
  const uint blk = row + (i / 256u) * 84u, j = i % 256u;
  const uint half_ = j / 128u, k = (j % 128u) / 16u, l = j % 16u;
  const uint s = W_BYTE(w, blk + 8u * half_ + k);
  precise float dl = f16_value(W_U16(w, blk + 80u)) * float(s & 0xFu);
  precise float ml = f16_value(W_U16(w, blk + 82u)) * float(s >> 4);
  const uint q = (W_BYTE(w, blk + 16u + 32u * half_ + 16u * (k & 1u) + l) >> (2u * (k / 2u))) & 3u;
  precise float v = dl * float(q) - ml;
  return v;
#elif FMT == FMT_Q3_K
  const uint blk = row + (i / 256u) * 110u, j = i % 256u;
  const uint half_ = j / 128u, k = (j % 128u) / 16u, l = j % 16u, sb = 8u * half_ + k;
  const uint lo = sb < 8u ? W_BYTE(w, blk + 96u + sb) & 0xFu : W_BYTE(w, blk + 96u + sb - 8u) >> 4;
  const uint hi = (W_BYTE(w, blk + 96u + 8u + sb % 4u) >> (2u * (sb / 4u))) & 3u;
  precise float dl = f16_value(W_U16(w, blk + 108u)) * float(int(lo | (hi << 4)) - 32);
  const uint off = 16u * (k & 1u) + l;
  const int q = int((W_BYTE(w, blk + 32u + 32u * half_ + off) >> (2u * (k / 2u))) & 3u) -
                (((W_BYTE(w, blk + off) >> (4u * half_ + k / 2u)) & 1u) != 0u ? 0 : 4);
  precise float v = dl * float(q);
  return v;
#elif FMT == FMT_Q4_K
  const uint blk = row + (i / 256u) * 144u, j = i % 256u;
  const uint sb = j / 32u, l = j % 32u;
  precise float d1 = f16_value(W_U16(w, blk)) * float(scale_min_k4(w, blk + 4u, sb, 0u));
  precise float m1 = f16_value(W_U16(w, blk + 2u)) * float(scale_min_k4(w, blk + 4u, sb, 1u));
  const uint b = W_BYTE(w, blk + 16u + 32u * (sb / 2u) + l);
  precise float v = d1 * float((sb & 1u) != 0u ? b >> 4 : b & 0xFu) - m1;
  return v;
#elif FMT == FMT_Q5_K
  const uint blk = row + (i / 256u) * 176u, j = i % 256u;
  const uint sb = j / 32u, l = j % 32u;
  precise float d1 = f16_value(W_U16(w, blk)) * float(scale_min_k4(w, blk + 4u, sb, 0u));
  precise float m1 = f16_value(W_U16(w, blk + 2u)) * float(scale_min_k4(w, blk + 4u, sb, 1u));
  const uint b = W_BYTE(w, blk + 48u + 32u * (sb / 2u) + l);
  const uint nib = (sb & 1u) != 0u ? b >> 4 : b & 0xFu;
  precise float v = d1 * float(nib | (((W_BYTE(w, blk + 16u + l) >> sb) & 1u) << 4)) - m1;
  return v;
#elif FMT == FMT_Q6_K
  // Per 128-value half: element 32·t + l (t = 0..3) takes ql[l + 32·(t&1)]'s
  // low (t < 2) or high nibble and bits 2t of qh[l]; scale sc[l/16 + 2t].
  const uint blk = row + (i / 256u) * 210u, j = i % 256u;
  const uint half_ = j / 128u, t = (j % 128u) / 32u, l = j % 32u;
  const uint qlb = W_BYTE(w, blk + 64u * half_ + l + 32u * (t & 1u));
  const uint nib = t < 2u ? qlb & 0xFu : qlb >> 4;
  const uint hi = (W_BYTE(w, blk + 128u + 32u * half_ + l) >> (2u * t)) & 3u;
  const int q = int(nib | (hi << 4)) - 32;
  precise float v = f16_value(W_U16(w, blk + 208u)) * float(W_I8(w, blk + 192u + 8u * half_ + l / 16u + 2u * t)) * float(q);
  return v;
#else
#error "unknown FMT"
#endif
}
#endif
