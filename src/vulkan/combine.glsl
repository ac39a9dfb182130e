// A MoE layer's combine at a column i of row r (combine.comp, and
// rms_norm.comp's COMBINE build): Σ over the row's k slots in increasing
// expert id (the host or the device sorted them: slot_rows and weights come
// in that order) of ys row · weight, summed from 0 one product at a time
// (o = o + y · w, two roundings, as the CPU), then + the shared row where
// given.
//
// The row's slots and weights are brought into shared memory once for the
// workgroup (combine_stage), and an invocation's COMBINE_COLUMNS columns
// load eight slots' values each, all together, before summing them: a
// decode step's combine is a chain of waits on device memory otherwise
// (a slot's row, then its value, per slot and per column).
#ifndef COMBINE_COLUMNS
#define COMBINE_COLUMNS 1u
#endif
#define COMBINE_MAX_K 64u  // slots a row (the host checks)
shared uint combine_at[COMBINE_MAX_K];  // where a slot's ys row starts
shared float combine_weight[COMBINE_MAX_K];

// By every invocation of the workgroup, before combine_columns for row r.
void combine_stage(Uints slot_rows, Floats weights, uint r, uint k, uint hidden) {
  for (uint j = gl_LocalInvocationIndex; j < k; j += gl_WorkGroupSize.x * gl_WorkGroupSize.y) {
    combine_at[j] = slot_rows.v[r * k + j] * hidden;
    combine_weight[j] = weights.v[r * k + j];
  }
  barrier();
}

// o[u] = the combine at column i0 + stride · u, for those below `end`.
void combine_columns(Floats ys, Floats shared_rows, bool has_shared, uint r, uint k, uint hidden, uint i0, uint stride,
                     uint end, out float o[COMBINE_COLUMNS]) {
  precise float acc[COMBINE_COLUMNS];
  float extra[COMBINE_COLUMNS];
  [[unroll]] for (uint u = 0; u < COMBINE_COLUMNS; ++u) {
    const uint i = i0 + stride * u;
    acc[u] = 0.0;
    extra[u] = has_shared && i < end ? shared_rows.v[r * hidden + i] : 0.0;
  }
  for (uint j0 = 0; j0 < k; j0 += 8u) {
    float y[COMBINE_COLUMNS][8];
    [[unroll]] for (uint u = 0; u < COMBINE_COLUMNS; ++u)
      [[unroll]] for (uint s = 0; s < 8u; ++s) {
        const uint i = i0 + stride * u;
        y[u][s] = i < end && j0 + s < k ? ys.v[combine_at[j0 + s] + i] : 0.0;
      }
    [[unroll]] for (uint u = 0; u < COMBINE_COLUMNS; ++u)
      [[unroll]] for (uint s = 0; s < 8u; ++s)
        if (j0 + s < k) {
          precise float t = y[u][s] * combine_weight[j0 + s];
          acc[u] = acc[u] + t;
        }
  }
  [[unroll]] for (uint u = 0; u < COMBINE_COLUMNS; ++u) {
    if (has_shared) acc[u] = acc[u] + extra[u];
    o[u] = acc[u];
  }
}
