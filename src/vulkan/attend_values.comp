#version 450
// Attention's output for many rows of one sequence (a prompt), after the
// softmax: out[i][h][c] = Σ_j s[i][h][j] · value[j][c] over the positions
// j < count that row i sees, by fma from 0 in increasing j: the order of
// weighted_values (attention.glsl), so the same bits as attend_row_values.comp
// computes for the row alone. A workgroup of 16 × 16 computes 64 (row,
// head) pairs of one KV head (gl_WorkGroupID.z) × 64 channels, invocation
// (tc, tp) pairs 4tp..4tp+3 × channels 4tc..4tc+3; the scores and values
// go through shared memory 64 positions at a time. The values are the value
// cache at kv head kvh's columns (GQA), or with from_keys the key cache's
// first head_dim columns (MLA's cached latents), rows `width` values wide.
// The rows' RowRefs all name the same cache, attend from position 0 and
// have no ring.
#include "common.glsl"
#include "attention.glsl"

#define TILE 64u
#define KB 64u
layout(local_size_x = 16, local_size_y = 16) in;

layout(push_constant) uniform Push {
  RowRefs rows;
  Floats scores;
  Floats out_heads;
  uint heads, kv_heads, head_dim, score_stride;
  uint row0, n;
  uint positions;  // the most positions a row of the chunk sees
  uint width;      // values a cache row
  uint from_keys;  // MLA: the values are the key cache's latents
} p;

shared vec4 sp[KB][TILE / 4u + 1u];  // [position][pairs / 4], padded
shared vec4 sv[KB][TILE / 4u];       // [position][channels / 4]

void main() {
  const uint tc = gl_LocalInvocationID.x, tp = gl_LocalInvocationID.y, me = tp * 16u + tc;
  const uint group = p.heads / p.kv_heads, kvh = gl_WorkGroupID.z, d = p.head_dim, width = p.width;
  const uint c0 = gl_WorkGroupID.x * TILE, b0 = gl_WorkGroupID.y * TILE;
  Floats values = p.from_keys != 0u ? p.rows.v[p.row0].keys : p.rows.v[p.row0].values;
  // The invocation's pairs: where their scores start and how many positions each sees.
  uint count[4];
  [[unroll]] for (uint a = 0; a < 4; ++a) {
    const uint pair = b0 + 4u * tp + a, i = pair / group;
    count[a] = i < p.n ? p.rows.v[p.row0 + i].count : 0u;
  }
  precise float acc[4][4];
  [[unroll]] for (uint a = 0; a < 4; ++a)
    [[unroll]] for (uint b = 0; b < 4; ++b) acc[a][b] = 0.0;
  for (uint j0 = 0; j0 < p.positions; j0 += KB) {
    // Scores: element (pair me / 64 + 4t, position me % 64); values:
    // (position me / 64 + 4t, channel me % 64).
    [[dont_unroll]] for (uint t0 = 0; t0 < TILE / 4u; t0 += LOADS_AT_ONCE)
      [[unroll]] for (uint t = t0; t < t0 + LOADS_AT_ONCE; ++t) {
        const uint pl = me / KB + 4u * t, jj = me % KB, pair = b0 + pl, i = pair / group;
        const uint h = kvh * group + pair % group, j = j0 + jj;
        sp[jj][pl / 4u][pl % 4u] = i < p.n && j < p.rows.v[p.row0 + i].count
                                       ? p.scores.v[(i * p.heads + h) * p.score_stride + j] : 0.0;
        const uint jv = j0 + me / TILE + 4u * t, c = c0 + me % TILE;
        sv[me / TILE + 4u * t][(me % TILE) / 4u][me % 4u] =
            jv < p.positions && c < d ? values.v[jv * width + kvh * d + c] : 0.0;
      }
    barrier();
    const uint steps = min(KB, p.positions - j0);
    for (uint jj = 0; jj < steps; ++jj) {
      const vec4 s = sp[jj][tp], v = sv[jj][tc];
      [[unroll]] for (uint a = 0; a < 4; ++a)
        if (j0 + jj < count[a])
          [[unroll]] for (uint b = 0; b < 4; ++b) acc[a][b] = fma(s[a], v[b], acc[a][b]);
    }
    barrier();
  }
  [[unroll]] for (uint a = 0; a < 4; ++a) {
    const uint pair = b0 + 4u * tp + a, i = pair / group, h = kvh * group + pair % group;
    [[unroll]] for (uint b = 0; b < 4; ++b) {
      const uint c = c0 + 4u * tc + b;
      if (i < p.n && c < d) p.out_heads.v[((p.row0 + i) * p.heads + h) * d + c] = acc[a][b];
    }
  }
}
