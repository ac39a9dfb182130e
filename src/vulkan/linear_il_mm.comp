#version 450
// y = x · Wᵀ (+ bias) for the CPU kernels' interleaved layouts and many
// batch rows (prefill, a layer's experts in a prompt): linear_il.comp's
// products with the same bits, in tiles. For output (r, o), acc = 0 and for
// each 32-column block b in order: s = the fma chain of the block's exact
// levels with x over its 32 columns; acc = fma(s, scale[o][b], acc); Q4_K
// also acc = fma(-(dmin·m)[o][b], xs, acc), xs the block's x summed in
// order (linear.h's order for these layouts). Each (r, o) is computed alone,
// so a row's result does not depend on the others in its batch, nor on
// which kernel ran it.
//
// A workgroup computes a tile of 64 outputs (4 interleaved groups of 16) ×
// 64 batch rows, invocation (to, tr) of 16 × 16 the 4 × 4 outputs
// 4to..4to+3 × rows 4tr..4tr+3. The tile's levels (as floats) and x go
// through shared memory KB columns at a time, each loaded once for the
// workgroup; every invocation reads 4 levels and 4 values of x as one vec4
// each per column.
#include "common.glsl"
#define NO_WEIGHT_FN
#include "weights.glsl"

#define FMT_IL_Q8_0 18
#define FMT_IL_MXFP4 19
#define FMT_IL_Q4_K 20
#define TILE 64u
#define KB 64u  // columns a pass: two blocks
layout(local_size_x = 16, local_size_y = 16) in;

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

