#version 450
// Grouped-query attention after gqa_prep: one workgroup of 64 per (head,
// row of the chunk). Scores dot(q, key)·scale (the 16-lane dot, one
// invocation per position) over the positions the row sees, softmax
// (softmax64.glsl, with the head's sink), then per value channel the fma
// sum over the positions in increasing order, from 0.
#include "common.glsl"

layout(local_size_x = 64) in;
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  Floats q, out_heads;
  RowRefs rows;
  Floats scores;  // per (row of the chunk, head): score_stride values
  Floats sinks;
  uint heads, kv_heads, head_dim, score_stride;
  float scale;
  uint has_sinks, row0;
} p;

void main() {
  const uint h = gl_WorkGroupID.x, i = p.row0 + gl_WorkGroupID.y, t = gl_LocalInvocationID.x, d = p.head_dim;
  const uint kvh = h / (p.heads / p.kv_heads), width = p.kv_heads * d;
  RowRef r = p.rows.v[i];
  const uint s0 = (gl_WorkGroupID.y * p.heads + h) * p.score_stride, q0 = (i * p.heads + h) * d;
  for (uint j = t; j < r.count; j += 64) {
    const uint slot = cache_slot(r, r.first + j);
    precise float s = dot_serial(p.q, q0, r.keys, slot * width + kvh * d, d) * p.scale;
    p.scores.v[s0 + j] = s;
  }
  sync_workgroup();
  softmax64(p.scores, s0, r.count, p.has_sinks != 0, p.has_sinks != 0 ? p.sinks.v[h] : 0.0);
  for (uint c = t; c < d; c += 64) p.out_heads.v[q0 + c] = weighted_values(p.scores, s0, r, r.values, width, kvh * d + c);
}
