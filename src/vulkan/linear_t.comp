#version 450
// The transposed product MLA absorbs its query with (kernels::
// linear_transposed): for head h (gl_WorkGroupID.z) and row r,
// y[i] = Σ_o fma(x[o], W[h·head_rows + o][i], ·) over o < count in
// increasing o, for every column i. One invocation per (i, r).
#include "common.glsl"
#include "weights.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
  WeightRef w;
  Floats x;
  Floats y;
  uint n, count;
  uint x_stride, y_stride;
  uint head_rows, x_head, y_head;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y, h = gl_WorkGroupID.z;
  if (i >= p.w.in_cols || r >= p.n) return;
  const uint x0 = h * p.x_head + r * p.x_stride;
  precise float acc = 0.0;
  for (uint o = 0; o < p.count; ++o) acc = fma(p.x.v[x0 + o], weight(p.w, h * p.head_rows + o, i), acc);
  p.y.v[h * p.y_head + r * p.y_stride + i] = acc;
}
