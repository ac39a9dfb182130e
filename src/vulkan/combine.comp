#version 450
// out row r = Σ over its k slots in increasing expert id (the host sorted
// them: slot_rows and weights come in that order) of ys row · weight,
// summed from 0 one product at a time (o = o + y · w, two roundings, as the
// CPU), then + shared row r where given.
#include "common.glsl"

layout(local_size_x = 256) in;

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
  if (i >= p.hidden) return;
  precise float o = 0.0;
  for (uint j = 0; j < p.k; ++j) {
    precise float t = p.ys.v[p.slot_rows.v[r * p.k + j] * p.hidden + i] * p.weights.v[r * p.k + j];
    o = o + t;
  }
  if (p.has_shared != 0) o = o + p.shared_rows.v[r * p.hidden + i];
  p.out_rows.v[r * p.hidden + i] = o;
}
