#version 450
// Each row of logits reduced to backend.h's LogitPick, one workgroup of 256
// a row: the index of the row's largest value, the lowest such (as
// largest_logit() finds it: an invocation keeps the first of its values
// that no later one exceeds, and the tree keeps the lower index of equal
// values), and how many of its values are NaN or ±Inf (then the pick is not
// used: the row is an error). Written as (id, count) pairs of words to
// `picks`, which the host reads.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
  Floats logits;  // rows × vocab
  Uints picks;    // rows × 2
  uint vocab;
} p;

#define NONE 0xFFFFFFFFu
shared float best_value[256];
shared uint best_index[256];
shared uint bad[256];

void main() {
  const uint r = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, base = r * p.vocab;
  float bv = 0.0;
  uint bi = NONE, nf = 0u;
  // CHUNK of an invocation's values loaded before its comparisons take them
  // in order: it waits for memory once a chunk, not once a value (one
  // workgroup reads a whole row). The same comparisons in the same order.
  const uint CHUNK = 8u;
  for (uint i0 = t; i0 < p.vocab; i0 += 256u * CHUNK) {
    float v[CHUNK];
    [[unroll]] for (uint u = 0; u < CHUNK; ++u) {
      const uint i = i0 + 256u * u;
      v[u] = i < p.vocab ? p.logits.v[base + i] : 0.0;
    }
    [[unroll]] for (uint u = 0; u < CHUNK; ++u) {
      const uint i = i0 + 256u * u;
      if (i >= p.vocab) break;
      // An all-ones exponent is Inf or NaN (bits: no reliance on isnan()).
      nf += (floatBitsToUint(v[u]) & 0x7F800000u) == 0x7F800000u ? 1u : 0u;
      if (bi == NONE || v[u] > bv) {
        bv = v[u];
        bi = i;
      }
    }
  }
  best_value[t] = bv;
  best_index[t] = bi;
  bad[t] = nf;
  barrier();
  for (uint w = 128u; w >= 1u; w /= 2u) {
    if (t < w) {
      const float ov = best_value[t + w];
      const uint oi = best_index[t + w], mi = best_index[t];
      if (oi != NONE && (mi == NONE || ov > best_value[t] || (ov == best_value[t] && oi < mi))) {
        best_value[t] = ov;
        best_index[t] = oi;
      }
      bad[t] += bad[t + w];
    }
    barrier();
  }
  if (t == 0u) {
    p.picks.v[2u * r] = best_index[0] == NONE ? 0u : best_index[0];
    p.picks.v[2u * r + 1u] = bad[0];
  }
}
