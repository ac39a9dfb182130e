#version 450
// Latent attention, before any row attends: one workgroup of 128 per (slot,
// row). Slots 0 .. H-1 copy head h's rope part of q to q_rot and rotate it;
// slot H writes the row's cache row: rms_norm(latent part, kv_norm), then
// the rope part, rotated (without a rotation, NoPE, both are copied as they
// are). The arithmetic is prep_head.glsl's (the latent part a head normed
// and not rotated, the rope parts heads rotated and not normed): each part
// loaded once, its norm and rotation in shared memory.
#include "common.glsl"

layout(local_size_x = 128) in;
#define PREP_THREADS 128u
#define PREP_HEADS 2u
#include "lanes16.glsl"
#include "attention.glsl"
#include "prep_head.glsl"

layout(push_constant) uniform Push {
  Floats q, kv, q_rot;
  RowRefs rows;
  Floats rot;
  Floats kv_norm;
  uint heads, qk, nope, latent, rope_dim;
  float eps;
  uint has_rope, interleaved;
} p;

void main() {
  const uint slot = gl_WorkGroupID.x, i = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  const uint half_ = p.has_rope != 0 ? p.rope_dim / 2u : 0u;
  const bool interleaved = p.interleaved != 0;
  if (slot < p.heads) {
    const uint src = (i * p.heads + slot) * p.qk + p.nope, dst = (i * p.heads + slot) * p.rope_dim;
    prep_load(1u, p.q, src, false, p.kv_norm, true, p.rot, i * p.rope_dim, p.rope_dim, half_);
    barrier();
    prep_head(1u, false, p.eps, p.rope_dim, half_, interleaved);
    for (uint c = t; c < p.rope_dim; c += 128u) p.q_rot.v[dst + c] = prep_out[1][c];
    return;
  }
  RowRef r = p.rows.v[i];
  const uint width = p.latent + p.rope_dim, at = cache_slot(r, r.pos) * width, src = i * width;
  prep_load(0u, p.kv, src, true, p.kv_norm, false, p.rot, 0u, p.latent, 0u);
  prep_load(1u, p.kv, src + p.latent, false, p.kv_norm, true, p.rot, i * p.rope_dim, p.rope_dim, half_);
  barrier();
  prep_head(0u, true, p.eps, p.latent, 0u, false);
  prep_head(1u, false, p.eps, p.rope_dim, half_, interleaved);
  for (uint c = t; c < p.latent; c += 128u) r.keys.v[at + c] = prep_out[0][c];
  for (uint c = t; c < p.rope_dim; c += 128u) r.keys.v[at + p.latent + c] = prep_out[1][c];
}
