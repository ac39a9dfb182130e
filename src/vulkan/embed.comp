#version 450
// out row t = row tokens[t] of the token table, dequantized (FMT as in
// linear.comp): one invocation per value.
#include "common.glsl"
#include "weights.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
  WeightRef w;
  Ints tokens;
  Floats out_values;
  uint count;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
  if (i >= p.w.in_cols || t >= p.count) return;
  p.out_values.v[t * p.w.in_cols + i] = weight(p.w, uint(p.tokens.v[t]), i);
}
