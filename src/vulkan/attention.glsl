// What the attention shaders share: each row of a step names its sequence's
// cache rows for the layer (RowRef, written by the host per op), and the
// rotation factors of its position, computed on the host exactly as
// backend/rope.h's Rope::rotation() (a GPU's sin and cos of large angles are
// not the C++ library's).
struct RowRef {
  Floats keys;    // the layer's key rows (MLA: the cached latent + rotated key)
  Floats values;  // the layer's value rows (unused by MLA)
  uint pos;       // the row's position
  uint ring;      // the layer's ring size, 0 when its rows grow
  uint first;     // the first position the row attends to
  uint count;     // positions it attends to: first .. first + count - 1
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer RowRefs { RowRef v[]; };

uint cache_slot(RowRef r, uint pos) { return r.ring != 0 ? pos % r.ring : pos; }

// O = Σ_j S_AT(j) · v[slot(first + j) · width + col] over the row's
// positions, by fma from O = 0 in increasing j (one value channel;
// attention's order). The chain is sequential: VALUES_AHEAD (32 unless the
// includer says) positions' loads go out together, and the next ones'
// while these' fma steps run, so it waits on device memory about once
// every VALUES_AHEAD positions, not once per position (a row's positions
// are the same for every invocation of a workgroup: the branches are
// uniform). A macro so that the scores may be in a buffer or in shared
// memory (attend_row.comp's staged ones).
#ifndef VALUES_AHEAD
#define VALUES_AHEAD 32u
#endif
#define WEIGHTED_VALUES(O, S_AT, r, v, width, col)                                    \
  {                                                                                   \
    float sj_[VALUES_AHEAD], vj_[VALUES_AHEAD];                                       \
    [[unroll]] for (uint u_ = 0; u_ < VALUES_AHEAD; ++u_) {                           \
      sj_[u_] = u_ < r.count ? S_AT(u_) : 0.0;                                        \
      vj_[u_] = u_ < r.count ? v.v[cache_slot(r, r.first + u_) * (width) + (col)] : 0.0; \
    }                                                                                 \
    for (uint j_ = 0; j_ < r.count; j_ += VALUES_AHEAD) {                             \
      float sn_[VALUES_AHEAD], vn_[VALUES_AHEAD];                                     \
      [[unroll]] for (uint u_ = 0; u_ < VALUES_AHEAD; ++u_) {                         \
        const uint jn_ = j_ + VALUES_AHEAD + u_;                                      \
        sn_[u_] = jn_ < r.count ? S_AT(jn_) : 0.0;                                    \
        vn_[u_] = jn_ < r.count ? v.v[cache_slot(r, r.first + jn_) * (width) + (col)] : 0.0; \
      }                                                                               \
      [[unroll]] for (uint u_ = 0; u_ < VALUES_AHEAD; ++u_)                           \
        if (j_ + u_ < r.count) O = fma(sj_[u_], vj_[u_], O);                          \
      [[unroll]] for (uint u_ = 0; u_ < VALUES_AHEAD; ++u_) {                         \
        sj_[u_] = sn_[u_];                                                            \
        vj_[u_] = vn_[u_];                                                            \
      }                                                                               \
    }                                                                                 \
  }

// The same over scores in a buffer: s[s0 + j].
float weighted_values(Floats s, uint s0, RowRef r, Floats v, uint width, uint col) {
  precise float o = 0.0;
#define SCORE_IN_BUFFER(j) s.v[s0 + (j)]
  WEIGHTED_VALUES(o, SCORE_IN_BUFFER, r, v, width, col)
  return o;
}

// Lane `lane`'s chain of the 16-lane dot (kernels::dot's order)
// of A_AT(c) and B_AT(c), c < N: ACC = fma(A_AT(c), B_AT(c), ACC) over c ≡
// lane (mod 16) in increasing c. Its loads go out 16 at a time, the next 16
// while these are summed. A macro so that either side may be in shared
// memory (`lane` must be in scope); tree16 folds the sixteen lanes' sums.
#define LANE_CHAIN(ACC, N, A_AT, B_AT)                                            \
  {                                                                               \
    float av_[16], bv_[16];                                                       \
    [[unroll]] for (uint u_ = 0; u_ < 16u; ++u_) {                                \
      const uint c_ = lane + 16u * u_;                                            \
      av_[u_] = c_ < (N) ? A_AT(c_) : 0.0;                                        \
      bv_[u_] = c_ < (N) ? B_AT(c_) : 0.0;                                        \
    }                                                                             \
    for (uint c0_ = lane; c0_ < (N); c0_ += 256u) {                               \
      float an_[16], bn_[16];                                                     \
      [[unroll]] for (uint u_ = 0; u_ < 16u; ++u_) {                              \
        const uint c_ = c0_ + 256u + 16u * u_;                                    \
        an_[u_] = c_ < (N) ? A_AT(c_) : 0.0;                                      \
        bn_[u_] = c_ < (N) ? B_AT(c_) : 0.0;                                      \
      }                                                                           \
      [[unroll]] for (uint u_ = 0; u_ < 16u; ++u_)                                \
        if (c0_ + 16u * u_ < (N)) ACC = fma(av_[u_], bv_[u_], ACC);               \
      [[unroll]] for (uint u_ = 0; u_ < 16u; ++u_) {                              \
        av_[u_] = an_[u_];                                                        \
        bv_[u_] = bn_[u_];                                                        \
      }                                                                           \
    }                                                                             \
  }

// The sixteen lanes' sums folded as kernels::dot folds them: w = 8, 4, 2, 1.
float tree16(float lanes[16]) {
  precise float a[16];
  [[unroll]] for (uint t = 0; t < 16u; ++t) a[t] = lanes[t];
  [[unroll]] for (uint w = 8; w >= 1; w /= 2)
    [[unroll]] for (uint t = 0; t < w; ++t) {
      precise float s = a[t] + a[t + w];
      a[t] = s;
    }
  return a[0];
}

