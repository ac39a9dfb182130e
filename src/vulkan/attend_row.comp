#version 450
// A row's attention after its scores (gqa_row_scores.comp or
// mla_row_scores.comp), for heads of at most 128 channels (512 built WIDE,
// attend_row_wide): the softmax (attend_softmax.comp's, by the first 64
// invocations: softmax64.glsl) and then the output, a value channel an
// invocation (attend_row_values.comp's weighted_values), in one dispatch.
// One workgroup of 128 (512) per (head, row of the chunk): the same bits as
// the two shaders apart, one dispatch fewer an attention layer. The values
// are the rows' value cache at kv head h's columns (GQA), or with from_keys
// their key cache's first head_dim columns (MLA's cached latents), `width`
// values a cache row.
//
// A row of at most STAGED positions (a decode step's, mostly) has its
// scores brought into shared memory at once, and each channel's values are
// loaded 32 positions at a time (16 built WIDE), the next ones in flight
// while these are summed: the op waits on device memory a few times, not once per pass and
// once per sixteen positions (a decode step's attention is that latency).
#include "common.glsl"

#ifdef WIDE
#define THREADS 512u
#define VALUES_AHEAD 16u  // fewer registers: 512 invocations share an SM's file
layout(local_size_x = 512) in;
#else
#define THREADS 128u
layout(local_size_x = 128) in;
#endif
#define STAGED 1024u
#define SOFTMAX64_STAGED STAGED
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  RowRefs rows;
  Floats scores;  // per (row of the chunk, head): score_stride values
  Floats sinks;
  Floats out_heads;
  uint heads, kv_heads, head_dim, score_stride, has_sinks, row0;
  uint width;      // values a cache row
  uint from_keys;  // MLA: the values are the key cache's latents
} p;

// weighted_values' sum over staged_scores.
float weighted_staged_values(RowRef r, Floats v, uint width, uint col) {
  precise float o = 0.0;
#define SCORE_STAGED(j) staged_scores[j]
  WEIGHTED_VALUES(o, SCORE_STAGED, r, v, width, col)
  return o;
}

void main() {
  const uint h = gl_WorkGroupID.x, ii = gl_WorkGroupID.y, c = gl_LocalInvocationID.x;
  const uint i = p.row0 + ii, d = p.head_dim, kvh = h / (p.heads / p.kv_heads);
  const uint s0 = (ii * p.heads + h) * p.score_stride;
  RowRef r = p.rows.v[i];
  const bool has_sinks = p.has_sinks != 0;
  const float sink = has_sinks ? p.sinks.v[h] : 0.0;
  Floats values = p.from_keys != 0u ? r.keys : r.values;
  if (r.count <= STAGED) {
    [[unroll]] for (uint u = 0; u < STAGED / THREADS; ++u)
      if (c + THREADS * u < r.count) staged_scores[c + THREADS * u] = p.scores.v[s0 + c + THREADS * u];
    barrier();
    softmax64_staged(r.count, has_sinks, sink);
    if (c >= d) return;
    p.out_heads.v[(i * p.heads + h) * d + c] = weighted_staged_values(r, values, p.width, kvh * d + c);
    return;
  }
  softmax64(p.scores, s0, r.count, has_sinks, sink);
  if (c >= d) return;
  p.out_heads.v[(i * p.heads + h) * d + c] = weighted_values(p.scores, s0, r, values, p.width, kvh * d + c);
}
