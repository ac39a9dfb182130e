#version 450
// Grouped-query attention, before any row attends: per row, each q head and
// each k head gets its RMSNorm (when given) and its rotation, in place; the
// row's k and v go to its cache slot. One workgroup of 16 per (head, row):
// heads 0 .. H-1 are q's, H .. H+KV-1 k's.
#include "common.glsl"

layout(local_size_x = 16) in;
#include "lanes16.glsl"
#define ROTATE16  // this shader rotates (attention.glsl)
#include "attention.glsl"

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
  const uint head = gl_WorkGroupID.x, i = gl_WorkGroupID.y, d = p.head_dim;
  const bool is_q = head < p.heads;
  const uint kvh = head - p.heads;
  Floats x = is_q ? p.q : p.k;
  const uint at = is_q ? (i * p.heads + head) * d : (i * p.kv_heads + kvh) * d;
  Floats norm = is_q ? p.q_norm : p.k_norm;
  if ((is_q ? p.has_q_norm : p.has_k_norm) != 0) rms_norm16(x, at, norm, p.eps, d, x, at);
  rotate16(x, at, p.rot_dim / 2, p.rot, i * p.rot_dim, p.interleaved != 0);
  if (is_q) return;
  RowRef r = p.rows.v[i];
  const uint slot = cache_slot(r, r.pos), width = p.kv_heads * d;
  for (uint c = gl_LocalInvocationID.x; c < d; c += 16) {
    r.keys.v[slot * width + kvh * d + c] = x.v[at + c];
    r.values.v[slot * width + kvh * d + c] = p.v.v[at + c];
  }
}
