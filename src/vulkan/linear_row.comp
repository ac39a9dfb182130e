#version 450
// y = x · Wᵀ (+ bias) for one batch row (a decode step), one weight format
// (FMT, weights.glsl), in linear.h's order as linear.comp computes it: for
// output o, lane j of 16 sums fma(W[o][i], x[i], ·) over i ≡ j (mod 16) in
// increasing i, then the lanes fold as the tree w = 8, 4, 2, 1. So the same
// bits as linear.comp and linear_mm.comp give the row in any batch.
//
// Two builds share the staging: a window of WC columns of a workgroup's
// rows at a time, all its invocations loading the rows' bytes (words side by
// side) and the window's x into shared memory, the next window's loads in
// flight while this one is computed. Then:
//   - by default a workgroup is OUTS = 8 outputs × 16 lanes, and each lane
//     chains its columns of the window from the staged bytes (weights.glsl's
//     formulas reading them);
//   - SPREAD: a workgroup of 256 invocations computes OUTS = 4 outputs: all
//     of it dequantizes the window's weights into floats in shared memory,
//     then the 64 invocations that hold the lanes' chains run them. For a
//     matrix of a few hundred outputs, whose workgroups are too few to keep
//     the GPU busy, dequantizing (what costs: a chain is a few cycles a
//     column) is shared by four times the invocations; for larger ones the
//     idle chains' share makes it slower (docs/PERFORMANCE.md).
//
// Heads (gl_WorkGroupID.z = h): head h multiplies by rows [h·head_rows,
// h·head_rows + out) of the matrix, reads x from h·x_head and writes y from
// h·y_head (MLA's per-head absorbed products).
#include "common.glsl"

#ifdef SPREAD
#define OUTS 4u
#define THREADS 256u
#define CHAIN 8u  // columns of a chain read before the fmas consume them
layout(local_size_x = 256) in;
#else
#define OUTS 8u
#define THREADS (16u * OUTS)
layout(local_size_x = 16, local_size_y = OUTS) in;
#endif

// Each format's block (columns, bytes) and window (columns, a multiple of
// the block and of 16: at most about 1 KB of each row). The matrix starts
// 4-byte aligned (the host checks).
#if FMT == 0
#define BLOCK_COLS 1u
#define BLOCK_BYTES 4u
#define WC 256u
#elif FMT == 1 || FMT == 2
#define BLOCK_COLS 1u
#define BLOCK_BYTES 2u
#define WC 512u
#elif FMT == 3 || FMT == 4
#define BLOCK_COLS 1u
#define BLOCK_BYTES 1u
#define WC 1024u
#elif FMT == 5
#define BLOCK_COLS 8u
#define BLOCK_BYTES 4u
#define WC 1024u
#elif FMT == 6
#define BLOCK_COLS 2u
#define BLOCK_BYTES 1u
#define WC 1024u
#elif FMT == 7
#define BLOCK_COLS 32u
#define BLOCK_BYTES 34u
#define WC 1024u
#elif FMT == 8
#define BLOCK_COLS 32u
#define BLOCK_BYTES 18u
#define WC 1024u
#elif FMT == 9
#define BLOCK_COLS 32u
#define BLOCK_BYTES 20u
#define WC 1024u
#elif FMT == 10
#define BLOCK_COLS 32u
#define BLOCK_BYTES 22u
#define WC 1024u
#elif FMT == 11
#define BLOCK_COLS 32u
#define BLOCK_BYTES 24u
#define WC 1024u
#elif FMT == 12
#define BLOCK_COLS 256u
#define BLOCK_BYTES 84u
#define WC 1024u
#elif FMT == 13
#define BLOCK_COLS 256u
#define BLOCK_BYTES 110u
#define WC 1024u
#elif FMT == 14
#define BLOCK_COLS 256u
#define BLOCK_BYTES 144u
#define WC 1024u
#elif FMT == 15
#define BLOCK_COLS 256u
#define BLOCK_BYTES 176u
#define WC 1024u
#elif FMT == 16
#define BLOCK_COLS 256u
#define BLOCK_BYTES 210u
#define WC 1024u
#elif FMT == 17
#define BLOCK_COLS 32u
#define BLOCK_BYTES 17u
#define WC 1024u
#else
#error "unknown FMT"
#endif

