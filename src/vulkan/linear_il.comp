#version 450
// y = x · Wᵀ (+ bias) for the CPU kernels' interleaved layouts
// (Packing::Interleaved16, kernels/kernel_abi.h: packs store their Q8_0,
// MXFP4 and Q4_K experts so), in linear.h's order for them: for output
// (r, o), acc = 0 and for each 32-column block b in order: s = the fma chain
// of the block's exact levels with x over its 32 columns; acc = fma(s,
// scale[o][b], acc); Q4_K also acc = fma(-(dmin·m)[o][b], xs, acc), xs the
// block's x summed in order.
//
// A workgroup is one group of 16 interleaved rows (16 outputs) for up to
// ROWS batch rows, 16 × 16 invocations: (x, y) = (row of the group, block of
// the window). It reads the group's blocks a window of WINDOW blocks at a
// time (contiguous bytes in this layout) into shared memory, every
// invocation loading words side by side, and the window's columns of x
// likewise; then invocation (rr, j) computes s
// (and the scale, min and xs) of block j for row rr, and invocation (rr, r)
// for r < ROWS chains the window's blocks in order into output rr of batch
// row r. Each (r, o) is computed alone, so a row's result does not depend
// on the others in its batch.
#include "common.glsl"
#define NO_WEIGHT_FN
#include "weights.glsl"

#define FMT_IL_Q8_0 18
#define FMT_IL_MXFP4 19
#define FMT_IL_Q4_K 20
#define ROWS 4
#define WINDOW 16u
layout(local_size_x = 16, local_size_y = 16) in;

// A window's bytes: Q8_0 544 a block (16 f16 scales, then value i of row
// rr at 32 + 16i + rr); MXFP4 272 (16 E8M0 scales, then the byte of values
// 2k, 2k+1 of row rr at 16 + 16k + rr); Q4_K 2304 a super-block of 8 blocks
// (16 f16 d, 16 f16 dmin, 12 scale bytes of row rr at 64 + 16k + rr, then
// block j's bytes at 256 + 256j + 16k + rr).
#if FMT == FMT_IL_Q8_0
#define WINDOW_BYTES (WINDOW * 544u)
#elif FMT == FMT_IL_MXFP4
#define WINDOW_BYTES (WINDOW * 272u)
#elif FMT == FMT_IL_Q4_K
#define WINDOW_BYTES (WINDOW / 8u * 2304u)
#else
#error "unknown FMT"
#endif

#ifdef GROUPED
#include "jobs.glsl"
#include "activation.glsl"
// act (activation.glsl's modes, 0 for none): x is a down product's gate
// values, activated as they are loaded (the elementwise ops before the
// product, in the product), with the up values `up` floats after them or, for
// up = 0, each after its gate value (a fused gate_up's output: x's value k
// is the pair at 2k).
layout(push_constant) uniform Push {
  Jobs jobs;
  uint act, up;
  float a, b;
} p;
float x_at(Floats x, uint k) {
  if (p.act == 0u) return x.v[k];
  if (p.up == 0u) return activate(p.act, x.v[2u * k], x.v[2u * k + 1u], p.a, p.b);
  return activate(p.act, x.v[k], x.v[k + p.up], p.a, p.b);
}
#else
layout(push_constant) uniform Push {
  WeightRef w;
  Floats x;
  Floats y;
  uint n;
  uint x_stride, y_stride;
  uint head_rows, x_head, y_head;
} p;
float x_at(Floats x, uint k) { return x.v[k]; }
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words { uint v[]; };

shared uint tile[WINDOW_BYTES / 4u];
shared float xw[ROWS][WINDOW * 32u];  // the window's columns of x's rows
shared float sums[ROWS][WINDOW][16], scales[WINDOW][16];
#if FMT == FMT_IL_Q4_K
shared float xsums[ROWS][WINDOW][16], mins[WINDOW][16];
#endif

#define TILE_WORDS (WINDOW_BYTES / 4u)
#define WORDS ((TILE_WORDS + 255u) / 256u)
#define XS (ROWS * WINDOW * 32u / 256u)

// Window b0's words of the group's bytes and its columns of x (0 past the
// matrix or the batch), the share of invocation id: word id + 256t, value
// id + 256t of xw.
void load_window(WeightRef w, Floats x, uint n, uint x_stride, uint group, uint blocks, uint b0, uint r0, uint id,
                 out uint words[WORDS], out float xs[XS]) {
  const uint count = min(WINDOW, blocks - b0);
#if FMT == FMT_IL_Q8_0
  const uint start = group + b0 * 544u, bytes = count * 544u;
#elif FMT == FMT_IL_MXFP4
  const uint start = group + b0 * 272u, bytes = count * 272u;
#else
  const uint start = group + b0 / 8u * 2304u, bytes = (count + 7u) / 8u * 2304u;
#endif
  Words src = Words(address_plus(uvec2(w.data), start));
  [[unroll]] for (uint t = 0; t < WORDS; ++t) {
    const uint k = id + 256u * t;
    words[t] = k < bytes / 4u ? src.v[k] : 0u;
  }
  [[unroll]] for (uint t = 0; t < XS; ++t) {
    const uint k = id + 256u * t, r = k / (WINDOW * 32u), c = k % (WINDOW * 32u);
    xs[t] = r0 + r < n && c < count * 32u ? x_at(x, (r0 + r) * x_stride + 32u * b0 + c) : 0.0;
  }
}

