#version 450
// Latent attention's scores for many rows of one sequence (a prompt), after
// mla_prep and the absorbed query: score (i, h, j) = (dot(q_abs[i][h],
// latent[j]) + dot(q_rot[i][h], rotated key[j]))·scale for the positions
// j < count that row i sees. Each dot is a 16-lane chain in kernels::dot's
// order (mm16.glsl), and the sum and the scale are mla_row_scores.comp's, so
// a row's scores have the bits it gets alone. Tiled over 32 positions × 32
// (row, head) pairs: every head reads the one latent cache, so a key row
// loaded into shared memory serves 32 pairs (the row kernel loads it once a
// head and row). The rows' RowRefs all name the same cache, attend from
// position 0 and have no ring (the host checks).
#include "common.glsl"
#include "attention.glsl"
#include "mm16.glsl"

layout(push_constant) uniform Push {
  Floats q_abs, q_rot;
  RowRefs rows;
  Floats scores;  // per (row of the chunk, head): score_stride values
  uint heads, latent, rope_dim, score_stride;
  float scale;
  uint row0, n;    // the chunk: rows row0 .. row0 + n
  uint positions;  // the most positions a row of the chunk sees
} p;

Floats keys;
uint j0, b0;
bool rotated;  // the pass over the rotated key's columns (else the latent's)

// A: key row j0 + a (the latent, then the rotated key); B: pair b0 + b =
// (row (b0 + b) / heads, head (b0 + b) % heads).
float mm_a(uint a, uint col) {
  if (j0 + a >= p.positions) return 0.0;
  return keys.v[(j0 + a) * (p.latent + p.rope_dim) + (rotated ? p.latent + col : col)];
}
float mm_b(uint b, uint col) {
  const uint pair = b0 + b, i = pair / p.heads;
  if (i >= p.n) return 0.0;
  const uint at = (p.row0 + i) * p.heads + pair % p.heads;
  return rotated ? p.q_rot.v[at * p.rope_dim + col] : p.q_abs.v[at * p.latent + col];
}

void main() {
  j0 = gl_WorkGroupID.x * MM_TILE;
  b0 = gl_WorkGroupID.y * MM_TILE;
  keys = p.rows.v[p.row0].keys;
  precise float acc[8][8];
  float latent_dot[4];
  rotated = false;
  mm_chains(p.latent, acc);
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    uint a, b;
    latent_dot[q] = mm_fold(q, acc, a, b);
  }
  rotated = true;
  mm_chains(p.rope_dim, acc);
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    uint a, b;
    const float rotated_dot = mm_fold(q, acc, a, b);
    const uint j = j0 + a, pair = b0 + b, i = pair / p.heads, h = pair % p.heads;
    if (i < p.n && j < p.rows.v[p.row0 + i].count) {
      precise float s = (latent_dot[q] + rotated_dot) * p.scale;
      p.scores.v[(i * p.heads + h) * p.score_stride + j] = s;
    }
  }
}
