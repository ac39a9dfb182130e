#version 450
// A row's attention after its scores (gqa_row_scores.comp), for heads of at
// most 128 channels: the softmax (attend_softmax.comp's, by the first 64
// invocations: softmax64.glsl) and then the output, a value channel an
// invocation (attend_row_values.comp's weighted_values), in one dispatch.
// One workgroup of 128 per (head, row of the chunk): the same bits as the
// two shaders apart, one dispatch fewer an attention layer.
#include "common.glsl"

layout(local_size_x = 128) in;
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  RowRefs rows;
  Floats scores;  // per (row of the chunk, head): score_stride values
  Floats sinks;
  Floats out_heads;
  uint heads, kv_heads, head_dim, score_stride, has_sinks, row0;
} p;

void main() {
  const uint h = gl_WorkGroupID.x, ii = gl_WorkGroupID.y, c = gl_LocalInvocationID.x;
  const uint i = p.row0 + ii, d = p.head_dim, kvh = h / (p.heads / p.kv_heads);
  const uint s0 = (ii * p.heads + h) * p.score_stride;
  RowRef r = p.rows.v[i];
  softmax64(p.scores, s0, r.count, p.has_sinks != 0, p.has_sinks != 0 ? p.sinks.v[h] : 0.0);
  if (c >= d) return;
  p.out_heads.v[(i * p.heads + h) * d + c] = weighted_values(p.scores, s0, r, r.values, p.kv_heads * d, kvh * d + c);
}
