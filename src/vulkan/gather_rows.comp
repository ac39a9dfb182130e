#version 450
// dst row j = src row rows[j] (width values each).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
  Floats src;
  Floats dst;
  Uints rows;
  uint width;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x, j = gl_WorkGroupID.y;
  if (i < p.width) p.dst.v[j * p.width + i] = p.src.v[p.rows.v[j] * p.width + i];
}