// A row's window, from a word boundary (up to 3 bytes before it), and the
// invocations' share of loading all OUTS of them.
#define STAGE_WORDS (WC / BLOCK_COLS * BLOCK_BYTES / 4u + 2u)
#define LOADS ((OUTS * STAGE_WORDS + THREADS - 1u) / THREADS)
#define X_LOADS ((WC + THREADS - 1u) / THREADS)
shared uint stage[OUTS][STAGE_WORDS];
shared float xw[WC];
#ifdef SPREAD
#define PER (OUTS * WC / THREADS)  // weights an invocation dequantizes a window
// Rows padded by 16 floats: the two outputs a subgroup's chains read fall in
// different banks.
shared float wf[OUTS][WC + 16u];
#endif
uint stage_slot;  // the invocation's row of the stage
uint stage_base;  // W_ROW: where the window's bytes start in it, less the window's offset in the row

uint stage_byte(uint k) { return (stage[stage_slot][k >> 2] >> (8u * (k & 3u))) & 0xFFu; }
uint stage_u16(uint k) {
  if ((k & 3u) != 3u) return (stage[stage_slot][k >> 2] >> (8u * (k & 3u))) & 0xFFFFu;
  return stage_byte(k) | (stage_byte(k + 1u) << 8);
}
uint stage_u32(uint k) {
  if ((k & 3u) == 0u) return stage[stage_slot][k >> 2];
  return stage_u16(k) | (stage_u16(k + 2u) << 16);
}
#define W_STAGED
#define W_ROW(w, o) stage_base
#define W_BYTE(w, k) stage_byte(k)
#define W_I8(w, k) (int(stage_byte(k) << 24) >> 24)
#define W_U16(w, k) stage_u16(k)
#define W_U32(w, k) stage_u32(k)
#define W_HALF(w, k) stage_u16(k)
#define W_F32(w, k) uintBitsToFloat(stage_u32(k))
#include "weights.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words { uint v[]; };

layout(push_constant) uniform Push {
  WeightRef w;
  Floats x;
  Floats y;
  uint n;
  uint x_stride, y_stride;
  uint head_rows, x_head, y_head;
} p;

shared float lanes[OUTS][16];

// Window c0's bytes of the workgroup's rows and its x, invocation id's share.
void load_window(uint c0, uint first_row, uint rows, uint x0, uint id, out uint words[LOADS], out float xs[X_LOADS]) {
  WeightRef w = p.w;
  const uint c1 = min(c0 + WC, w.in_cols), b0 = c0 / BLOCK_COLS * BLOCK_BYTES, b1 = c1 / BLOCK_COLS * BLOCK_BYTES;
  Words src = Words(uvec2(w.data));
  [[unroll]] for (uint t = 0; t < LOADS; ++t) {
    const uint k = id + THREADS * t, s = k / STAGE_WORDS, wd = k % STAGE_WORDS;
    const uint start = (first_row + s) * w.row_bytes + b0;
    words[t] = s < rows && wd < ((start & 3u) + b1 - b0 + 3u) / 4u ? src.v[start / 4u + wd] : 0u;
  }
  [[unroll]] for (uint t = 0; t < X_LOADS; ++t) {
    const uint c = id + THREADS * t;
    xs[t] = c < WC && c0 + c < c1 ? p.x.v[x0 + c0 + c] : 0.0;
  }
}

