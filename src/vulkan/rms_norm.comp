#version 450
// y row = rms_norm(x row, weight) as kernels::rms_norm: ss by the 16-lane
// dot, inv = 1 / sqrt(ss / width + eps), y = weight · (x · inv); with a
// delta, x += delta first (backend.h's add_rms_norm: the residual stream's
// add, written back, then its norm). One
// workgroup of 256 per row: all of it brings the row into shared memory a
// piece at a time (so the 16 lanes' sequential chains never wait on device
// memory), and all of it writes y; x and y may be the same.
#include "common.glsl"

layout(local_size_x = 256) in;
#include "lanes16.glsl"

layout(push_constant) uniform Push {
  Floats x;
  Floats weight;
  Floats y;
  Floats delta;
  uint width;
  float eps;
  uint add;  // 1: x += delta first
} p;

#define PIECE 2048u
shared float piece[PIECE];

void main() {
  const uint r0 = gl_WorkGroupID.x * p.width, id = gl_LocalInvocationID.x;
  precise float acc = 0.0;
  for (uint c0 = 0; c0 < p.width; c0 += PIECE) {
    const uint c1 = min(c0 + PIECE, p.width);
    // An invocation adds and writes back the same columns i ≡ id (mod 256)
    // it reads again below: its own writes, seen by it alone.
    if (p.add != 0u)
      for (uint i = c0 + id; i < c1; i += 256u) {
        precise float v = p.x.v[r0 + i] + p.delta.v[r0 + i];
        p.x.v[r0 + i] = v;
        piece[i - c0] = v;
      }
    else
      for (uint i = c0 + id; i < c1; i += 256u) piece[i - c0] = p.x.v[r0 + i];
    barrier();
    if (id < 16u)
      for (uint i = c0 + id; i < c1; i += 16u) {
        const float v = piece[i - c0];
        acc = fma(v, v, acc);
      }
    barrier();
  }
  const float ss = fold16(acc);
  precise float mean = ss / float(p.width) + p.eps;
  precise float inv = 1.0 / sqrt(mean);
  for (uint i = id; i < p.width; i += 256u) {
    precise float v = p.weight.v[i] * (p.x.v[r0 + i] * inv);
    p.y.v[r0 + i] = v;
  }
}
