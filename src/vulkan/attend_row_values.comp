#version 450
// Attention's output for rows of any sequences after the softmax
// (attend_softmax.comp): out[i][h][c] = Σ_j s[i][h][j] · value[j][c] over
// the positions row i sees, by fma from 0 in increasing j (weighted_values,
// attention.glsl), one invocation a value channel: 64 channels a workgroup
// (gl_WorkGroupID.x), head gl_WorkGroupID.y, row of the chunk
// gl_WorkGroupID.z. The values are the rows' value cache at kv head h's
// columns (GQA), or with from_keys their key cache's first head_dim columns
// (MLA's cached latents, width values a row). The tiled prompt path
// (attend_values.comp) computes the same bits.
#include "common.glsl"
#include "attention.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
  RowRefs rows;
  Floats scores;
  Floats out_heads;
  uint heads, kv_heads, head_dim, score_stride, row0;
  uint width;      // values a cache row
  uint from_keys;  // MLA: the values are the key cache's latents
} p;

void main() {
  const uint c = gl_WorkGroupID.x * 64u + gl_LocalInvocationID.x, h = gl_WorkGroupID.y, ii = gl_WorkGroupID.z;
  const uint i = p.row0 + ii, d = p.head_dim, kvh = h / (p.heads / p.kv_heads);
  if (c >= d) return;
  RowRef r = p.rows.v[i];
  p.out_heads.v[(i * p.heads + h) * d + c] = weighted_values(p.scores, (ii * p.heads + h) * p.score_stride, r,
                                                             p.from_keys != 0u ? r.keys : r.values, p.width, kvh * d + c);
}
