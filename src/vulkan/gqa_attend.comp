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
  // Positions j and j + 64 together.
  for (uint j = t; j < r.count; j += 128) {
    const bool two = j + 64 < r.count;
    const uint k0 = cache_slot(r, r.first + j) * width + kvh * d;
    const uint k1 = two ? cache_slot(r, r.first + j + 64) * width + kvh * d : k0;
    const vec2 dots = dot_serial2(p.q, q0, r.keys, k0, k1, d);
    precise float s = dots.x * p.scale, s1 = dots.y * p.scale;
    p.scores.v[s0 + j] = s;
    if (two) p.scores.v[s0 + j + 64] = s1;
  }
  sync_workgroup();
  softmax64(p.scores, s0, r.count, p.has_sinks != 0, p.has_sinks != 0 ? p.sinks.v[h] : 0.0);
  for (uint c = t; c < d; c += 128) {
    const bool two = c + 64 < d;
    const vec2 o = weighted_values2(p.scores, s0, r, r.values, width, kvh * d + c, two);
    p.out_heads.v[q0 + c] = o.x;
    if (two) p.out_heads.v[q0 + c + 64] = o.y;
  }
}
