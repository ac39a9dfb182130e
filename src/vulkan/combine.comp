#version 450
// out row r = the combine of its k slots' ys rows (combine.glsl). One
// invocation a column.
#include "common.glsl"

layout(local_size_x = 256) in;
#include "combine.glsl"

layout(push_constant) uniform Push {
  Floats ys;
  Floats out_rows;
  Floats shared_rows;
  Uints slot_rows;  // [n × k], sorted by expert id within a row
  Floats weights;   // [n × k], in the same order
  uint hidden;
  uint k;
  uint has_shared;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
  combine_stage(p.slot_rows, p.weights, r, p.k, p.hidden);
  if (i >= p.hidden) return;
  float o[1];
  combine_columns(p.ys, p.shared_rows, p.has_shared != 0, r, p.k, p.hidden, i, 0u, p.hidden, o);
  p.out_rows.v[r * p.hidden + i] = o[0];
}
