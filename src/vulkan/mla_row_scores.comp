#version 450
// Latent attention's scores after mla_prep and the absorbed query (q_abs =
// q_nope · W_UK[h]): score (i, h, j) = (dot(q_abs, latent[j]) + dot(q_rot,
// rotated key[j]))·scale over the positions row i sees, the 16-lane dots in
// dot_serial's order, one invocation a position: 64 positions a workgroup
// (gl_WorkGroupID.x), head gl_WorkGroupID.y, row of the chunk
// gl_WorkGroupID.z. attend_softmax.comp and attend_row_values.comp (the
// cached latents as the values) follow.
#include "common.glsl"

layout(local_size_x = 64) in;
#include "softmax64.glsl"
#include "attention.glsl"

layout(push_constant) uniform Push {
  Floats q_abs, q_rot;
  RowRefs rows;
  Floats scores;
  uint heads, latent, rope_dim, score_stride;
  float scale;
  uint row0;
} p;

void main() {
  const uint j = gl_WorkGroupID.x * 64u + gl_LocalInvocationID.x, h = gl_WorkGroupID.y, ii = gl_WorkGroupID.z;
  const uint i = p.row0 + ii;
  RowRef r = p.rows.v[i];
  if (j >= r.count) return;
  const uint at = cache_slot(r, r.first + j) * (p.latent + p.rope_dim);
  const float dl = dot_serial(p.q_abs, (i * p.heads + h) * p.latent, r.keys, at, p.latent);
  const float dr = dot_serial(p.q_rot, (i * p.heads + h) * p.rope_dim, r.keys, at + p.latent, p.rope_dim);
  precise float s = (dl + dr) * p.scale;
  p.scores.v[(ii * p.heads + h) * p.score_stride + j] = s;
}
