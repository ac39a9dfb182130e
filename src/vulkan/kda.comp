#version 450
// Kimi Delta Attention (KdaAttend in backend.h), as backend/cpu_kda.cpp
// computes it: one workgroup per (sequence, head) walks the sequence's rows
// in order against the state in its cache; invocation c owns channel c of
// the head (its conv states, column c of S). Per row: the three causal
// convolutions and SiLU, the decay gate g, beta, the q and k L2 norms
// (16-lane dots), S ← diag(e^g) S, mem = Sᵀk, S += k ⊗ b·(v − mem), o = Sᵀq,
// and the gated RMSNorm of o. Every sum runs in the CPU's order.
#include "common.glsl"

layout(local_size_x = 128) in;

#define MAX_DIM 512

// The op's arrays and constants (staged by the host; too many for push constants).
layout(buffer_reference, std430, buffer_reference_align = 8) buffer KdaParams {
  Floats q, k, v, decay, beta, gate, out_values;
  Floats conv_q, conv_k, conv_v, a, dt_bias, o_norm;
  uint heads, head_dim, kernel;
  float lower_bound, eps, scale;
};

struct KdaRun {
  Floats state;  // the sequence's state for this layer
  uint first, count;  // its rows in the step
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer KdaRuns { KdaRun v[]; };

layout(push_constant) uniform Push {
  KdaParams op;
  KdaRuns runs;
} p;

shared float qv[MAX_DIM], kv[MAX_DIM], vv[MAX_DIM], decay_e[MAX_DIM], o_s[MAX_DIM];
shared float scalars[2];

// The 16-lane dot of a shared vector with itself (kernels::dot's order),
// by each invocation alone (no barriers: the vectors are short).
float self_dot(uint which, uint n) {
  // Indexed by constants only: an index known only at run time puts a
  // private array in device memory on NVIDIA.
  precise float acc[16];
  [[unroll]] for (uint j = 0; j < 16; ++j) acc[j] = 0.0;
  for (uint i0 = 0; i0 < n; i0 += 16)
    [[unroll]] for (uint j = 0; j < 16; ++j)
      if (i0 + j < n) {
        const uint i = i0 + j;
        const float x = which == 0 ? qv[i] : which == 1 ? kv[i] : o_s[i];
        acc[j] = fma(x, x, acc[j]);
      }
  [[unroll]] for (uint w = 8; w >= 1; w /= 2)
    [[unroll]] for (uint j = 0; j < w; ++j) {
      precise float s = acc[j] + acc[j + w];
      acc[j] = s;
    }
  return acc[0];
}

// One causal depthwise convolution step for channel d: y = silu(Σ_j w[d][j] ·
// state[d][j] + w[d][W-1] · x), each product rounded, summed in order; the
// state (the last W-1 inputs, oldest first) then takes x.
float conv_step(Floats w, Floats state, uint state0, uint d, float x) {
  const uint keep = p.op.kernel - 1;
  precise float acc = 0.0;
  for (uint j = 0; j < keep; ++j) {
    precise float t = w.v[d * p.op.kernel + j] * state.v[state0 + d * keep + j];
    acc = acc + t;
  }
  precise float last = w.v[d * p.op.kernel + keep] * x;
  acc = acc + last;
  for (uint j = 0; j + 1 < keep; ++j) state.v[state0 + d * keep + j] = state.v[state0 + d * keep + j + 1];
  if (keep > 0) state.v[state0 + d * keep + keep - 1] = x;
  precise float den = 1.0 + exp(-acc);
  return acc / den;
}

void main() {
  const uint run = gl_WorkGroupID.x, h = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  const uint H = p.op.heads, K = p.op.head_dim, D = H * K, W = p.op.kernel;
  KdaRun rr = p.runs.v[run];
  Floats state = rr.state;
  const uint S0 = h * K * K, conv0 = H * K * K, conv_size = (W - 1) * D;
  const float a = p.op.a.v[h];
  for (uint i = rr.first; i < rr.first + rr.count; ++i) {
    for (uint c = t; c < K; c += 128) {
      const uint d = h * K + c;
      qv[c] = conv_step(p.op.conv_q, state, conv0, d, p.op.q.v[i * D + d]);
      kv[c] = conv_step(p.op.conv_k, state, conv0 + conv_size, d, p.op.k.v[i * D + d]);
      vv[c] = conv_step(p.op.conv_v, state, conv0 + 2 * conv_size, d, p.op.v.v[i * D + d]);
      precise float arg = a * (p.op.decay.v[i * D + d] + p.op.dt_bias.v[d]);
      precise float g = p.op.lower_bound * sigmoid(arg);
      decay_e[c] = exp(g);
    }
    barrier();
    const float b = sigmoid(p.op.beta.v[i * H + h]);
    const float qq = self_dot(0, K), kk = self_dot(1, K);
    barrier();
    precise float qn = 1.0 / sqrt(qq + 1e-6), kn = 1.0 / sqrt(kk + 1e-6);
    for (uint c = t; c < K; c += 128) {
      precise float qs = qv[c] * qn * p.op.scale, ks = kv[c] * kn;
      qv[c] = qs;
      kv[c] = ks;
    }
    barrier();
    for (uint c = t; c < K; c += 128) {
      precise float mem = 0.0;
      for (uint r = 0; r < K; ++r) {
        precise float s = state.v[S0 + r * K + c] * decay_e[r];
        state.v[S0 + r * K + c] = s;
        mem = fma(kv[r], s, mem);
      }
      precise float delta = b * (vv[c] - mem);
      precise float o = 0.0;
      for (uint r = 0; r < K; ++r) {
        precise float s = fma(kv[r], delta, state.v[S0 + r * K + c]);
        state.v[S0 + r * K + c] = s;
        o = fma(qv[r], s, o);
      }
      o_s[c] = o;
    }
    barrier();
    const float oo = self_dot(2, K);
    precise float mean = oo / float(K) + p.op.eps;
    precise float inv = 1.0 / sqrt(mean);
    for (uint c = t; c < K; c += 128) {
      precise float y = o_s[c] * inv * p.op.o_norm.v[c] * sigmoid(p.op.gate.v[i * D + h * K + c]);
      p.op.out_values.v[i * D + h * K + c] = y;
    }
    barrier();
  }
}
