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
// TILE_R batch rows (64 unless the includer's build sets it), invocation
// (to, tr) of 16 × TILE_R/4 the 4 × 4 outputs 4to..4to+3 × rows
// 4tr..4tr+3. The tile's levels (as floats) and x go through shared memory
// KB columns at a time, each loaded once for the workgroup, the levels a
// word of four rows at a time; every invocation reads 4 levels and 4 values
// of x as one vec4 each per column. The next pass's loads are issued before
// this pass is summed.
#include "common.glsl"
#define NO_WEIGHT_FN
#include "weights.glsl"

#define FMT_IL_Q8_0 18
#define FMT_IL_MXFP4 19
#define FMT_IL_Q4_K 20
#define TILE 64u     // outputs a workgroup
#ifndef TILE_R
#define TILE_R 64u   // batch rows a workgroup: 32 or 64 (a pass's scales take 128 invocations)
#endif
#define THREADS (4u * TILE_R)
#define KB 64u  // columns a pass: two blocks
layout(local_size_x = 16, local_size_y = TILE_R / 4u) in;

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
shared vec4 xt[KB][TILE_R / 4u + 1u];     // [column][rows / 4], padded against bank conflicts
shared float scales[KB / 32u][TILE];    // [block of the pass][output]
#if FMT == FMT_IL_Q4_K
shared float mins[KB / 32u][TILE];
shared float xsums[KB / 32u][TILE_R];   // [block][row]: the block's x summed in order
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words { uint v[]; };

// A pass's levels are read as words: a word holds 4 consecutive rows of a
// group at one column (Q8_0), or at a pair of columns (MXFP4, Q4_K: the low
// nibbles the even column), so it lands in shared memory as one vec4 per
// column. WPB words per 16-row group and block, the group's block levels
// contiguous from its first byte.
#if FMT == FMT_IL_Q8_0
#define WPB 128u
#else
#define WPB 64u
#endif
#define LEVEL_WORDS (TILE / 16u * (KB / 32u) * WPB / THREADS)  // an invocation's, a pass
#define X_VALUES (KB * TILE_R / THREADS)

// What an invocation brings from device memory for the pass at block b0:
// loaded for the next pass while this one is summed, so that a workgroup
// waits on memory once, at the start, not once a pass.
struct Pass {
  uint words[LEVEL_WORDS];
  float xs[X_VALUES];
  float scale;
#if FMT == FMT_IL_Q4_K
  float min;
#endif
};

// Word k of the pass: group k / (2 WPB) of the tile, its block (k / WPB) % 2, word k % WPB.
uint level_byte(WeightRef w, uint o0, uint b0, uint k) {
  const uint g = k / (2u * WPB), kb = (k / WPB) % 2u, wi = k % WPB, j = b0 + kb;
  const uint base = (o0 / 16u + g) * 16u * w.row_bytes;
#if FMT == FMT_IL_Q8_0
  return base + j * 544u + 32u + 4u * wi;
#elif FMT == FMT_IL_MXFP4
  return base + j * 272u + 16u + 4u * wi;
#else
  return base + (j / 8u) * 2304u + 256u + 256u * (j % 8u) + 4u * wi;
#endif
}

