// Softmax over the scores of one (row, head) held in global scratch, by a
// workgroup of 64: s[0 .. count) (and an optional extra logit, a sink, with
// no value). The maximum is exact in any order; each invocation sums the
// exponentials of its positions (j ≡ tid mod 64) in increasing j and the 64
// partial sums fold by a fixed tree, the sink's added last: the same order
// whatever else the step holds. On return s[j] = e^(s[j]-m) / sum. (The
// folds' steps pass shared memory only: barrier(), not a device-memory
// barrier, between them.) In a workgroup wider than 64 the invocations past
// the first 64 take no part but the barriers (attend_row.comp).
shared float reduce64[64];

float max64(float v) {
  const uint t = gl_LocalInvocationID.x;
  if (t < 64u) reduce64[t] = v;
  sync_workgroup();
  for (uint w = 32; w >= 1; w /= 2) {
    if (t < w) reduce64[t] = max(reduce64[t], reduce64[t + w]);
    barrier();
  }
  const float m = reduce64[0];
  barrier();
  return m;
}

float sum64(float v) {
  const uint t = gl_LocalInvocationID.x;
  if (t < 64u) reduce64[t] = v;
  sync_workgroup();
  for (uint w = 32; w >= 1; w /= 2) {
    if (t < w) {
      precise float s = reduce64[t] + reduce64[t + w];
      reduce64[t] = s;
    }
    barrier();
  }
  const float s = reduce64[0];
  barrier();
  return s;
}

// softmax64's arithmetic over scores read by GET(j) and written by SET(j, v)
// (one body for the scores in a buffer and for scores staged in shared
// memory: the same bits).
#define SOFTMAX64_OVER(GET, SET)                                         \
  {                                                                      \
    const uint t = gl_LocalInvocationID.x;                               \
    float m = -3.402823466e38;                                           \
    const uint lane_end = t < 64u ? count : 0u; /* past 64: nothing */   \
    for (uint j = t; j < lane_end; j += 64) m = max(m, GET(j));          \
    m = max64(m);                                                        \
    if (has_sink) m = max(m, sink);                                      \
    precise float part = 0.0;                                            \
    for (uint j = t; j < lane_end; j += 64) {                            \
      precise float e = exp(GET(j) - m);                                 \
      SET(j, e);                                                         \
      part = part + e;                                                   \
    }                                                                    \
    precise float sum = sum64(part);                                     \
    if (has_sink) {                                                      \
      precise float e = exp(sink - m);                                   \
      sum = sum + e;                                                     \
    }                                                                    \
    precise float inv = 1.0 / sum;                                       \
    for (uint j = t; j < lane_end; j += 64) {                            \
      precise float v = GET(j) * inv;                                    \
      SET(j, v);                                                         \
    }                                                                    \
  }

#define SOFTMAX64_GET_BUFFER(j) s.v[at + (j)]
#define SOFTMAX64_SET_BUFFER(j, x) s.v[at + (j)] = (x)
void softmax64(Floats s, uint at, uint count, bool has_sink, float sink) {
  SOFTMAX64_OVER(SOFTMAX64_GET_BUFFER, SOFTMAX64_SET_BUFFER)
  sync_workgroup();
}

#ifdef SOFTMAX64_STAGED
// The same over staged_scores[0 .. count), count <= SOFTMAX64_STAGED, which
// the workgroup filled (and a barrier() followed): a row's scores read from
// device memory once, not once in each of the three passes.
shared float staged_scores[SOFTMAX64_STAGED];
#define SOFTMAX64_GET_STAGED(j) staged_scores[j]
#define SOFTMAX64_SET_STAGED(j, x) staged_scores[j] = (x)
void softmax64_staged(uint count, bool has_sink, float sink) {
  SOFTMAX64_OVER(SOFTMAX64_GET_STAGED, SOFTMAX64_SET_STAGED)
  barrier();
}
#endif
