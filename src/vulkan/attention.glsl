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
// chain is sequential: sixteen positions' loads go out together, and the
// next sixteen's while these sixteen's fma steps run, so it waits on device
// memory about once, not once per sixteen (a row's positions are the same
// for every invocation of a workgroup: the branches are uniform).
float weighted_values(Floats s, uint s0, RowRef r, Floats v, uint width, uint col) {
  precise float o = 0.0;
  const uint full = r.count / 16u * 16u;
  float sj[16], vj[16];
  if (full > 0u)
    [[unroll]] for (uint u = 0; u < 16; ++u) {
      sj[u] = s.v[s0 + u];
      vj[u] = v.v[cache_slot(r, r.first + u) * width + col];
    }
  for (uint j = 0; j < full; j += 16) {
    float sn[16], vn[16];
    if (j + 16u < full)
      [[unroll]] for (uint u = 0; u < 16; ++u) {
        sn[u] = s.v[s0 + j + 16u + u];
        vn[u] = v.v[cache_slot(r, r.first + j + 16u + u) * width + col];
      }
    [[unroll]] for (uint u = 0; u < 16; ++u) o = fma(sj[u], vj[u], o);
    [[unroll]] for (uint u = 0; u < 16; ++u) {
      sj[u] = sn[u];
      vj[u] = vn[u];
    }
  }
  for (uint j = full; j < r.count; ++j) o = fma(s.v[s0 + j], v.v[cache_slot(r, r.first + j) * width + col], o);
  return o;
}

// Rotates x[at .. at + 2·half) in place by the factors rot[c0 .. c0 + half)
// (cos) and rot[c0 + half ..) (sin), as Rope::apply: pairs (x[2i], x[2i+1])
// when interleaved, else (x[i], x[i + half]); the result de-interleaved.
// Called by every invocation of a workgroup (lanes 0-15 work; the pairs go
// through shared memory, as the result overwrites what they were read from).
#ifdef ROTATE16
shared float rotate_pairs[2][512];  // the pairs: half_ <= 512 (Rope::kMaxDim)

void rotate16(Floats x, uint at, uint half_, Floats rot, uint c0, bool interleaved) {
  const uint lane = gl_LocalInvocationID.x;
  if (lane < 16)
    for (uint i = lane; i < half_; i += 16) {
      rotate_pairs[0][i] = interleaved ? x.v[at + 2 * i] : x.v[at + i];
      rotate_pairs[1][i] = interleaved ? x.v[at + 2 * i + 1] : x.v[at + i + half_];
    }
  sync_workgroup();
  if (lane < 16)
    for (uint i = lane; i < half_; i += 16) {
      const float a = rotate_pairs[0][i], b = rotate_pairs[1][i];
      const float c = rot.v[c0 + i], s = rot.v[c0 + half_ + i];
      precise float ac = a * c, bs = b * s, bc = b * c, as_ = a * s;
      precise float lo = ac - bs, hi = bc + as_;
      x.v[at + i] = lo;
      x.v[at + i + half_] = hi;
    }
  sync_workgroup();
}
#endif
