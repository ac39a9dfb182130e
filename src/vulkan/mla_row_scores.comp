#version 450
// Latent attention's scores after mla_prep and the absorbed query (q_abs =
// q_nope · W_UK[h]): score (i, h, j) = (dot(q_abs, latent[j]) + dot(q_rot,
// rotated key[j]))·scale over the positions row i sees, the 16-lane dots in
// kernels::dot's order: their 16 chains are 16 invocations (LANE_CHAIN, each
// loading ahead of its fmas), a position's sums folded by tree16 in one
// invocation. A workgroup is 16 positions (gl_WorkGroupID.x), of head
// gl_WorkGroupID.y, of row gl_WorkGroupID.z of the chunk.
// attend_row.comp (built WIDE for latents over 128 channels; beyond 512
// attend_softmax.comp and attend_row_values.comp) follows, the cached
// latents as the values. The tiled prompt path (mla_scores.comp) computes the same
// bits.
//
// Built with PREP (mla_row_scores_prep), for a step whose rows are each
// their sequence's only row, it does mla_prep's work too, one dispatch
// fewer: each workgroup rotates its head's rope part of q itself
// (prep_head.glsl), and the one holding the row's own position makes the
// row's cache row (the latent normed, the rope part rotated), scores that
// position with it and, for head 0, writes it to the cache. The same bits
// as mla_prep and this shader apart.
#include "common.glsl"

layout(local_size_x = 16, local_size_y = 16) in;
#include "attention.glsl"
#ifdef PREP
#define PREP_THREADS 256u
#define PREP_HEADS 3u       // q's rope part, the latent, the key's rope part
#define PREP_MAX_DIM 512u   // (the host checks)
#include "lanes16.glsl"
#include "prep_head.glsl"
#endif

layout(push_constant) uniform Push {
  Floats q_abs, q_rot;
  RowRefs rows;
  Floats scores;
  uint heads, latent, rope_dim, score_stride;
  float scale;
  uint row0;
#ifdef PREP
  Floats q, kv, rot, kv_norm;
  uint qk, nope;
  float eps;
  uint has_rope, interleaved;
#endif
} p;

shared float chains[2][16][17];  // [latent, rope][position][lane], padded

void main() {
  const uint lane = gl_LocalInvocationID.x, pj = gl_LocalInvocationID.y;
  const uint j = gl_WorkGroupID.x * 16u + pj, h = gl_WorkGroupID.y, ii = gl_WorkGroupID.z;
  const uint i = p.row0 + ii, width = p.latent + p.rope_dim;
  RowRef r = p.rows.v[i];
  const bool live = j < r.count;
  const uint at = cache_slot(r, r.first + j) * width, qa = (i * p.heads + h) * p.latent,
             qr = (i * p.heads + h) * p.rope_dim;
#ifdef PREP
  // The row's own position is its last; this workgroup's when in its 16.
  const uint own = r.count - 1u;
  const bool has_own = own / 16u == gl_WorkGroupID.x, writes = has_own && h == 0u, interleaved = p.interleaved != 0;
  const uint half_ = p.has_rope != 0 ? p.rope_dim / 2u : 0u, src = i * width;
  prep_load(0u, p.q, (i * p.heads + h) * p.qk + p.nope, false, p.kv_norm, true, p.rot, i * p.rope_dim, p.rope_dim,
            half_);
  if (has_own) {
    prep_load(1u, p.kv, src, true, p.kv_norm, false, p.rot, 0u, p.latent, 0u);
    prep_load(2u, p.kv, src + p.latent, false, p.kv_norm, false, p.rot, 0u, p.rope_dim, half_);
  }
  barrier();
  prep_head(0u, false, p.eps, p.rope_dim, half_, interleaved);
  if (has_own) {
    prep_head(1u, true, p.eps, p.latent, 0u, false);
    prep_head(2u, false, p.eps, p.rope_dim, half_, interleaved);
  }
  if (writes) {
    const uint own_at = cache_slot(r, r.pos) * width;
    for (uint c = gl_LocalInvocationIndex; c < p.latent; c += 256u) r.keys.v[own_at + c] = prep_out[1][c];
    for (uint c = gl_LocalInvocationIndex; c < p.rope_dim; c += 256u) r.keys.v[own_at + p.latent + c] = prep_out[2][c];
  }
#define Q_ROT_AT(c) prep_out[0][c]
#define LATENT_AT(c) (j == own ? prep_out[1][c] : r.keys.v[at + (c)])
#define KEY_ROT_AT(c) (j == own ? prep_out[2][c] : r.keys.v[at + p.latent + (c)])
#else
#define Q_ROT_AT(c) p.q_rot.v[qr + (c)]
#define LATENT_AT(c) r.keys.v[at + (c)]
#define KEY_ROT_AT(c) r.keys.v[at + p.latent + (c)]
#endif
#define Q_ABS_AT(c) p.q_abs.v[qa + (c)]
  precise float latent_sum = 0.0, rope_sum = 0.0;
  if (live) {
    LANE_CHAIN(latent_sum, p.latent, Q_ABS_AT, LATENT_AT)
    LANE_CHAIN(rope_sum, p.rope_dim, Q_ROT_AT, KEY_ROT_AT)
  }
  chains[0][pj][lane] = latent_sum;
  chains[1][pj][lane] = rope_sum;
  barrier();
  if (!live || lane != 0u) return;
  float lanes[16], rope_lanes[16];
  [[unroll]] for (uint t = 0; t < 16u; ++t) {
    lanes[t] = chains[0][pj][t];
    rope_lanes[t] = chains[1][pj][t];
  }
  const float dl = tree16(lanes), dr = tree16(rope_lanes);
  precise float s = (dl + dr) * p.scale;
  p.scores.v[(ii * p.heads + h) * p.score_stride + j] = s;
}
