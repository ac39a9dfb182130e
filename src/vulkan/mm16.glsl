// The tiled 16-lane product that linear_mm.comp, gqa_scores.comp and
// mla_scores.comp share:
// C[b][a] = Σ_i A[a][i] · B[b][i] in linear.h's order (lane j of 16 sums
// fma(A[a][i], B[b][i], ·) over i ≡ j (mod 16) in increasing i, then the
// lanes fold as the tree w = 8, 4, 2, 1), for a tile of 32 a × 32 b.
//
// A workgroup of 16 lanes × 16 groups: group g holds, for its lane's
// columns, the chains of a = g/4 + 4·u and b = g%4 + 4·v (u, v < 8). The
// tile's A and B go through shared memory MM_KB columns at a time, each
// loaded once for the workgroup. The includer defines, before including:
//   float mm_a(uint a, uint col);  // A's value (0 past its rows: never summed)
//   float mm_b(uint b, uint col);  // likewise B's
// and calls mm_chains(len, acc), then mm_fold(q, acc, a, b) for q = 0..3;
// that pair may come again for other columns (mla_scores.comp: the latent's,
// then the rotated key's), since each mm_fold ends with a barrier after its
// reads of the shared tile, before the next mm_chains writes it.
#define MM_TILE 32u
#define MM_KB 64u  // columns a pass through shared memory: 4 of each lane's chain
#define MM_BS 80u  // a B row's stride in shared memory: rows g%4 apart land 16 banks apart
layout(local_size_x = 16, local_size_y = 16) in;

float mm_a(uint a, uint col);
float mm_b(uint b, uint col);

// A's tile (MM_TILE × MM_KB) then B's (MM_TILE × MM_BS); the fold reuses
// the space: 16 groups × 16 chains × 17 (16 lanes, padded).
shared float mm_tile[MM_TILE * MM_KB + MM_TILE * MM_BS];

// The invocation's 64 chains over columns [0, len).
void mm_chains(uint len, out precise float mm_acc[8][8]) {
  const uint lane = gl_LocalInvocationID.x, group = gl_LocalInvocationID.y, me = group * 16u + lane;
  const uint ga = group / 4u, gb = group % 4u;
  [[unroll]] for (uint u = 0; u < 8; ++u)
    [[unroll]] for (uint v = 0; v < 8; ++v) mm_acc[u][v] = 0.0;
  for (uint k0 = 0; k0 < len; k0 += MM_KB) {
    // The pass's columns: invocation `me` loads column me % MM_KB of tile
    // rows me / MM_KB + 4t (zero past the row).
    const uint c = me % MM_KB, col = k0 + c;
    [[dont_unroll]] for (uint t0 = 0; t0 < MM_TILE / 4u; t0 += LOADS_AT_ONCE)
      [[unroll]] for (uint t = t0; t < t0 + LOADS_AT_ONCE; ++t) {
        const uint i = me / MM_KB + 4u * t;
        mm_tile[i * MM_KB + c] = col < len ? mm_a(i, col) : 0.0;
        mm_tile[MM_TILE * MM_KB + i * MM_BS + c] = col < len ? mm_b(i, col) : 0.0;
      }
    barrier();
    // The lane's 4 columns of the pass, in increasing order; a column past
    // the row adds nothing (not even a zero: the chain's bits stay those
    // of the one-row kernels).
    [[unroll]] for (uint s = 0; s < MM_KB / 16u; ++s) {
      const uint cc = 16u * s + lane;
      if (k0 + cc < len) {
        float av[8], bv[8];
        [[unroll]] for (uint u = 0; u < 8; ++u) av[u] = mm_tile[(ga + 4u * u) * MM_KB + cc];
        [[unroll]] for (uint v = 0; v < 8; ++v) bv[v] = mm_tile[MM_TILE * MM_KB + (gb + 4u * v) * MM_BS + cc];
        [[unroll]] for (uint u = 0; u < 8; ++u)
          [[unroll]] for (uint v = 0; v < 8; ++v) mm_acc[u][v] = fma(av[u], bv[v], mm_acc[u][v]);
      }
    }
    barrier();
  }
}

// Fold step q (0..3) of 4, called by every invocation: the chains
// u = 2q, 2q + 1 of each invocation meet in shared memory, and invocation
// (lane, group) folds one (a, b) of its group over the 16 lanes; returns
// its sum and sets a and b (tile-relative).
float mm_fold(uint q, float mm_acc[8][8], out uint a, out uint b) {
  const uint lane = gl_LocalInvocationID.x, group = gl_LocalInvocationID.y;
  [[unroll]] for (uint e = 0; e < 16; ++e) mm_tile[(group * 16u + e) * 17u + lane] = mm_acc[2u * q + e / 8u][e % 8u];
  barrier();
  float s[16];
  [[unroll]] for (uint l = 0; l < 16; ++l) s[l] = mm_tile[(group * 16u + lane) * 17u + l];
  barrier();
  [[unroll]] for (uint w = 8; w >= 1; w /= 2)
    [[unroll]] for (uint l = 0; l < w; ++l) {
      precise float t = s[l] + s[l + w];
      s[l] = t;
    }
  a = group / 4u + 4u * (2u * q + lane / 8u);
  b = group % 4u + 4u * (lane % 8u);
  return s[0];
}
