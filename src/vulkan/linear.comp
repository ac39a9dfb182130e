#version 450
// y = x · Wᵀ (+ bias) for one weight format (FMT, see weights.glsl), in
// linear.h's order: for output (r, o) lane j of 16 sums fma(W[o][i],
// x[r][i], ·) over i ≡ j (mod 16) in increasing i, then the lanes fold as
// the tree w = 8, 4, 2, 1. A workgroup is 4 outputs × 16 lanes for up to
// ROWS batch rows; each (r, o) is computed alone, so a row's result does
// not depend on the others in its batch.
//
// Heads (gl_WorkGroupID.z = h): head h multiplies by rows [h·head_rows,
// h·head_rows + out) of the matrix, reads x from h·x_head and writes y from
// h·y_head (MLA's per-head absorbed products); rows of x and y are x_stride
// and y_stride values apart.
#include "common.glsl"
#include "weights.glsl"

// ROWS batch rows a workgroup (built with -DROWS=1 too, for one-row steps
// by matrices too tall for linear_row.comp: fewer registers, so a longer
// CHUNK).
#ifndef ROWS
#define ROWS 4
#endif
#if ROWS == 1
#define CHUNK 32u
#else
#define CHUNK 16u
#endif
layout(local_size_x = 16, local_size_y = 4) in;

#ifdef GROUPED
#include "jobs.glsl"
#include "activation.glsl"
// act (activation.glsl's modes, 0 for none): x is a down product's gate
// values, activated as they are loaded (the elementwise ops before the
// product, in the product), with the up values `up` floats after them or, for
// up = 0, each after its gate value (a fused gate_up's output: x's value k
// is the pair at 2k).
layout(push_constant) uniform Push {
  Jobs jobs;
  uint act, up;
  float a, b;
} p;
float x_at(Floats x, uint k) {
  if (p.act == 0u) return x.v[k];
  if (p.up == 0u) return activate(p.act, x.v[2u * k], x.v[2u * k + 1u], p.a, p.b);
  return activate(p.act, x.v[k], x.v[k + p.up], p.a, p.b);
}
#else
layout(push_constant) uniform Push {
  WeightRef w;
  Floats x;
  Floats y;
  uint n;
  uint x_stride, y_stride;
  uint head_rows, x_head, y_head;
} p;
float x_at(Floats x, uint k) { return x.v[k]; }
#endif

shared float lanes[4][ROWS][16];

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  const uint h = 0, head_rows = 0, x_head = 0, y_head = 0;
  if (gl_WorkGroupID.x * 4 >= w.out_rows || gl_WorkGroupID.y * ROWS >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
  const uint h = gl_WorkGroupID.z, head_rows = p.head_rows, x_head = p.x_head, y_head = p.y_head;
#endif
  const uint lane = gl_LocalInvocationID.x, slot = gl_LocalInvocationID.y;
  const uint o = gl_WorkGroupID.x * 4 + slot;
  const uint r0 = gl_WorkGroupID.y * ROWS;
  const bool live = o < w.out_rows;
  const uint row = h * head_rows + o;
  const uint x0 = h * x_head, in_w = w.in_cols;
  precise float acc[ROWS];
  for (uint r = 0; r < ROWS; ++r) acc[r] = 0.0;
  if (live) {
    // CHUNK columns of the lane's chain at a time, every load of the chunk
    // issued before the chain consumes it: a lane waits for memory once a
    // chunk, not once a column. The order of the fmas is unchanged.
#if ROWS == 1
    // One row: every chunk guarded (the last one's columns past the row
    // skipped), measured faster than a column-at-a-time tail.
    for (uint i = lane; i < in_w; i += 16u * CHUNK) {
      float wt[CHUNK], xv[CHUNK];
      [[unroll]] for (uint u = 0; u < CHUNK; ++u) {
        const uint c = i + 16u * u;
        wt[u] = c < in_w ? weight(w, row, c) : 0.0;
        xv[u] = c < in_w && r0 < n ? x_at(x, x0 + r0 * x_stride + c) : 0.0;
      }
      [[unroll]] for (uint u = 0; u < CHUNK; ++u)
        if (i + 16u * u < in_w && r0 < n) acc[0] = fma(wt[u], xv[u], acc[0]);
    }
#else
    // Several rows: whole chunks unguarded, then a column at a time (guards
    // in every chunk measured 1.5x slower for 16-64 rows).
    uint i = lane;
    for (; i + 16u * (CHUNK - 1u) < in_w; i += 16u * CHUNK) {
      float wt[CHUNK], xv[CHUNK][ROWS];
      [[unroll]] for (uint u = 0; u < CHUNK; ++u) {
        wt[u] = weight(w, row, i + 16u * u);
        [[unroll]] for (uint r = 0; r < ROWS; ++r)
          xv[u][r] = r0 + r < n ? x_at(x, x0 + (r0 + r) * x_stride + i + 16u * u) : 0.0;
      }
      [[unroll]] for (uint u = 0; u < CHUNK; ++u)
        [[unroll]] for (uint r = 0; r < ROWS; ++r)
          if (r0 + r < n) acc[r] = fma(wt[u], xv[u][r], acc[r]);
    }
    for (; i < in_w; i += 16) {
      const float wt = weight(w, row, i);
      for (uint r = 0; r < ROWS; ++r)
        if (r0 + r < n) acc[r] = fma(wt, x_at(x, x0 + (r0 + r) * x_stride + i), acc[r]);
    }
#endif
  }
  for (uint r = 0; r < ROWS; ++r) lanes[slot][r][lane] = acc[r];
  barrier();
  for (uint width = 8; width >= 1; width /= 2) {
    if (lane < width)
      for (uint r = 0; r < ROWS; ++r) {
        precise float s = lanes[slot][r][lane] + lanes[slot][r][lane + width];
        lanes[slot][r][lane] = s;
      }
    barrier();
  }
  if (live && lane < ROWS && r0 + lane < n) {
    precise float v = lanes[slot][lane][0];
    if (w.has_bias != 0) v = v + w.bias.v[row];
    y.v[h * y_head + (r0 + lane) * y_stride + o] = v;
  }
}
