#version 450
// y = x · Wᵀ (+ bias) for the CPU kernels' interleaved layouts
// (Packing::Interleaved16, kernels/kernel_abi.h: packs store their Q8_0,
// MXFP4 and Q4_K experts so), in linear.h's order for them: for output
// (r, o), acc = 0 and for each 32-column block b in order: s = the fma chain
// of the block's exact levels with x over its 32 columns; acc = fma(s,
// scale[o][b], acc); Q4_K also acc = fma(-(dmin·m)[o][b], xs, acc), xs the
// block's x summed in order. A workgroup is 4 outputs × 16 lanes for up to
// ROWS rows: lane j sums block 16k + j, lane 0 chains the blocks in order.
#include "common.glsl"
#define NO_WEIGHT_FN
#include "weights.glsl"

#define FMT_IL_Q8_0 18
#define FMT_IL_MXFP4 19
#define FMT_IL_Q4_K 20
#define ROWS 4
layout(local_size_x = 16, local_size_y = 4) in;

#ifdef GROUPED
#include "jobs.glsl"
layout(push_constant) uniform Push { Jobs jobs; } p;
#else
layout(push_constant) uniform Push {
  WeightRef w;
  Floats x;
  Floats y;
  uint n;
  uint x_stride, y_stride;
  uint head_rows, x_head, y_head;
} p;
#endif

shared float sums[4][ROWS][16], xsums[4][ROWS][16], scales[4][16], mins[4][16];

// Block b of output o: its level q[i] (i < 32), scale and min.
uint group_of(uint o, uint row_bytes) { return (o / 16u) * 16u * row_bytes; }

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  if (gl_WorkGroupID.x * 4 >= w.out_rows || gl_WorkGroupID.y * ROWS >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
#endif
  const uint lane = gl_LocalInvocationID.x, slot = gl_LocalInvocationID.y;
  const uint o = gl_WorkGroupID.x * 4 + slot, r0 = gl_WorkGroupID.y * ROWS;
  const bool live = o < w.out_rows;
  const uint blocks = w.in_cols / 32u, rr = o % 16u, g = live ? group_of(o, w.row_bytes) : 0u;
  precise float acc[ROWS];
  for (uint r = 0; r < ROWS; ++r) acc[r] = 0.0;
  for (uint b0 = 0; b0 < blocks; b0 += 16) {
    const uint b = b0 + lane;
    if (live && b < blocks) {
      precise float s[ROWS], xs[ROWS];
      for (uint r = 0; r < ROWS; ++r) s[r] = xs[r] = 0.0;
#if FMT == FMT_IL_Q8_0
      const uint blk = g + b * 544u;
      scales[slot][lane] = f16_value(u16_at(w.data, blk + 2u * rr));
      for (uint i = 0; i < 32; ++i) {
        const float q = float(i8_at(w.data, blk + 32u + 16u * i + rr));
#elif FMT == FMT_IL_MXFP4
      const uint blk = g + b * 272u;
      scales[slot][lane] = e8m0_half(byte_at(w.data, blk + rr));
      for (uint i = 0; i < 32; ++i) {
        const uint v = byte_at(w.data, blk + 16u + 16u * (i / 2u) + rr);
        const float q = e2m1x2((i & 1u) != 0u ? v >> 4 : v & 0xFu);
#elif FMT == FMT_IL_Q4_K
      const uint sb = g + (b / 8u) * 2304u, j = b % 8u;
      // The 6-bit scale and min of sub-block j from the row's 12 scale bytes
      // (byte k of row rr at 64 + 16k + rr), as scale_min_k4.
      uint sc, m;
      if (j < 4u) {
        sc = byte_at(w.data, sb + 64u + 16u * j + rr) & 63u;
        m = byte_at(w.data, sb + 64u + 16u * (j + 4u) + rr) & 63u;
      } else {
        sc = (byte_at(w.data, sb + 64u + 16u * (j + 4u) + rr) & 0xFu) |
             ((byte_at(w.data, sb + 64u + 16u * (j - 4u) + rr) >> 6) << 4);
        m = (byte_at(w.data, sb + 64u + 16u * (j + 4u) + rr) >> 4) |
            ((byte_at(w.data, sb + 64u + 16u * j + rr) >> 6) << 4);
      }
      precise float d1 = f16_value(u16_at(w.data, sb + 2u * rr)) * float(sc);
      precise float m1 = f16_value(u16_at(w.data, sb + 32u + 2u * rr)) * float(m);
      scales[slot][lane] = d1;
      mins[slot][lane] = m1;
      for (uint i = 0; i < 32; ++i) {
        const uint v = byte_at(w.data, sb + 256u + 256u * j + 16u * (i / 2u) + rr);
        const float q = float((i & 1u) != 0u ? v >> 4 : v & 0xFu);
#else
#error "unknown FMT"
#endif
        for (uint r = 0; r < ROWS; ++r)
          if (r0 + r < n) {
            const float xv = x.v[(r0 + r) * x_stride + 32u * b + i];
            s[r] = fma(q, xv, s[r]);
#if FMT == FMT_IL_Q4_K
            xs[r] = xs[r] + xv;
#endif
          }
      }
      for (uint r = 0; r < ROWS; ++r) {
        sums[slot][r][lane] = s[r];
        xsums[slot][r][lane] = xs[r];
      }
    }
    barrier();
    if (live && lane == 0)
      for (uint k = 0; k < 16 && b0 + k < blocks; ++k)
        for (uint r = 0; r < ROWS; ++r) {
          acc[r] = fma(sums[slot][r][k], scales[slot][k], acc[r]);
#if FMT == FMT_IL_Q4_K
          acc[r] = fma(-mins[slot][k], xsums[slot][r][k], acc[r]);
#endif
        }
    barrier();
  }
  if (live && lane == 0)
    for (uint r = 0; r < ROWS; ++r)
      if (r0 + r < n) {
        precise float v = acc[r];
        if (w.has_bias != 0) v = v + w.bias.v[o];
        y.v[(r0 + r) * y_stride + o] = v;
      }
}
