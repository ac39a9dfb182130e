#version 450
// Grouped-query attention's scores for rows of any sequences (decode steps,
// short chunks), after gqa_prep: score (i, h, j) = dot(q[i][h], key[j])·scale
// over the positions row i sees, the 16-lane dot in kernels::dot's order:
// here its 16 chains are 16 invocations (LANE_CHAIN: each loads its
// channels of q and of the key ahead of its fmas), and a position's sixteen
// sums fold by its tree (tree16) in one invocation. A
// workgroup is 16 positions (gl_WorkGroupID.x), of head gl_WorkGroupID.y,
// of row gl_WorkGroupID.z of the chunk. attend_row.comp follows
// (attend_softmax.comp and attend_row_values.comp for heads wider than 512
// channels). The tiled prompt path (gqa_scores.comp) computes the same bits.
//
// Built with PREP (gqa_row_scores_prep), for a step whose rows are each
// their sequence's only row, it does gqa_prep's work too, one dispatch
// fewer: each workgroup preps its row's q head (prep_head.glsl) and scores
// with it; the one holding the row's own position preps the k head and
// scores that position with it (its cache row is being written meanwhile),
// and, for the first q head of each k head, writes the k and v rows to
// the cache. The same bits as gqa_prep and this shader apart.
#include "common.glsl"

layout(local_size_x = 16, local_size_y = 16) in;
#include "attention.glsl"
#ifdef PREP
#define PREP_THREADS 256u
#define PREP_HEADS 2u
#define PREP_MAX_DIM 512u  // (the host checks)
#include "lanes16.glsl"
#include "prep_head.glsl"
#endif

layout(push_constant) uniform Push {
  Floats q;
  RowRefs rows;
  Floats scores;  // per (row of the chunk, head): score_stride values
  uint heads, kv_heads, head_dim, score_stride;
  float scale;
  uint row0;
#ifdef PREP
  Floats k, v;
  Floats rot;  // per row: cos then sin, rot_dim values
  Floats q_norm, k_norm;
  uint rot_dim;
  float eps;
  uint interleaved, has_q_norm, has_k_norm;
#endif
} p;

shared float chains[16][17];  // [position][lane], padded

void main() {
  const uint lane = gl_LocalInvocationID.x, pj = gl_LocalInvocationID.y;
  const uint j = gl_WorkGroupID.x * 16u + pj, h = gl_WorkGroupID.y, ii = gl_WorkGroupID.z;
  const uint i = p.row0 + ii, d = p.head_dim, kvh = h / (p.heads / p.kv_heads);
  RowRef r = p.rows.v[i];
  const bool live = j < r.count;
  const uint q0 = (i * p.heads + h) * d, k0 = cache_slot(r, r.first + j) * (p.kv_heads * d) + kvh * d;
#ifdef PREP
  // The row's own position is its last; this workgroup's when in its 16.
  const uint own = r.count - 1u;
  const bool has_own = own / 16u == gl_WorkGroupID.x, writes = has_own && h % (p.heads / p.kv_heads) == 0u;
  const uint kv_at = (i * p.kv_heads + kvh) * d, half_ = p.rot_dim / 2u;
  prep_load(0u, p.q, q0, p.has_q_norm != 0, p.q_norm, true, p.rot, i * p.rot_dim, d, half_);
  if (has_own) prep_load(1u, p.k, kv_at, p.has_k_norm != 0, p.k_norm, false, p.rot, 0u, d, half_);
  const uint own_slot = cache_slot(r, r.pos) * (p.kv_heads * d) + kvh * d;
  if (writes)
    for (uint c = gl_LocalInvocationIndex; c < d; c += 256u) r.values.v[own_slot + c] = p.v.v[kv_at + c];
  barrier();
  prep_head(0u, p.has_q_norm != 0, p.eps, d, half_, p.interleaved != 0);
  if (has_own) prep_head(1u, p.has_k_norm != 0, p.eps, d, half_, p.interleaved != 0);
  if (writes)
    for (uint c = gl_LocalInvocationIndex; c < d; c += 256u) r.keys.v[own_slot + c] = prep_out[1][c];
#define Q_AT(c) prep_out[0][c]
#define KEY_AT(c) (j == own ? prep_out[1][c] : r.keys.v[k0 + (c)])
#else
#define Q_AT(c) p.q.v[q0 + (c)]
#define KEY_AT(c) r.keys.v[k0 + (c)]
#endif
  precise float acc = 0.0;
  if (live) LANE_CHAIN(acc, d, Q_AT, KEY_AT)
  chains[pj][lane] = acc;
  barrier();
  if (!live || lane != 0u) return;
  float lanes[16];
  [[unroll]] for (uint t = 0; t < 16u; ++t) lanes[t] = chains[pj][t];
  precise float s = tree16(lanes) * p.scale;
  p.scores.v[(ii * p.heads + h) * p.score_stride + j] = s;
}
