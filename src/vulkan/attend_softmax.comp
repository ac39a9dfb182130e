#version 450
// The softmax of each (row, head)'s scores in place (softmax64.glsl, with
// the head's sink): attention's middle step, after gqa_scores.comp or
// mla_scores.comp (tiled, prompts) or the row kernels (gqa_row_scores.comp,
// mla_row_scores.comp), before attend_values.comp or attend_row_values.comp. One workgroup of 64 per (head, row of the chunk).
#include "common.glsl"

layout(local_size_x = 64) in;
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  RowRefs rows;
  Floats scores;
  Floats sinks;
  uint heads, score_stride, has_sinks, row0;
} p;

void main() {
  const uint h = gl_WorkGroupID.x, i = gl_WorkGroupID.y;
  const uint s0 = (i * p.heads + h) * p.score_stride;
  softmax64(p.scores, s0, p.rows.v[p.row0 + i].count, p.has_sinks != 0, p.has_sinks != 0 ? p.sinks.v[h] : 0.0);
}
