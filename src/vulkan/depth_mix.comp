#version 450
// Attention over depth (AttnRes, backend.h depth_mix): per row, the values
// are the row in each block and then in `partial`; score_i = dot(v_i, query)
// · inv_i with inv_i = 1 / sqrt(dot(v_i, v_i) / width + eps) (16-lane dots);
// softmax as kernels::softmax; out = Σ_i score_i · v_i by fma in block
// order, from 0. One workgroup of 16 per row.
#include "common.glsl"

layout(local_size_x = 16) in;
#include "lanes16.glsl"

layout(push_constant) uniform Push {
  Uints values;  // count device addresses (uvec2: low, high) of the blocks, then partial's
  Floats query;
  Floats out_rows;
  uint width;
  uint count;
  float eps;
} p;

shared float scores[64];

Floats value(uint i) { return Floats(uvec2(p.values.v[2 * i], p.values.v[2 * i + 1])); }

void main() {
  const uint r0 = gl_WorkGroupID.x * p.width, lane = gl_LocalInvocationID.x;
  for (uint i = 0; i < p.count; ++i) {
    Floats v = value(i);
    const float ss = dot16(v, r0, v, r0, p.width);
    const float dq = dot16(v, r0, p.query, 0, p.width);
    precise float mean = ss / float(p.width) + p.eps;
    precise float inv = 1.0 / sqrt(mean);
    precise float s = dq * inv;
    if (lane == 0) scores[i] = s;
  }
  barrier();
  if (lane == 0) {
    float m = scores[0];
    for (uint i = 1; i < p.count; ++i) m = scores[i] > m ? scores[i] : m;
    precise float sum = 0.0;
    for (uint i = 0; i < p.count; ++i) {
      precise float e = exp(scores[i] - m);
      scores[i] = e;
      sum = sum + e;
    }
    precise float inv = 1.0 / sum;
    for (uint i = 0; i < p.count; ++i) {
      precise float s = scores[i] * inv;
      scores[i] = s;
    }
  }
  barrier();
  for (uint c = lane; c < p.width; c += 16) {
    precise float o = 0.0;
    for (uint i = 0; i < p.count; ++i) o = fma(scores[i], value(i).v[r0 + c], o);
    p.out_rows.v[r0 + c] = o;
  }
}
