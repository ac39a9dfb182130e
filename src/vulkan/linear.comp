#version 450
// y = x · Wᵀ (+ bias) for one weight format (FMT, see weights.glsl), in
// linear.h's order: for output (r, o) lane j of 16 sums fma(W[o][i],
// x[r][i], ·) over i ≡ j (mod 16) in increasing i, then the lanes fold as
// the tree w = 8, 4, 2, 1. A workgroup is 4 outputs × 16 lanes for up to
// ROWS batch rows; each (r, o) is computed alone, so a row's result does
// not depend on the others in its batch.
//
// The matrix is read a chunk of CHUNK values at a time: each output's bytes
// for the chunk come into shared memory as whole 32-bit words, one word per
// invocation side by side (consecutive addresses across the lanes), and so
// do x's rows for the chunk; weight() dequantizes from there. A lane's chain
// of fma is sequential, so reading device memory inside it would make every
// step wait for a load.
//
// Heads (gl_WorkGroupID.z = h): head h multiplies by rows [h·head_rows,
// h·head_rows + out) of the matrix, reads x from h·x_head and writes y from
// h·y_head (MLA's per-head absorbed products); rows of x and y are x_stride
// and y_stride values apart.
#include "common.glsl"

#define ROWS 4
#define CHUNK 512u
// The most bytes a chunk of a row takes (F32: 4 a value), its first word's
// misalignment and the last word's rounding included.
#define TILE_WORDS (CHUNK + 2u)
layout(local_size_x = 16, local_size_y = 4) in;

shared uint tile[4][TILE_WORDS];
shared float xs[ROWS][CHUNK];  // the chunk of x's rows
shared uint tile_base[4];  // the byte offset in w.data of each output's tile[·][0]

#define ROW_BYTE_FN
uint row_byte(uint k) {
  const uint rel = k - tile_base[gl_LocalInvocationID.y];
  return (tile[gl_LocalInvocationID.y][rel >> 2] >> (8u * (rel & 3u))) & 0xFFu;
}
#include "weights.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words { uint v[]; };

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

shared float lanes[4][ROWS][16];

void main() {
#ifdef GROUPED
  Job job = p.jobs.v[gl_WorkGroupID.z];
  WeightRef w = job.w;
  Floats x = job.x, y = job.y;
  const uint n = job.n, x_stride = w.in_cols, y_stride = w.out_rows;
  const uint h = 0, head_rows = 0, x_head = 0, y_head = 0;
  if (gl_WorkGroupID.x * 4 >= w.out_rows || gl_WorkGroupID.y * ROWS >= n) return;
#else
  WeightRef w = p.w;
  Floats x = p.x, y = p.y;
  const uint n = p.n, x_stride = p.x_stride, y_stride = p.y_stride;
  const uint h = gl_WorkGroupID.z, head_rows = p.head_rows, x_head = p.x_head, y_head = p.y_head;
#endif
  const uint lane = gl_LocalInvocationID.x, slot = gl_LocalInvocationID.y;
  const uint o = gl_WorkGroupID.x * 4 + slot;
  const uint r0 = gl_WorkGroupID.y * ROWS;
  const bool live = o < w.out_rows;
  const uint row = h * head_rows + o;
  const uint x0 = h * x_head, in_w = w.in_cols;
  precise float acc[ROWS];
  for (uint r = 0; r < ROWS; ++r) acc[r] = 0.0;
  const uint row_start = row * w.row_bytes;
  for (uint c0 = 0; c0 < in_w; c0 += CHUNK) {
    const uint c1 = min(c0 + CHUNK, in_w);
    // x's rows for the chunk, side by side: the lanes' chains below then
    // wait on shared memory, never on device memory.
    const uint id = slot * 16u + lane;
    for (uint k = id; k < ROWS * CHUNK; k += 64u) {
      const uint r = k / CHUNK, i = c0 + k % CHUNK;
      if (r0 + r < n && i < c1) xs[r][k % CHUNK] = x.v[x0 + (r0 + r) * x_stride + i];
    }
    if (live) {
      // The chunk's whole blocks; the words that hold them (never past the
      // allocation: buffers are handed out in 256-byte steps).
      const uint first = row_start + (c0 / BLOCK_VALUES) * BLOCK_BYTES;
      const uint last = row_start + ((c1 + BLOCK_VALUES - 1u) / BLOCK_VALUES) * BLOCK_BYTES;
      const uint base = first & ~3u;
      Words src = Words(address_plus(uvec2(w.data), base));
      for (uint k = lane; k < (last - base + 3u) / 4u; k += 16) tile[slot][k] = src.v[k];
      if (lane == 0) tile_base[slot] = base;
    }
    barrier();
    if (live)
      for (uint i = c0 + lane; i < c1; i += 16) {
        const float wt = weight(w, row, i);
        for (uint r = 0; r < ROWS; ++r)
          if (r0 + r < n) acc[r] = fma(wt, xs[r][i - c0], acc[r]);
      }
    barrier();
  }
  for (uint r = 0; r < ROWS; ++r) lanes[slot][r][lane] = acc[r];
  barrier();
  for (uint width = 8; width >= 1; width /= 2) {
    if (lane < width)
      for (uint r = 0; r < ROWS; ++r) {
        precise float s = lanes[slot][r][lane] + lanes[slot][r][lane + width];
        lanes[slot][r][lane] = s;
      }
    barrier();
  }
  if (live && lane < ROWS && r0 + lane < n) {
    precise float v = lanes[slot][lane][0];
    if (w.has_bias != 0) v = v + w.bias.v[row];
    y.v[h * y_head + (r0 + lane) * y_stride + o] = v;
  }
}
