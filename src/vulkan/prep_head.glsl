// One attention head's prep before it attends, by a workgroup of
// PREP_THREADS invocations, in shared memory: the per-head RMSNorm (when
// given; kernels::rms_norm's: the 16-lane sum of squares (lane j over
// channels j, j + 16, ... by fma), fold16's tree, inv = 1 / sqrt(ss / d +
// eps), then weight · (x · inv)) and the rotation (Rope::apply's: pairs
// (x[i], x[i + half]), or (x[2i], x[2i + 1]) interleaved, by the row's
// factors, the results de-interleaved; channels from 2·half on kept). The
// head, its norm's weights and the factors are loaded once, together, before
// any is used: going through device memory between the steps waited on it
// about five times in a row (a decode step's ops are that latency).
//
// Up to PREP_HEADS heads at once (index `which`): gqa_row_scores.comp's PREP
// build preps a row's q head and, where it scores the row's own position,
// its k head; mla_prep.comp a row's latent and its rotated part. The
// includer defines PREP_THREADS and PREP_HEADS and includes lanes16.glsl
// (fold16) first.
#ifndef PREP_MAX_DIM
#define PREP_MAX_DIM 1024u  // channels of a head (the host checks)
#endif
#define PREP_PER (PREP_MAX_DIM / PREP_THREADS)

shared float prep_x[PREP_HEADS][PREP_MAX_DIM];       // the head; then its norm
shared float prep_scale[PREP_HEADS][PREP_MAX_DIM];   // the norm's weights
shared float prep_factor[PREP_MAX_DIM];              // cos of pairs 0 .. half-1, then sin
shared float prep_out[PREP_HEADS][PREP_MAX_DIM];     // the head prepped

// Brings head `which` (x[at .. at + d)) and its norm's weights into shared
// memory; with `factors`, the row's rotation factors too (rot[rot_at ..
// rot_at + 2·half)). A barrier() must follow before prep_head().
void prep_load(uint which, Floats x, uint at, bool normed, Floats norm, bool factors, Floats rot, uint rot_at, uint d,
               uint half_) {
  for (uint c = gl_LocalInvocationIndex; c < d; c += PREP_THREADS) {
    prep_x[which][c] = x.v[at + c];
    if (normed) prep_scale[which][c] = norm.v[c];
    if (factors && c < 2u * half_) prep_factor[c] = rot.v[rot_at + c];
  }
}

// Head `which`'s norm and rotation into prep_out[which], by every invocation
// (a barrier() at the end: prep_out is then read by all).
void prep_head(uint which, bool normed, float eps, uint d, uint half_, bool interleaved) {
  const uint t = gl_LocalInvocationIndex;
  if (normed) {
    precise float acc = 0.0;
    if (t < 16u)
      for (uint c = t; c < d; c += 16u) acc = fma(prep_x[which][c], prep_x[which][c], acc);
    const float ss = fold16(acc);
    precise float mean = ss / float(d) + eps;
    precise float inv = 1.0 / sqrt(mean);
    float normed_values[PREP_PER];
    [[unroll]] for (uint k = 0; k < PREP_PER; ++k) {
      const uint c = t + PREP_THREADS * k;
      precise float v = c < d ? prep_scale[which][c] * (prep_x[which][c] * inv) : 0.0;
      normed_values[k] = v;
    }
    barrier();
    [[unroll]] for (uint k = 0; k < PREP_PER; ++k)
      if (t + PREP_THREADS * k < d) prep_x[which][t + PREP_THREADS * k] = normed_values[k];
    barrier();
  }
  for (uint c = t; c < d; c += PREP_THREADS) {
    float out_value = prep_x[which][c];
    if (c < 2u * half_) {
      const uint pr = c < half_ ? c : c - half_;
      const float a = interleaved ? prep_x[which][2u * pr] : prep_x[which][pr];
      const float b = interleaved ? prep_x[which][2u * pr + 1u] : prep_x[which][pr + half_];
      const float cs = prep_factor[pr], sn = prep_factor[half_ + pr];
      if (c < half_) {
        precise float ac = a * cs, bs = b * sn;
        precise float lo = ac - bs;
        out_value = lo;
      } else {
        precise float bc = b * cs, as_ = a * sn;
        precise float hi = bc + as_;
        out_value = hi;
      }
    }
    prep_out[which][c] = out_value;
  }
  barrier();
}