void load_pass(WeightRef w, Floats x, uint n, uint x_stride, uint o0, uint r0, uint b0, uint blocks, uint me,
               out Pass next) {
  const uint count = min(KB / 32u, blocks - b0);
  Words src = Words(uvec2(w.data));
  [[unroll]] for (uint t = 0; t < LEVEL_WORDS; ++t) {
    const uint k = me + THREADS * t, g = k / (2u * WPB), kb = (k / WPB) % 2u;
    next.words[t] = o0 + 16u * g < w.out_rows && kb < count ? src.v[level_byte(w, o0, b0, k) / 4u] : 0u;
  }
  // x: element (column me % KB, row me / KB + (THREADS / KB) t), reading rows along.
  [[unroll]] for (uint t = 0; t < X_VALUES; ++t) {
    const uint c = me % KB, r = r0 + me / KB + THREADS / KB * t;
    next.xs[t] = r < n && c < 32u * count ? x.v[r * x_stride + 32u * b0 + c] : 0.0;
  }
  // The blocks' scales (and Q4_K's mins), one (block, output) each.
  float sc = 0.0;
#if FMT == FMT_IL_Q4_K
  float mn = 0.0;
#endif
  const uint kb = me / TILE, ol = me % TILE, o = o0 + ol, j = b0 + kb;
  if (me < TILE * count && o < w.out_rows) {
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
  next.scale = sc;
#if FMT == FMT_IL_Q4_K
  next.min = mn;
#endif
}

// The pass's words, values and scales into shared memory.
void store_pass(Pass pass, uint count, uint me) {
  [[unroll]] for (uint t = 0; t < LEVEL_WORDS; ++t) {
    const uint k = me + THREADS * t, g = k / (2u * WPB), kb = (k / WPB) % 2u, wi = k % WPB;
    const uint v = pass.words[t], slot = 4u * g + wi % 4u;
#if FMT == FMT_IL_Q8_0
    levels[32u * kb + wi / 4u][slot] = vec4(float(int(v << 24) >> 24), float(int(v << 16) >> 24),
                                            float(int(v << 8) >> 24), float(int(v) >> 24));
#else
    const uint c = 32u * kb + 2u * (wi / 4u);
    const uvec4 lo = uvec4(v, v >> 8, v >> 16, v >> 24) & 0xFu, hi = (uvec4(v, v >> 8, v >> 16, v >> 24) >> 4) & 0xFu;
#if FMT == FMT_IL_MXFP4
    levels[c][slot] = vec4(e2m1x2(lo.x), e2m1x2(lo.y), e2m1x2(lo.z), e2m1x2(lo.w));
    levels[c + 1u][slot] = vec4(e2m1x2(hi.x), e2m1x2(hi.y), e2m1x2(hi.z), e2m1x2(hi.w));
#else
    levels[c][slot] = vec4(lo);
    levels[c + 1u][slot] = vec4(hi);
#endif
#endif
  }
  [[unroll]] for (uint t = 0; t < X_VALUES; ++t) {
    const uint c = me % KB, row = me / KB + THREADS / KB * t;
    xt[c][row / 4u][row % 4u] = pass.xs[t];
  }
  if (me < TILE * count) {
    scales[me / TILE][me % TILE] = pass.scale;
#if FMT == FMT_IL_Q4_K
    mins[me / TILE][me % TILE] = pass.min;
#endif
  }
}

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  if (gl_WorkGroupID.x * TILE >= w.out_rows || gl_WorkGroupID.y * TILE_R >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
#endif
  const uint to = gl_LocalInvocationID.x, tr = gl_LocalInvocationID.y, me = tr * 16u + to;
  const uint o0 = gl_WorkGroupID.x * TILE, r0 = gl_WorkGroupID.y * TILE_R;
  const uint blocks = w.in_cols / 32u;

  precise float acc[4][4];
  [[unroll]] for (uint a = 0; a < 4; ++a)
    [[unroll]] for (uint b = 0; b < 4; ++b) acc[a][b] = 0.0;

  Pass pass;
  load_pass(w, x, n, x_stride, o0, r0, 0u, blocks, me, pass);
  for (uint b0 = 0; b0 < blocks; b0 += KB / 32u) {
    const uint count = min(KB / 32u, blocks - b0);
    store_pass(pass, count, me);
    barrier();
    if (b0 + KB / 32u < blocks) load_pass(w, x, n, x_stride, o0, r0, b0 + KB / 32u, blocks, me, pass);
#if FMT == FMT_IL_Q4_K
    if (me < TILE_R * count) {
      const uint kb = me / TILE_R, row = me % TILE_R;
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
