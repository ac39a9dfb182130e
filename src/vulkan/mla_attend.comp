#version 450
// Latent attention after mla_prep and the absorbed query (q_abs = q_nope ·
// W_UK[h]): one workgroup of 64 per (head, row of the chunk). Scores
// (dot(q_abs, latent) + dot(q_rot, rotated key)) · scale (16-lane dots, one
// invocation per position), softmax (softmax64.glsl), then per latent
// channel the fma sum of the cached latents over the positions in
// increasing order, from 0.
#include "common.glsl"

layout(local_size_x = 64) in;
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  Floats q_abs, q_rot, latent_out;
  RowRefs rows;
  Floats scores;
  uint heads, latent, rope_dim, score_stride;
  float scale;
  uint row0;
} p;

void main() {
  const uint h = gl_WorkGroupID.x, i = p.row0 + gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  const uint width = p.latent + p.rope_dim;
  RowRef r = p.rows.v[i];
  const uint s0 = (gl_WorkGroupID.y * p.heads + h) * p.score_stride;
  const uint qa = (i * p.heads + h) * p.latent, qr = (i * p.heads + h) * p.rope_dim;
  for (uint j = t; j < r.count; j += 64) {
    const uint at = cache_slot(r, r.first + j) * width;
    const float dl = dot_serial(p.q_abs, qa, r.keys, at, p.latent);
    const float dr = dot_serial(p.q_rot, qr, r.keys, at + p.latent, p.rope_dim);
    precise float s = (dl + dr) * p.scale;
    p.scores.v[s0 + j] = s;
  }
  sync_workgroup();
  softmax64(p.scores, s0, r.count, false, 0.0);
  for (uint c = t; c < p.latent; c += 64) p.latent_out.v[qa + c] = weighted_values(p.scores, s0, r, r.keys, width, c);
}
