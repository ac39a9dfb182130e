#version 450
// y = x · Wᵀ (+ bias) for many batch rows (prefill, a layer's experts in a
// prompt): linear.comp's products with the same bits, in tiles of 32
// outputs × 32 rows (mm16.glsl: A = W's rows, dequantized by weight() as
// linear.comp does; B = x's rows). Each (r, o) is computed alone, so a
// row's result does not depend on the others in its batch, nor on which
// kernel ran it. Heads and grouped jobs as in linear.comp.
#include "common.glsl"
#include "weights.glsl"
#include "mm16.glsl"

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

// The product's operands, set once by main() for mm_a and mm_b.
WeightRef w;
Floats x;
uint n, x_stride, w_row0, x0, o0, r0;

float mm_a(uint a, uint col) { return o0 + a < w.out_rows ? weight(w, w_row0 + o0 + a, col) : 0.0; }
float mm_b(uint b, uint col) { return r0 + b < n ? x.v[x0 + (r0 + b) * x_stride + col] : 0.0; }

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  w = job.w;
  x = job.x;
  Floats y = job.y;
  n = job.n;
  x_stride = w.in_cols;
  const uint y_stride = w.out_rows, h = 0, y_head = 0;
  w_row0 = 0;
  x0 = 0;
  if (gl_WorkGroupID.x * MM_TILE >= w.out_rows || gl_WorkGroupID.y * MM_TILE >= n) return;
#else
  w = p.w;
  x = p.x;
  Floats y = p.y;
  n = p.n;
  x_stride = p.x_stride;
  const uint y_stride = p.y_stride, h = gl_WorkGroupID.z, y_head = p.y_head;
  w_row0 = h * p.head_rows;
  x0 = h * p.x_head;
#endif
  o0 = gl_WorkGroupID.x * MM_TILE;
  r0 = gl_WorkGroupID.y * MM_TILE;
  precise float acc[8][8];
  mm_chains(w.in_cols, acc);
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    uint a, b;
    const float s = mm_fold(q, acc, a, b);
    const uint o = o0 + a, r = r0 + b;
    if (o < w.out_rows && r < n) {
      precise float v = s;
      if (w.has_bias != 0) v = v + w.bias.v[w_row0 + o];
      y.v[h * y_head + r * y_stride + o] = v;
    }
  }
}
