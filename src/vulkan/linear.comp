#version 450
// y [n × out] = x [n × in] · Wᵀ (+ bias) for one weight format (FMT, see
// weights.glsl), in linear.h's order: for output (r, o) lane j of 16 sums
// fma(W[o][i], x[r][i], ·) over i ≡ j (mod 16) in increasing i, then the
// lanes fold as the tree w = 8, 4, 2, 1. A workgroup is 4 outputs × 16 lanes
// for up to ROWS batch rows; each (r, o) is computed alone, so a row's
// result does not depend on the others in its batch.
#include "common.glsl"
#include "weights.glsl"

#define ROWS 4
layout(local_size_x = 16, local_size_y = 4) in;

layout(push_constant) uniform Push {
  WeightRef w;
  Floats x;
  Floats y;
  uint n;
} p;

shared float lanes[4][ROWS][16];

void main() {
  const uint lane = gl_LocalInvocationID.x, slot = gl_LocalInvocationID.y;
  const uint o = gl_WorkGroupID.x * 4 + slot;
  const uint r0 = gl_WorkGroupID.y * ROWS;
  const bool live = o < p.w.out_rows;
  precise float acc[ROWS];
  for (uint r = 0; r < ROWS; ++r) acc[r] = 0.0;
  if (live) {
    const uint in_w = p.w.in_cols;
    for (uint i = lane; i < in_w; i += 16) {
      const float wt = weight(p.w, o, i);
      for (uint r = 0; r < ROWS; ++r)
        if (r0 + r < p.n) acc[r] = fma(wt, p.x.v[(r0 + r) * in_w + i], acc[r]);
    }
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
  if (live && lane < ROWS && r0 + lane < p.n) {
    precise float v = lanes[slot][lane][0];
    if (p.w.has_bias != 0) v = v + p.w.bias.v[o];
    p.y.v[(r0 + lane) * p.w.out_rows + o] = v;
  }
}
