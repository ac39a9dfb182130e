#version 450
// combine.comp and then rms_norm.comp with its add, in one dispatch: a
// layer's experts summed into its delta, the delta added into the residual
// stream, the stream's norm (VulkanBackend::dispatch_combine holds a
// combine back for the add_rms_norm that follows it). One workgroup of 256
// a row. Per column i, the same expressions as the two shaders: o summed
// from 0 over the row's slots in their order (+ the shared row), written to
// out; v = x + o written back to x; then the 16-lane sum of squares in
// rms_norm.comp's order (lane j takes i ≡ j mod 16, increasing i; the fold
// tree) and y = weight · (x · inv): the two shaders' bits. An invocation
// reads back only the columns it wrote (i ≡ id mod 256).
#include "common.glsl"

layout(local_size_x = 256) in;
#include "lanes16.glsl"

layout(push_constant) uniform Push {
  Floats ys;
  Floats out_rows;
  Floats shared_rows;
  Uints slot_rows;  // [n × k], sorted by expert id within a row
  Floats weights;   // [n × k], in the same order
  Floats x;         // the residual stream, [n × hidden]
  Floats weight;    // the norm's, [hidden]
  Floats y;         // [n × hidden]
  uint hidden;
  uint k;
  uint has_shared;
  float eps;
} p;

#define PIECE 2048u
shared float piece[PIECE];

void main() {
  const uint r = gl_WorkGroupID.x, r0 = r * p.hidden, id = gl_LocalInvocationID.x;
  precise float acc = 0.0;
  for (uint c0 = 0; c0 < p.hidden; c0 += PIECE) {
    const uint c1 = min(c0 + PIECE, p.hidden);
    for (uint i = c0 + id; i < c1; i += 256u) {
      precise float o = 0.0;
      for (uint j = 0; j < p.k; ++j) {
        precise float t = p.ys.v[p.slot_rows.v[r * p.k + j] * p.hidden + i] * p.weights.v[r * p.k + j];
        o = o + t;
      }
      if (p.has_shared != 0) o = o + p.shared_rows.v[r0 + i];
      p.out_rows.v[r0 + i] = o;
      precise float v = p.x.v[r0 + i] + o;
      p.x.v[r0 + i] = v;
      piece[i - c0] = v;
    }
    barrier();
    if (id < 16u)
      for (uint i = c0 + id; i < c1; i += 16u) {
        const float v = piece[i - c0];
        acc = fma(v, v, acc);
      }
    barrier();
  }
  const float ss = fold16(acc);
  precise float mean = ss / float(p.hidden) + p.eps;
  precise float inv = 1.0 / sqrt(mean);
  for (uint i = id; i < p.hidden; i += 256u) {
    precise float v = p.weight.v[i] * (p.x.v[r0 + i] * inv);
    p.y.v[r0 + i] = v;
  }
}
