// The 16-lane dot of kernels::dot (linear.h's order) over a workgroup of 16
// invocations (the first 16 of a larger one): lane j sums fma(a[i], b[i], ·) for i ≡ j (mod 16) in
// increasing i; the lanes fold by the tree w = 8, 4, 2, 1; every lane gets
// the total.
shared float fold_lanes[16];

float fold16(float partial) {
  const uint lane = gl_LocalInvocationIndex;
  if (lane < 16) fold_lanes[lane] = partial;
  sync_workgroup();
  for (uint w = 8; w >= 1; w /= 2) {
    if (lane < w) {
      precise float s = fold_lanes[lane] + fold_lanes[lane + w];
      fold_lanes[lane] = s;
    }
    barrier();  // the steps pass shared memory only
  }
  const float total = fold_lanes[0];
  barrier();
  return total;
}

// A lane's values are read 8 at a time before its chain consumes them, so
// it waits on device memory once per 8 steps, not once per step.
float dot16(Floats a, uint a0, Floats b, uint b0, uint n) {
  precise float acc = 0.0;
  if (gl_LocalInvocationIndex < 16) {
    uint i = gl_LocalInvocationIndex;
    for (; i + 16u * 7u < n; i += 16u * 8u) {
      float av[8], bv[8];
      [[unroll]] for (uint u = 0; u < 8u; ++u) {
        av[u] = a.v[a0 + i + 16u * u];
        bv[u] = b.v[b0 + i + 16u * u];
      }
      [[unroll]] for (uint u = 0; u < 8u; ++u) acc = fma(av[u], bv[u], acc);
    }
    for (; i < n; i += 16) acc = fma(a.v[a0 + i], b.v[b0 + i], acc);
  }
  return fold16(acc);
}
