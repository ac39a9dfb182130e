#version 450
// y row = rms_norm(x row, weight) as kernels::rms_norm: ss by the 16-lane
// dot, inv = 1 / sqrt(ss / width + eps), y = weight · (x · inv). One
// workgroup of 16 per row; x and y may be the same.
#include "common.glsl"

layout(local_size_x = 16) in;
#include "lanes16.glsl"

layout(push_constant) uniform Push {
  Floats x;
  Floats weight;
  Floats y;
  uint width;
  float eps;
} p;

void main() {
  const uint r0 = gl_WorkGroupID.x * p.width;
  const float ss = dot16(p.x, r0, p.x, r0, p.width);
  precise float mean = ss / float(p.width) + p.eps;
  precise float inv = 1.0 / sqrt(mean);
  for (uint i = gl_LocalInvocationID.x; i < p.width; i += 16) {
    precise float v = p.weight.v[i] * (p.x.v[r0 + i] * inv);
    p.y.v[r0 + i] = v;
  }
}
