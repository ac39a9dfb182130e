#version 450
// Grouped-query attention's scores for rows of any sequences (decode steps,
// short chunks), after gqa_prep: score (i, h, j) = dot(q[i][h], key[j])·scale
// over the positions row i sees, the 16-lane dot in dot_serial's order, one
// invocation a position: 64 positions a workgroup (gl_WorkGroupID.x), head
// gl_WorkGroupID.y, row of the chunk gl_WorkGroupID.z. attend_row.comp
// follows (attend_softmax.comp and attend_row_values.comp for heads wider
// than 128 channels). The tiled prompt path (gqa_scores.comp)
// computes the same bits.
#include "common.glsl"

layout(local_size_x = 64) in;
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  Floats q;
  RowRefs rows;
  Floats scores;  // per (row of the chunk, head): score_stride values
  uint heads, kv_heads, head_dim, score_stride;
  float scale;
  uint row0;
} p;

void main() {
  const uint j = gl_WorkGroupID.x * 64u + gl_LocalInvocationID.x, h = gl_WorkGroupID.y, ii = gl_WorkGroupID.z;
  const uint i = p.row0 + ii, d = p.head_dim, kvh = h / (p.heads / p.kv_heads);
  RowRef r = p.rows.v[i];
  if (j >= r.count) return;
  const uint slot = cache_slot(r, r.first + j), width = p.kv_heads * d;
  precise float s = dot_serial(p.q, (i * p.heads + h) * d, r.keys, slot * width + kvh * d, d) * p.scale;
  p.scores.v[(ii * p.heads + h) * p.score_stride + j] = s;
}