shared vec4 levels[KB][TILE / 4u];      // [column][outputs / 4]
shared vec4 xt[KB][TILE / 4u + 1u];     // [column][rows / 4], padded against bank conflicts
shared float scales[KB / 32u][TILE];    // [block of the pass][output]
#if FMT == FMT_IL_Q4_K
shared float mins[KB / 32u][TILE];
shared float xsums[KB / 32u][TILE];     // [block][row]: the block's x summed in order
#endif

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  if (gl_WorkGroupID.x * TILE >= w.out_rows || gl_WorkGroupID.y * TILE >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
#endif
  const uint to = gl_LocalInvocationID.x, tr = gl_LocalInvocationID.y, me = tr * 16u + to;
  const uint o0 = gl_WorkGroupID.x * TILE, r0 = gl_WorkGroupID.y * TILE;
  const uint blocks = w.in_cols / 32u;

  precise float acc[4][4];
  [[unroll]] for (uint a = 0; a < 4; ++a)
    [[unroll]] for (uint b = 0; b < 4; ++b) acc[a][b] = 0.0;

  for (uint b0 = 0; b0 < blocks; b0 += KB / 32u) {
    const uint count = min(KB / 32u, blocks - b0);
    // Levels: element (output me % 64, column me / 64 + 4t) of the pass,
    // so consecutive invocations read consecutive bytes of a group.
    [[dont_unroll]] for (uint t0 = 0; t0 < KB / 4u; t0 += LOADS_AT_ONCE)
      [[unroll]] for (uint t = t0; t < t0 + LOADS_AT_ONCE; ++t) {
        const uint ol = me % TILE, c = me / TILE + 4u * t, o = o0 + ol;
        const uint j = b0 + c / 32u, i = c % 32u;
        float q = 0.0;
        if (o < w.out_rows && c < 32u * count) {
          const uint base = (o / 16u) * 16u * w.row_bytes, rr = o % 16u;
  #if FMT == FMT_IL_Q8_0
          q = float(i8_at(w.data, base + j * 544u + 32u + 16u * i + rr));
  #elif FMT == FMT_IL_MXFP4
          const uint v = byte_at(w.data, base + j * 272u + 16u + 16u * (i / 2u) + rr);
          q = e2m1x2((i & 1u) != 0u ? v >> 4 : v & 0xFu);
  #else
          const uint v = byte_at(w.data, base + (j / 8u) * 2304u + 256u + 256u * (j % 8u) + 16u * (i / 2u) + rr);
          q = float((i & 1u) != 0u ? v >> 4 : v & 0xFu);
  #endif
        }
        levels[c][ol / 4u][ol % 4u] = q;
      }
    // x: element (column me % 64, row me / 64 + 4t), reading rows along.
    [[dont_unroll]] for (uint t0 = 0; t0 < TILE / 4u; t0 += LOADS_AT_ONCE)
      [[unroll]] for (uint t = t0; t < t0 + LOADS_AT_ONCE; ++t) {
        const uint c = me % KB, row = me / KB + 4u * t, r = r0 + row;
        xt[c][row / 4u][row % 4u] = r < n && c < 32u * count ? x.v[r * x_stride + 32u * b0 + c] : 0.0;
      }
    // The blocks' scales (and Q4_K's mins), one (block, output) each.
    if (me < TILE * count) {
      const uint kb = me / TILE, ol = me % TILE, o = o0 + ol, j = b0 + kb;
      float sc = 0.0;
#if FMT == FMT_IL_Q4_K
      float mn = 0.0;
#endif
      if (o < w.out_rows) {
        const uint base = (o / 16u) * 16u * w.row_bytes, rr = o % 16u;
#if FMT == FMT_IL_Q8_0
        sc = f16_value(u16_at(w.data, base + j * 544u + 2u * rr));
#elif FMT == FMT_IL_MXFP4
        sc = e8m0_half(byte_at(w.data, base + j * 272u + rr));
#else
        // The 6-bit scale and min of sub-block jj from the row's 12 scale
        // bytes (byte k of row rr at 64 + 16k + rr), as linear_il.comp.
        const uint sb = base + (j / 8u) * 2304u, jj = j % 8u;
        uint s6, m6;
        if (jj < 4u) {
          s6 = byte_at(w.data, sb + 64u + 16u * jj + rr) & 63u;
          m6 = byte_at(w.data, sb + 64u + 16u * (jj + 4u) + rr) & 63u;
        } else {
          s6 = (byte_at(w.data, sb + 64u + 16u * (jj + 4u) + rr) & 0xFu) |
               ((byte_at(w.data, sb + 64u + 16u * (jj - 4u) + rr) >> 6) << 4);
          m6 = (byte_at(w.data, sb + 64u + 16u * (jj + 4u) + rr) >> 4) |
               ((byte_at(w.data, sb + 64u + 16u * jj + rr) >> 6) << 4);
        }
        precise float d1 = f16_value(u16_at(w.data, sb + 2u * rr)) * float(s6);
        precise float m1 = f16_value(u16_at(w.data, sb + 32u + 2u * rr)) * float(m6);
        sc = d1;
        mn = m1;
#endif
      }
      scales[kb][ol] = sc;
#if FMT == FMT_IL_Q4_K
      mins[kb][ol] = mn;
#endif
    }
    barrier();
#if FMT == FMT_IL_Q4_K
    if (me < TILE * count) {
      const uint kb = me / TILE, row = me % TILE;
      precise float s = 0.0;
      for (uint i = 0; i < 32u; ++i) s = s + xt[32u * kb + i][row / 4u][row % 4u];
      xsums[kb][row] = s;
    }
    barrier();
#endif
    for (uint kb = 0; kb < count; ++kb) {
      precise float s[4][4];
      [[unroll]] for (uint a = 0; a < 4; ++a)
        [[unroll]] for (uint b = 0; b < 4; ++b) s[a][b] = 0.0;
      for (uint i = 0; i < 32u; ++i) {
        const vec4 q = levels[32u * kb + i][to], xv = xt[32u * kb + i][tr];
        [[unroll]] for (uint a = 0; a < 4; ++a)
          [[unroll]] for (uint b = 0; b < 4; ++b) s[a][b] = fma(q[a], xv[b], s[a][b]);
      }
      [[unroll]] for (uint a = 0; a < 4; ++a) {
        const float sc = scales[kb][4u * to + a];
#if FMT == FMT_IL_Q4_K
        const float mn = mins[kb][4u * to + a];
#endif
        [[unroll]] for (uint b = 0; b < 4; ++b) {
          acc[a][b] = fma(s[a][b], sc, acc[a][b]);
#if FMT == FMT_IL_Q4_K
          acc[a][b] = fma(-mn, xsums[kb][4u * tr + b], acc[a][b]);
#endif
        }
      }
    }
    barrier();
  }

  [[unroll]] for (uint a = 0; a < 4; ++a) {
    const uint o = o0 + 4u * to + a;
    [[unroll]] for (uint b = 0; b < 4; ++b) {
      const uint r = r0 + 4u * tr + b;
      if (o < w.out_rows && r < n) {
        precise float v = acc[a][b];
        if (w.has_bias != 0) v = v + w.bias.v[o];
        y.v[r * y_stride + o] = v;
      }
    }
  }
}
