#version 450
// y row = rms_norm(x row, weight) as kernels::rms_norm: ss by the 16-lane
// dot, inv = 1 / sqrt(ss / width + eps), y = weight · (x · inv); with a
// delta, x += delta first (backend.h's add_rms_norm: the residual stream's
// add, written back, then its norm). One
// workgroup of 256 per row: all of it brings the row into shared memory a
// piece at a time (so the 16 lanes' sequential chains never wait on device
// memory), and all of it writes y; x and y may be the same. An invocation's
// columns of a piece (and the norm's weights) are loaded together before
// any is used, and a row no wider than a piece is normed from shared
// memory: the op waits on device memory about once a piece (a decode step's
// norm is that latency, not its bytes).
//
// Built with COMBINE (combine_norm): the delta is a MoE layer's combine,
// made here column by column (combine.glsl) and written to delta as
// combine.comp writes it, then added: combine.comp and this shader's add in
// one dispatch, with their bits (VulkanBackend::dispatch_combine holds a
// combine back for the add_rms_norm that follows it).
#include "common.glsl"

layout(local_size_x = 256) in;
#define PIECE 2048u
#define PER (PIECE / 256u)  // an invocation's columns of a piece
#include "lanes16.glsl"
#ifdef COMBINE
#define COMBINE_COLUMNS PER
#include "combine.glsl"
#endif

layout(push_constant) uniform Push {
  Floats x;
  Floats weight;
  Floats y;
  Floats delta;
  uint width;
  float eps;
  uint add;  // 1: x += delta first
#ifdef COMBINE
  uint k;
  Floats ys;
  Floats shared_rows;
  Uints slot_rows;  // [n × k], sorted by expert id within a row
  Floats weights;   // [n × k], in the same order
  uint has_shared;
#endif
} p;

shared float piece[PIECE];

void main() {
  const uint r0 = gl_WorkGroupID.x * p.width, id = gl_LocalInvocationID.x;
#ifdef COMBINE
  if (p.add != 0u) combine_stage(p.slot_rows, p.weights, gl_WorkGroupID.x, p.k, p.width);
#endif
  precise float acc = 0.0;
  float scale[PER];  // the norm's weights of the invocation's columns, for a row of one piece
  for (uint c0 = 0; c0 < p.width; c0 += PIECE) {
    const uint c1 = min(c0 + PIECE, p.width);
    float xs[PER], o[PER];
    [[unroll]] for (uint u = 0; u < PER; ++u) {
      const uint i = c0 + id + 256u * u;
      xs[u] = i < c1 ? p.x.v[r0 + i] : 0.0;
      scale[u] = i < c1 && p.width <= PIECE ? p.weight.v[i] : 0.0;
#ifndef COMBINE
      o[u] = p.add != 0u && i < c1 ? p.delta.v[r0 + i] : 0.0;
#endif
    }
#ifdef COMBINE
    if (p.add != 0u)
      combine_columns(p.ys, p.shared_rows, p.has_shared != 0, gl_WorkGroupID.x, p.k, p.width, c0 + id, 256u, c1, o);
#endif
    // An invocation adds and writes back the same columns i ≡ id (mod 256)
    // it reads again below: its own writes, seen by it alone.
    [[unroll]] for (uint u = 0; u < PER; ++u) {
      const uint i = c0 + id + 256u * u;
      if (i < c1) {
        float v = xs[u];
        if (p.add != 0u) {
#ifdef COMBINE
          p.delta.v[r0 + i] = o[u];
#endif
          precise float sum = xs[u] + o[u];
          v = sum;
          p.x.v[r0 + i] = v;
        }
        piece[i - c0] = v;
      }
    }
    barrier();
    if (id < 16u) {
      // A lane's next 8 values read before its chain consumes them (the
      // same order: docs/PERFORMANCE.md has what it saves).
      uint i = c0 + id;
      for (; i + 16u * 7u < c1; i += 16u * 8u) {
        float v[8];
        [[unroll]] for (uint u = 0; u < 8u; ++u) v[u] = piece[i - c0 + 16u * u];
        [[unroll]] for (uint u = 0; u < 8u; ++u) acc = fma(v[u], v[u], acc);
      }
      for (; i < c1; i += 16u) {
        const float v = piece[i - c0];
        acc = fma(v, v, acc);
      }
    }
    if (c1 < p.width) barrier();  // the next piece's stores overwrite what was read
  }
  const float ss = fold16(acc);
  precise float mean = ss / float(p.width) + p.eps;
  precise float inv = 1.0 / sqrt(mean);
  if (p.width <= PIECE) {
    // The row is the piece in shared memory, and the weights were loaded with it.
    [[unroll]] for (uint u = 0; u < PER; ++u) {
      const uint i = id + 256u * u;
      if (i < p.width) {
        precise float v = scale[u] * (piece[i] * inv);
        p.y.v[r0 + i] = v;
      }
    }
    return;
  }
  for (uint i = id; i < p.width; i += 256u) {
    precise float v = p.weight.v[i] * (p.x.v[r0 + i] * inv);
    p.y.v[r0 + i] = v;
  }
}