uint tile_byte(uint k) { return (tile[k >> 2] >> (8u * (k & 3u))) & 0xFFu; }
uint tile_u16(uint k) { return tile_byte(k) | (tile_byte(k + 1u) << 8); }

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  if (gl_WorkGroupID.x * 16u >= w.out_rows || gl_WorkGroupID.y * ROWS >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
#endif
  const uint rr = gl_LocalInvocationID.x, j = gl_LocalInvocationID.y, id = j * 16u + rr;
  const uint o = gl_WorkGroupID.x * 16u + rr, r0 = gl_WorkGroupID.y * ROWS;
  const uint blocks = w.in_cols / 32u, group = gl_WorkGroupID.x * 16u * w.row_bytes;
  // Invocations (rr, r < ROWS) chain batch row r0 + r of output o.
  const bool chains = j < ROWS && r0 + j < n;
  precise float acc = 0.0;
  // The next window is loaded into registers while this one is computed
  // (WORDS words of the tile and XS values of x an invocation), so the
  // invocations wait for memory once, at the start, not once a window.
  uint words[WORDS];
  float xs_next[XS];
  load_window(w, x, n, x_stride, group, blocks, 0u, r0, id, words, xs_next);
  for (uint b0 = 0; b0 < blocks; b0 += WINDOW) {
    const uint count = min(WINDOW, blocks - b0);
    [[unroll]] for (uint t = 0; t < WORDS; ++t)
      if (id + 256u * t < TILE_WORDS) tile[id + 256u * t] = words[t];
    [[unroll]] for (uint t = 0; t < XS; ++t) {
      const uint k = id + 256u * t;
      xw[k / (WINDOW * 32u)][k % (WINDOW * 32u)] = xs_next[t];
    }
    barrier();
    if (b0 + WINDOW < blocks) load_window(w, x, n, x_stride, group, blocks, b0 + WINDOW, r0, id, words, xs_next);
    if (j < count) {
      precise float s[ROWS], xs[ROWS];
      for (uint r = 0; r < ROWS; ++r) s[r] = xs[r] = 0.0;
      // The block's 32 levels of row rr, read before the chains consume
      // them (so they do not wait on each read in turn).
      float q[32];
#if FMT == FMT_IL_Q8_0
      const uint blk = j * 544u;
      scales[j][rr] = f16_value(tile_u16(blk + 2u * rr));
      [[unroll]] for (uint i = 0; i < 32; ++i) q[i] = float(int(tile_byte(blk + 32u + 16u * i + rr) << 24) >> 24);
#elif FMT == FMT_IL_MXFP4
      const uint blk = j * 272u;
      scales[j][rr] = e8m0_half(tile_byte(blk + rr));
      [[unroll]] for (uint i = 0; i < 32; ++i) {
        const uint v = tile_byte(blk + 16u + 16u * (i / 2u) + rr);
        q[i] = e2m1x2((i & 1u) != 0u ? v >> 4 : v & 0xFu);
      }
#else
      const uint sb = (j / 8u) * 2304u, jj = j % 8u;
      // The 6-bit scale and min of sub-block jj from the row's 12 scale
      // bytes (byte k of row rr at 64 + 16k + rr), as scale_min_k4.
      uint sc, m;
      if (jj < 4u) {
        sc = tile_byte(sb + 64u + 16u * jj + rr) & 63u;
        m = tile_byte(sb + 64u + 16u * (jj + 4u) + rr) & 63u;
      } else {
        sc = (tile_byte(sb + 64u + 16u * (jj + 4u) + rr) & 0xFu) | ((tile_byte(sb + 64u + 16u * (jj - 4u) + rr) >> 6) << 4);
        m = (tile_byte(sb + 64u + 16u * (jj + 4u) + rr) >> 4) | ((tile_byte(sb + 64u + 16u * jj + rr) >> 6) << 4);
      }
      precise float d1 = f16_value(tile_u16(sb + 2u * rr)) * float(sc);
      precise float m1 = f16_value(tile_u16(sb + 32u + 2u * rr)) * float(m);
      scales[j][rr] = d1;
      mins[j][rr] = m1;
      [[unroll]] for (uint i = 0; i < 32; ++i) {
        const uint v = tile_byte(sb + 256u + 256u * jj + 16u * (i / 2u) + rr);
        q[i] = float((i & 1u) != 0u ? v >> 4 : v & 0xFu);
      }
#endif
      for (uint r = 0; r < ROWS; ++r)
        if (r0 + r < n)
          [[unroll]] for (uint i = 0; i < 32; ++i) {
            const float xv = xw[r][32u * j + i];
            s[r] = fma(q[i], xv, s[r]);
#if FMT == FMT_IL_Q4_K
            xs[r] = xs[r] + xv;
#endif
          }
      for (uint r = 0; r < ROWS; ++r) {
        sums[r][j][rr] = s[r];
#if FMT == FMT_IL_Q4_K
        xsums[r][j][rr] = xs[r];
#endif
      }
    }
    barrier();
    if (chains)
      for (uint k = 0; k < count; ++k) {
        acc = fma(sums[j][k][rr], scales[k][rr], acc);
#if FMT == FMT_IL_Q4_K
        acc = fma(-mins[k][rr], xsums[j][k][rr], acc);
#endif
      }
    // The next window's stores overwrite the tile and xw, read by no one
    // after the barrier above; its sums are written after its own barrier.
  }
  if (chains) {
    precise float v = acc;
    if (w.has_bias != 0) v = v + w.bias.v[o];
    y.v[(r0 + j) * y_stride + o] = v;
  }
}
