#version 450
// Grouped-query attention's scores for many rows of one sequence (a
// prompt), after gqa_prep: score (i, h, j) = dot(q[i][h], key[j])·scale for
// the positions j < count that row i sees, the 16-lane dot in
// kernels::dot's order (mm16.glsl), so the same bits as
// gqa_row_scores.comp computes for the row alone. Tiled (mm16.glsl) over 32 positions × 32
// (row, head) pairs of one KV head (gl_WorkGroupID.z): A = the key rows,
// B = the queries of the KV head's heads. The rows' RowRefs all name the
// same cache, attend from position 0 and have no ring (the host checks).
#include "common.glsl"
#include "attention.glsl"
#include "mm16.glsl"

layout(push_constant) uniform Push {
  Floats q;
  RowRefs rows;
  Floats scores;  // per (row of the chunk, head): score_stride values
  uint heads, kv_heads, head_dim, score_stride;
  float scale;
  uint row0, n;   // the chunk: rows row0 .. row0 + n
  uint positions; // the most positions a row of the chunk sees
} p;

Floats keys;
uint group, kvh, j0, b0;

// A: key j0 + a; B: pair b0 + b = (row i, head kvh·group + b % group).
float mm_a(uint a, uint col) {
  return j0 + a < p.positions ? keys.v[(j0 + a) * p.kv_heads * p.head_dim + kvh * p.head_dim + col] : 0.0;
}
float mm_b(uint b, uint col) {
  const uint pair = b0 + b, i = pair / group, h = kvh * group + pair % group;
  return i < p.n ? p.q.v[((p.row0 + i) * p.heads + h) * p.head_dim + col] : 0.0;
}

void main() {
  group = p.heads / p.kv_heads;
  kvh = gl_WorkGroupID.z;
  j0 = gl_WorkGroupID.x * MM_TILE;
  b0 = gl_WorkGroupID.y * MM_TILE;
  keys = p.rows.v[p.row0].keys;
  precise float acc[8][8];
  mm_chains(p.head_dim, acc);
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    uint a, b;
    const float s = mm_fold(q, acc, a, b);
    const uint j = j0 + a, pair = b0 + b, i = pair / group, h = kvh * group + pair % group;
    if (i < p.n && j < p.rows.v[p.row0 + i].count) {
      precise float v = s * p.scale;
      p.scores.v[(i * p.heads + h) * p.score_stride + j] = v;
    }
  }
}
