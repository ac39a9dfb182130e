#version 450
// y = x · Wᵀ (+ bias) for many batch rows (prefill, a layer's experts in a
// prompt): linear.comp's products with the same bits, in tiles. For output
// (r, o) lane j of 16 sums fma(W[o][i], x[r][i], ·) over i ≡ j (mod 16) in
// increasing i, then the lanes fold as the tree w = 8, 4, 2, 1 (linear.h's
// order). Each (r, o) is computed alone, so a row's result does not depend
// on the others in its batch, nor on which kernel ran it.
//
// A workgroup is 16 lanes × 16 groups and computes a tile of 32 outputs × 32
// rows: group g holds, for its lane's columns, the chains of outputs
// g/4 + 4a and rows g%4 + 4b (a, b < 8), 64 chains. The tile's weights
// (dequantized by weight(), as linear.comp does) and inputs go through
// shared memory KB columns at a time, each loaded once for the workgroup
// rather than once per output or row. At the end the 16 lanes' chains of
// each (r, o) meet in shared memory, and one invocation folds them.
//
// Heads and grouped jobs as in linear.comp.
#include "common.glsl"
#include "weights.glsl"

#define TILE 32u  // outputs and rows a workgroup
#define KB 64u    // columns a pass through shared memory: 4 of each lane's chain
#define XS 80u    // a row's stride in shared memory for x: rows g%4 apart land 16 banks apart
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

// W's tile (TILE × KB) then x's (TILE × XS); the fold reuses the space:
// 16 groups × 16 chains × 17 (16 lanes, padded).
#define W_AT 0u
#define X_AT (TILE * KB)
#define SHARED_FLOATS (TILE * KB + TILE * XS)
shared float tile[SHARED_FLOATS];

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  const uint h = 0, head_rows = 0, x_head = 0, y_head = 0;
  if (gl_WorkGroupID.x * TILE >= w.out_rows || gl_WorkGroupID.y * TILE >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
  const uint h = gl_WorkGroupID.z, head_rows = p.head_rows, x_head = p.x_head, y_head = p.y_head;
#endif
  const uint lane = gl_LocalInvocationID.x, group = gl_LocalInvocationID.y;
  const uint me = group * 16u + lane;
  const uint o0 = gl_WorkGroupID.x * TILE, r0 = gl_WorkGroupID.y * TILE;
  const uint go = group / 4u, gr = group % 4u;
  const uint in_w = w.in_cols, x0 = h * x_head;

  precise float acc[8][8];
  [[unroll]] for (uint a = 0; a < 8; ++a)
    [[unroll]] for (uint b = 0; b < 8; ++b) acc[a][b] = 0.0;

  for (uint k0 = 0; k0 < in_w; k0 += KB) {
    // The tile's KB columns: invocation `me` loads column me % KB of
    // rows me / KB + 4t (zero past the matrix, the batch or the row).
    const uint c = me % KB, col = k0 + c;
    [[unroll]] for (uint t = 0; t < TILE / 4u; ++t) {
      const uint i = me / KB + 4u * t;
      const uint o = o0 + i, r = r0 + i;
      tile[W_AT + i * KB + c] = o < w.out_rows && col < in_w ? weight(w, h * head_rows + o, col) : 0.0;
      tile[X_AT + i * XS + c] = r < n && col < in_w ? x.v[x0 + r * x_stride + col] : 0.0;
    }
    barrier();
    // The lane's 4 columns of the pass, in increasing order; a column past
    // the row adds nothing (not even a zero: the chain's bits stay those of
    // linear.comp's).
    [[unroll]] for (uint u = 0; u < KB / 16u; ++u) {
      const uint cc = 16u * u + lane;
      if (k0 + cc < in_w) {
        float wv[8], xv[8];
        [[unroll]] for (uint a = 0; a < 8; ++a) wv[a] = tile[W_AT + (go + 4u * a) * KB + cc];
        [[unroll]] for (uint b = 0; b < 8; ++b) xv[b] = tile[X_AT + (gr + 4u * b) * XS + cc];
        [[unroll]] for (uint a = 0; a < 8; ++a)
          [[unroll]] for (uint b = 0; b < 8; ++b) acc[a][b] = fma(wv[a], xv[b], acc[a][b]);
      }
    }
    barrier();
  }

  // The fold, 16 chains of each invocation at a time (a = 2q, 2q + 1):
  // invocation (lane, group) parks chain (a, b) at [group][8(a - 2q) + b][lane],
  // then folds chain `lane` of its group over the 16 lanes.
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    [[unroll]] for (uint e = 0; e < 16; ++e)
      tile[(group * 16u + e) * 17u + lane] = acc[2u * q + e / 8u][e % 8u];
    barrier();
    float s[16];
    [[unroll]] for (uint l = 0; l < 16; ++l) s[l] = tile[(group * 16u + lane) * 17u + l];
    [[unroll]] for (uint width = 8; width >= 1; width /= 2)
      [[unroll]] for (uint l = 0; l < width; ++l) {
        precise float t = s[l] + s[l + width];
        s[l] = t;
      }
    const uint o = o0 + go + 4u * (2u * q + lane / 8u), r = r0 + gr + 4u * (lane % 8u);
    if (o < w.out_rows && r < n) {
      precise float v = s[0];
      const uint row = h * head_rows + o;
      if (w.has_bias != 0) v = v + w.bias.v[row];
      y.v[h * y_head + r * y_stride + o] = v;
    }
    barrier();
  }
}
