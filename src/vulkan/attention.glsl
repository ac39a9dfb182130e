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

// Σ_j s[s0 + j] · v[slot(first + j) · width + col] over the row's positions,
// by fma from 0 in increasing j (one value channel; attention's order). The
// chain is sequential: VALUES_AHEAD (32 unless the includer says) positions'
// loads go out together, and the next ones' while these' fma steps run, so
// it waits on device memory about once every VALUES_AHEAD positions, not
// once per position (a row's positions are the same for every invocation of
// a workgroup: the branches are uniform).
#ifndef VALUES_AHEAD
#define VALUES_AHEAD 32u
#endif
float weighted_values(Floats s, uint s0, RowRef r, Floats v, uint width, uint col) {
  precise float o = 0.0;
  float sj[VALUES_AHEAD], vj[VALUES_AHEAD];
  [[unroll]] for (uint u = 0; u < VALUES_AHEAD; ++u) {
    sj[u] = u < r.count ? s.v[s0 + u] : 0.0;
    vj[u] = u < r.count ? v.v[cache_slot(r, r.first + u) * width + col] : 0.0;
  }
  for (uint j = 0; j < r.count; j += VALUES_AHEAD) {
    float sn[VALUES_AHEAD], vn[VALUES_AHEAD];
    [[unroll]] for (uint u = 0; u < VALUES_AHEAD; ++u) {
      const uint jn = j + VALUES_AHEAD + u;
      sn[u] = jn < r.count ? s.v[s0 + jn] : 0.0;
      vn[u] = jn < r.count ? v.v[cache_slot(r, r.first + jn) * width + col] : 0.0;
    }
    [[unroll]] for (uint u = 0; u < VALUES_AHEAD; ++u)
      if (j + u < r.count) o = fma(sj[u], vj[u], o);
    [[unroll]] for (uint u = 0; u < VALUES_AHEAD; ++u) {
      sj[u] = sn[u];
      vj[u] = vn[u];
    }
  }
  return o;
}

// Lane `lane`'s chain of the 16-lane dot (kernels::dot's order, dot_serial's)
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

// The sixteen lanes' sums folded as dot_serial folds them: w = 8, 4, 2, 1.
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

