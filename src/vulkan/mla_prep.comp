#version 450
// Latent attention, before any row attends: one workgroup of 16 per (slot,
// row). Slots 0 .. H-1 copy head h's rope part of q to q_rot and rotate it;
// slot H writes the row's cache row: rms_norm(latent part, kv_norm), then
// the rope part, rotated (without a rotation, NoPE, both are copied as they
// are).
#include "common.glsl"

layout(local_size_x = 16) in;
#include "lanes16.glsl"
#define ROTATE16  // this shader rotates (attention.glsl)
#include "attention.glsl"

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
  const uint slot = gl_WorkGroupID.x, i = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
  if (slot < p.heads) {
    const uint src = (i * p.heads + slot) * p.qk + p.nope, dst = (i * p.heads + slot) * p.rope_dim;
    for (uint c = lane; c < p.rope_dim; c += 16) p.q_rot.v[dst + c] = p.q.v[src + c];
    sync_workgroup();
    if (p.has_rope != 0) rotate16(p.q_rot, dst, p.rope_dim / 2, p.rot, i * p.rope_dim, p.interleaved != 0);
    return;
  }
  RowRef r = p.rows.v[i];
  const uint width = p.latent + p.rope_dim, at = cache_slot(r, r.pos) * width, src = i * width;
  rms_norm16(p.kv, src, p.kv_norm, p.eps, p.latent, r.keys, at);
  for (uint c = lane; c < p.rope_dim; c += 16) r.keys.v[at + p.latent + c] = p.kv.v[src + p.latent + c];
  sync_workgroup();
  if (p.has_rope != 0) rotate16(r.keys, at + p.latent, p.rope_dim / 2, p.rot, i * p.rope_dim, p.interleaved != 0);
}
