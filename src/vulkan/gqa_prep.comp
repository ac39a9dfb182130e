#version 450
// Grouped-query attention, before any row attends: per row, each q head and
// each k head gets its RMSNorm (when given) and its rotation, in place; the
// row's k and v go to its cache slot. One workgroup of 128 per (head, row):
// heads 0 .. H-1 are q's, H .. H+KV-1 k's. The arithmetic is prep_head.glsl's.
// A decode step whose rows are each their sequence's only row does this in
// gqa_row_scores.comp's PREP build instead.
#include "common.glsl"

layout(local_size_x = 128) in;
#define PREP_THREADS 128u
#define PREP_HEADS 1u
#include "lanes16.glsl"
#include "attention.glsl"
#include "prep_head.glsl"

layout(push_constant) uniform Push {
  Floats q, k, v;
  RowRefs rows;
  Floats rot;  // per row: cos then sin, rot_dim values
  Floats q_norm, k_norm;
  uint heads, kv_heads, head_dim, rot_dim;
  float eps;
  uint interleaved, has_q_norm, has_k_norm;
} p;

void main() {
  const uint t = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, i = gl_WorkGroupID.y, d = p.head_dim;
  const bool is_q = h < p.heads;
  const uint kvh = h - p.heads;
  Floats x = is_q ? p.q : p.k;
  const uint at = is_q ? (i * p.heads + h) * d : (i * p.kv_heads + kvh) * d;
  const bool normed = (is_q ? p.has_q_norm : p.has_k_norm) != 0;
  RowRef r = p.rows.v[i];
  const uint slot = cache_slot(r, r.pos), width = p.kv_heads * d;
  prep_load(0u, x, at, normed, is_q ? p.q_norm : p.k_norm, true, p.rot, i * p.rot_dim, d, p.rot_dim / 2u);
  if (!is_q)
    for (uint c = t; c < d; c += 128u) r.values.v[slot * width + kvh * d + c] = p.v.v[at + c];
  barrier();
  prep_head(0u, normed, p.eps, d, p.rot_dim / 2u, p.interleaved != 0);
  for (uint c = t; c < d; c += 128u) {
    const float v = prep_out[0][c];
    x.v[at + c] = v;
    if (!is_q) r.keys.v[slot * width + kvh * d + c] = v;
  }
}
