#version 450
// The softmax of each (row, head)'s scores in place (softmax64.glsl, with
// the head's sink): attention's middle step, after gqa_scores.comp or
// mla_scores.comp (tiled, prompts) or the row kernels (gqa_row_scores.comp,
// mla_row_scores.comp), before attend_values.comp or attend_row_values.comp. One workgroup of 64 per (head, row of the chunk).
// A row of at most STAGED positions is read into shared memory at once and
// written back once (softmax64_staged: the same bits), not read in each of
// the softmax's three passes.
#include "common.glsl"

layout(local_size_x = 64) in;
#define STAGED 1024u
#define SOFTMAX64_STAGED STAGED
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  RowRefs rows;
  Floats scores;
  Floats sinks;
  uint heads, score_stride, has_sinks, row0;
} p;

void main() {
  const uint h = gl_WorkGroupID.x, i = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  const uint s0 = (i * p.heads + h) * p.score_stride, count = p.rows.v[p.row0 + i].count;
  const bool has_sinks = p.has_sinks != 0;
  const float sink = has_sinks ? p.sinks.v[h] : 0.0;
  if (count > STAGED) {
    softmax64(p.scores, s0, count, has_sinks, sink);
    return;
  }
  [[unroll]] for (uint u = 0; u < STAGED / 64u; ++u)
    if (t + 64u * u < count) staged_scores[t + 64u * u] = p.scores.v[s0 + t + 64u * u];
  barrier();
  softmax64_staged(count, has_sinks, sink);
  [[unroll]] for (uint u = 0; u < STAGED / 64u; ++u)
    if (t + 64u * u < count) p.scores.v[s0 + t + 64u * u] = staged_scores[t + 64u * u];
}