#ifdef SPREAD
void main() {
  WeightRef w = p.w;
  const uint id = gl_LocalInvocationID.x, lane = id % 16u, slot = id / 16u;
  const uint h = gl_WorkGroupID.z, o0 = gl_WorkGroupID.x * OUTS;
  const uint rows = min(OUTS, w.out_rows - o0), first_row = h * p.head_rows + o0;
  const uint x0 = h * p.x_head, in_w = w.in_cols;
  const bool chains = slot < OUTS, live = slot < rows && p.n > 0u;
  precise float acc = 0.0;
  uint words[LOADS];
  float xs[X_LOADS];
  load_window(0u, first_row, rows, x0, id, words, xs);
  for (uint c0 = 0; c0 < in_w; c0 += WC) {
    [[unroll]] for (uint t = 0; t < LOADS; ++t) {
      const uint k = id + THREADS * t;
      if (k < OUTS * STAGE_WORDS) stage[k / STAGE_WORDS][k % STAGE_WORDS] = words[t];
    }
    [[unroll]] for (uint t = 0; t < X_LOADS; ++t)
      if (id + THREADS * t < WC) xw[id + THREADS * t] = xs[t];
    barrier();
    if (c0 + WC < in_w) load_window(c0 + WC, first_row, rows, x0, id, words, xs);
    const uint width = min(WC, in_w - c0), b0 = c0 / BLOCK_COLS * BLOCK_BYTES;
    [[unroll]] for (uint k = 0; k < PER; ++k) {
      const uint e = id + THREADS * k, r = e / WC, c = e % WC;
      if (r < rows && c < width) {
        stage_slot = r;
        stage_base = (((first_row + r) * w.row_bytes + b0) & 3u) - b0;
        wf[r][c] = weight(w, first_row + r, c0 + c);
      }
    }
    barrier();
    if (live)
      for (uint i0 = lane; i0 < width; i0 += 16u * CHAIN) {
        float wv[CHAIN], xv[CHAIN];
        [[unroll]] for (uint k = 0; k < CHAIN; ++k) {
          const uint i = min(i0 + 16u * k, WC - 1u);
          wv[k] = wf[slot][i];
          xv[k] = xw[i];
        }
        [[unroll]] for (uint k = 0; k < CHAIN; ++k)
          if (i0 + 16u * k < width) acc = fma(wv[k], xv[k], acc);
      }
    barrier();  // the next window's stores overwrite what was read
  }
  if (chains) lanes[slot][lane] = acc;
  barrier();
  for (uint width = 8; width >= 1; width /= 2) {
    if (chains && lane < width) {
      precise float s = lanes[slot][lane] + lanes[slot][lane + width];
      lanes[slot][lane] = s;
    }
    barrier();
  }
  if (live && lane == 0u) {
    precise float v = lanes[slot][0];
    if (w.has_bias != 0) v = v + w.bias.v[h * p.head_rows + o0 + slot];
    p.y.v[h * p.y_head + o0 + slot] = v;
  }
}
#else
void main() {
  WeightRef w = p.w;
  const uint lane = gl_LocalInvocationID.x, slot = gl_LocalInvocationID.y, id = slot * 16u + lane;
  const uint h = gl_WorkGroupID.z, o0 = gl_WorkGroupID.x * OUTS, o = o0 + slot;
  const uint rows = min(OUTS, w.out_rows - o0), first_row = h * p.head_rows + o0;
  const uint x0 = h * p.x_head, in_w = w.in_cols;
  const bool live = o < w.out_rows && p.n > 0u;
  stage_slot = slot;
  precise float acc = 0.0;
  uint words[LOADS];
  float xs[X_LOADS];
  load_window(0u, first_row, rows, x0, id, words, xs);
  for (uint c0 = 0; c0 < in_w; c0 += WC) {
    [[unroll]] for (uint t = 0; t < LOADS; ++t) {
      const uint k = id + THREADS * t;
      if (k < OUTS * STAGE_WORDS) stage[k / STAGE_WORDS][k % STAGE_WORDS] = words[t];
    }
    [[unroll]] for (uint t = 0; t < X_LOADS; ++t)
      if (id + THREADS * t < WC) xw[id + THREADS * t] = xs[t];
    barrier();
    if (c0 + WC < in_w) load_window(c0 + WC, first_row, rows, x0, id, words, xs);
    const uint c1 = min(c0 + WC, in_w);
    stage_base = (((first_row + slot) * w.row_bytes + c0 / BLOCK_COLS * BLOCK_BYTES) & 3u) -
                 c0 / BLOCK_COLS * BLOCK_BYTES;
#if FMT == FMT_Q8_0
    // A lane's columns of a block are j and j + 16: its scale read and
    // converted once for both (weight()'s products, in the same order).
    if (live)
      for (uint b = c0 / 32u; b < c1 / 32u; ++b) {
        const uint blk = stage_base + b * 34u;
        const float d = f16_value(stage_u16(blk));
        precise float v0 = float(int(stage_byte(blk + 2u + lane) << 24) >> 24) * d;
        precise float v1 = float(int(stage_byte(blk + 18u + lane) << 24) >> 24) * d;
        acc = fma(v0, xw[b * 32u + lane - c0], acc);
        acc = fma(v1, xw[b * 32u + 16u + lane - c0], acc);
      }
#else
    if (live)
      for (uint i = c0 + lane; i < c1; i += 16u) acc = fma(weight(w, first_row + slot, i), xw[i - c0], acc);
#endif
    barrier();  // the next window's stores overwrite what was read
  }
  lanes[slot][lane] = acc;
  barrier();
  for (uint width = 8; width >= 1; width /= 2) {
    if (lane < width) {
      precise float s = lanes[slot][lane] + lanes[slot][lane + width];
      lanes[slot][lane] = s;
    }
    barrier();
  }
  if (live && lane == 0u) {
    precise float v = lanes[slot][0];
    if (w.has_bias != 0) v = v + w.bias.v[h * p.head_rows + o];
    p.y.v[h * p.y_head + o] = v;
  }
}
#endif
