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

// Rotates x[at .. at + 2·half) in place by the factors rot[c0 .. c0 + half)
// (cos) and rot[c0 + half ..) (sin), as Rope::apply: pairs (x[2i], x[2i+1])
// when interleaved, else (x[i], x[i + half]); the result de-interleaved.
// Called by all 16 lanes of a workgroup.
void rotate16(Floats x, uint at, uint half_, Floats rot, uint c0, bool interleaved) {
  const uint lane = gl_LocalInvocationID.x;
  float a[32], b[32];  // a lane's pairs: half_ <= 512 (Rope::kMaxDim)
  uint k = 0;
  for (uint i = lane; i < half_; i += 16, ++k) {
    a[k] = interleaved ? x.v[at + 2 * i] : x.v[at + i];
    b[k] = interleaved ? x.v[at + 2 * i + 1] : x.v[at + i + half_];
  }
  sync_workgroup();
  k = 0;
  for (uint i = lane; i < half_; i += 16, ++k) {
    const float c = rot.v[c0 + i], s = rot.v[c0 + half_ + i];
    precise float ac = a[k] * c, bs = b[k] * s, bc = b[k] * c, as_ = a[k] * s;
    precise float lo = ac - bs, hi = bc + as_;
    x.v[at + i] = lo;
    x.v[at + i + half_] = hi;
  }
  sync_workgroup();
}
