#version 450
// y = x · Wᵀ (+ bias) for a Q8_0 matrix, in linear.comp's order (linear.h's
// 16 lanes: chain j sums fma(W[o][i], x[r][i], ·) over i ≡ j (mod 16) in
// increasing i, W[o][i] = q · d exactly; then the chains fold as the tree
// w = 8, 4, 2, 1), so the bits are linear.comp's. Here one invocation holds
// an output's 16 chains in its registers and takes each 32-value block
// whole: its scale once, its values four to a 32-bit word, instead of
// dequantizing value by value in 16 invocations.
//
// A workgroup is 64 outputs for up to ROWS batch rows. The matrix comes
// CHUNK values at a time: the 64 rows' bytes for the chunk into shared
// memory (each row's words read side by side by 16 invocations), and x's
// rows for the chunk likewise; then each invocation walks its own row there.
// Each (r, o) is computed alone, so a row's result does not depend on the
// others in its batch. Heads as in linear.comp.
#include "common.glsl"
#define NO_WEIGHT_FN
#include "weights.glsl"

#define ROWS 4
#define OUTS 64u
#define CHUNK 256u  // 8 blocks of 34 bytes
// A row's words for a chunk: 272 bytes and the misalignment of its start
// (rows are 34·blocks bytes: an even number), and one more so that a
// block's nine words can always be read; odd, so the 64 rows' words at one
// offset fall in different banks.
#define ROW_WORDS 71u
layout(local_size_x = 64) in;

#ifdef GROUPED
#include "jobs.glsl"
layout(push_constant) uniform Push { Jobs jobs; } p;
#else
layout(push_constant) uniform Push {
  WeightRef w;
  Floats x;
  Floats y;
  uint n;
  uint x_stride, y_stride;
  uint head_rows, x_head, y_head;
} p;
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words { uint v[]; };

shared uint tile[OUTS * ROW_WORDS];
shared float xs[ROWS][CHUNK];

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  const uint h = 0, head_rows = 0, x_head = 0, y_head = 0;
  if (gl_WorkGroupID.x * OUTS >= w.out_rows || gl_WorkGroupID.y * ROWS >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
  const uint h = gl_WorkGroupID.z, head_rows = p.head_rows, x_head = p.x_head, y_head = p.y_head;
#endif
  const uint t = gl_LocalInvocationID.x, o0 = gl_WorkGroupID.x * OUTS, o = o0 + t;
  const uint r0 = gl_WorkGroupID.y * ROWS, x0 = h * x_head, in_w = w.in_cols;
  const bool live = o < w.out_rows;
  const uint mine = t * ROW_WORDS;  // this invocation's row in the tile
  precise float acc[ROWS][16];
  [[unroll]] for (uint r = 0; r < ROWS; ++r)
    [[unroll]] for (uint j = 0; j < 16; ++j) acc[r][j] = 0.0;

  for (uint c0 = 0; c0 < in_w; c0 += CHUNK) {
    const uint c1 = min(c0 + CHUNK, in_w), blocks = (c1 - c0) / 32u;
    for (uint k = t; k < ROWS * CHUNK; k += OUTS) {
      const uint r = k / CHUNK, i = c0 + k % CHUNK;
      if (r0 + r < n && i < c1) xs[r][k % CHUNK] = x.v[x0 + (r0 + r) * x_stride + i];
    }
    // Rows g, g + 4, ... by the 16 invocations of group g, word by word.
    const uint g = t / 16u, lane = t % 16u;
    for (uint rr = g; rr < OUTS; rr += 4u) {
      if (o0 + rr >= w.out_rows) break;
      const uint first = (h * head_rows + o0 + rr) * w.row_bytes + (c0 / 32u) * 34u, base = first & ~3u;
      Words src = Words(address_plus(uvec2(w.data), base));
      for (uint k = lane; k < (first + blocks * 34u - base + 3u) / 4u; k += 16u) tile[rr * ROW_WORDS + k] = src.v[k];
    }
    barrier();
    if (live) {
      const uint mis = ((h * head_rows + o) * w.row_bytes + (c0 / 32u) * 34u) & 3u;
      for (uint b = 0; b < blocks; ++b) {
        const uint at = mis + 34u * b;  // the block's first byte in this row of the tile
        const uint sw = tile[mine + (at >> 2)];
        const float d = f16_value((at & 2u) != 0u ? sw >> 16 : sw & 0xFFFFu);
        const uint q = at + 2u, wq = mine + (q >> 2), shift = 8u * (q & 3u);  // 0 or 16
        uint words[9];
        [[unroll]] for (uint k = 0; k < 9; ++k) words[k] = tile[wq + k];
        [[unroll]] for (uint k = 0; k < 8; ++k) {
          const uint word = shift == 0u ? words[k] : (words[k] >> 16) | (words[k + 1] << 16);
          [[unroll]] for (uint e = 0; e < 4; ++e) {
            const uint i = 4u * k + e;
            precise float wv = float(bitfieldExtract(int(word), int(8u * e), 8)) * d;
            [[unroll]] for (uint r = 0; r < ROWS; ++r)
              if (r0 + r < n) acc[r][i % 16u] = fma(wv, xs[r][32u * b + i], acc[r][i % 16u]);
          }
        }
      }
    }
    barrier();
  }
  if (!live) return;
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    if (r0 + r >= n) break;
    [[unroll]] for (uint width = 8; width >= 1; width /= 2)
      [[unroll]] for (uint j = 0; j < width; ++j) {
        precise float s = acc[r][j] + acc[r][j + width];
        acc[r][j] = s;
      }
    precise float v = acc[r][0];
    if (w.has_bias != 0) v = v + w.bias.v[h * head_rows + o];
    y.v[h * y_head + (r0 + r) * y_stride + o] = v;
  }
}
