// A MoE layer's combine at column i of row r (combine.comp, and
// rms_norm.comp's COMBINE build): Σ over the row's k slots in increasing
// expert id (the host or the device sorted them: slot_rows and weights come
// in that order) of ys row · weight, summed from 0 one product at a time
// (o = o + y · w, two roundings, as the CPU), then + the shared row where
// given.
float combine_column(Floats ys, Uints slot_rows, Floats weights, Floats shared_rows, bool has_shared, uint r, uint k,
                     uint hidden, uint i) {
  precise float o = 0.0;
  for (uint j = 0; j < k; ++j) {
    precise float t = ys.v[slot_rows.v[r * k + j] * hidden + i] * weights.v[r * k + j];
    o = o + t;
  }
  if (has_shared) o = o + shared_rows.v[r * hidden + i];
  return o;
}
