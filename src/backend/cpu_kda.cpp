// The CPU backend's Kimi Delta Attention (KdaAttend in backend.h): one task
// per (sequence, head), each walking its sequence's rows in position order
// against the state in the sequence's cache. Prefill and decode run the same
// per-token recurrence, so a token's bits do not depend on its step.
#include <cmath>
#include <string>

#include "backend/cpu_backend.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace strata {

namespace {

constexpr int64_t kMaxHeadDim = 512;  // the per-token vectors live on the stack

HostKvCache& state_cache(KvCache* cache) {
  auto* c = dynamic_cast<HostKvCache*>(cache);
  if (!c) throw Error("internal: a row whose cache the CPU backend did not make");
  return *c;
}

// One causal depthwise convolution step for channels [d0, d0 + n): y =
// silu(Σ_j w[d][j] · state[d][j] + w[d][W-1] · x[d]); the state (the last
// W-1 inputs per channel, oldest first) then takes x.
void conv_step(const float* w, int64_t kernel, float* state, const float* x, int64_t d0, int64_t n, float* y) {
  const int64_t keep = kernel - 1;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t d = d0 + c;
    const float* wd = w + d * kernel;
    float* sd = state + d * keep;
    float acc = 0.0f;
    for (int64_t j = 0; j < keep; ++j) acc += wd[j] * sd[j];
    acc += wd[keep] * x[d];
    for (int64_t j = 0; j + 1 < keep; ++j) sd[j] = sd[j + 1];
    if (keep > 0) sd[keep - 1] = x[d];
    y[c] = acc / (1.0f + std::exp(-acc));
  }
}

}  // namespace

void CpuBackend::kda_attention(const KdaAttend& op) {
  const std::span<const Row> rows = op.rows;
  const size_t n = rows.size();
  check_positions(rows);
  const int64_t H = op.heads, K = op.head_dim, D = H * K;
  if (K > kMaxHeadDim || op.conv_kernel < 1) throw Error("internal: a KDA head wider than supported");
  const float* q = host(op.q.slice(0, n * D));
  const float* k = host(op.k.slice(0, n * D));
  const float* v = host(op.v.slice(0, n * D));
  const float* decay = host(op.decay.slice(0, n * D));
  const float* beta = host(op.beta.slice(0, n * H));
  const float* gate = host(op.gate.slice(0, n * D));
  float* out = host(op.out.slice(0, n * D));

  // Each sequence's rows: one consecutive span, at the positions that follow
  // what its state holds.
  runs_.clear();
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && rows[j].cache == rows[i].cache) ++j;
    for (const auto& [b0, b1] : runs_)
      if (rows[b0].cache == rows[i].cache) throw Error("internal: a sequence's KDA rows are not consecutive in the step");
    for (size_t r = i; r < j; ++r)
      if (rows[r].pos != rows[i].pos + static_cast<int64_t>(r - i))
        throw Error("internal: a sequence's KDA rows are not in position order in the step");
    runs_.emplace_back(i, j);
    i = j;
  }
  // Every run checked first, so a refused step moves no state.
  for (const auto& [b0, b1] : runs_) state_cache(rows[b0].cache).check_state_rows(op.layer, rows[b0].pos);
  for (const auto& [b0, b1] : runs_)
    state_cache(rows[b0].cache).take_state_rows(op.layer, rows[b0].pos, static_cast<int64_t>(b1 - b0));
  for (const auto& [b0, b1] : runs_) (void)state_cache(rows[b0].cache).state(op.layer);

  struct Ctx {
    CpuBackend* self;
    const KdaAttend* op;
    const float *q, *k, *v, *decay, *beta, *gate;
    float* out;
  } ctx{this, &op, q, k, v, decay, beta, gate, out};
  pool_.parallel_for_indexed(runs_.size() * static_cast<size_t>(H), [c = &ctx](int, size_t t0, size_t t1) {
    const KdaAttend& op = *c->op;
    const int64_t H = op.heads, K = op.head_dim, D = H * K, W = op.conv_kernel;
    const float scale = 1.0f / std::sqrt(static_cast<float>(K));
    float qv[kMaxHeadDim], kv[kMaxHeadDim], vv[kMaxHeadDim], g[kMaxHeadDim], mem[kMaxHeadDim], o[kMaxHeadDim];
    for (size_t t = t0; t < t1; ++t) {
      const auto [b0, b1] = c->self->runs_[t / static_cast<size_t>(H)];
      const int64_t h = static_cast<int64_t>(t % static_cast<size_t>(H));
      float* state = state_cache(op.rows[b0].cache).state(op.layer);
      float* S = state + h * K * K;  // [K][V], row k scaled by its decay
      float* conv = state + H * K * K;
      const int64_t conv_size = (W - 1) * D;
      const float a = std::exp(op.a_log[h]);
      for (size_t i = b0; i < b1; ++i) {
        conv_step(op.conv[0], W, conv, c->q + i * D, h * K, K, qv);
        conv_step(op.conv[1], W, conv + conv_size, c->k + i * D, h * K, K, kv);
        conv_step(op.conv[2], W, conv + 2 * conv_size, c->v + i * D, h * K, K, vv);
        for (int64_t j = 0; j < K; ++j)
          g[j] = op.lower_bound * kernels::sigmoid(a * (c->decay[i * D + h * K + j] + op.dt_bias[h * K + j]));
        const float b = kernels::sigmoid(c->beta[i * H + h]);
        const float qn = 1.0f / std::sqrt(kernels::dot(qv, qv, K) + 1e-6f);
        const float kn = 1.0f / std::sqrt(kernels::dot(kv, kv, K) + 1e-6f);
        for (int64_t j = 0; j < K; ++j) {
          qv[j] = qv[j] * qn * scale;
          kv[j] = kv[j] * kn;
        }
        // S <- diag(e^g) S; mem = Sᵀk; S <- S + k ⊗ b(v - mem); o = Sᵀq.
        for (int64_t r = 0; r < K; ++r) {
          const float e = std::exp(g[r]);
          for (int64_t col = 0; col < K; ++col) S[r * K + col] *= e;
        }
        std::fill_n(mem, K, 0.0f);
        for (int64_t r = 0; r < K; ++r) kernels::axpy(kv[r], S + r * K, mem, K);
        for (int64_t col = 0; col < K; ++col) mem[col] = b * (vv[col] - mem[col]);
        for (int64_t r = 0; r < K; ++r) kernels::axpy(kv[r], mem, S + r * K, K);
        std::fill_n(o, K, 0.0f);
        for (int64_t r = 0; r < K; ++r) kernels::axpy(qv[r], S + r * K, o, K);
        // The gated per-head norm.
        const float inv = 1.0f / std::sqrt(kernels::dot(o, o, K) / static_cast<float>(K) + op.eps);
        float* dst = c->out + i * D + h * K;
        const float* gt = c->gate + i * D + h * K;
        for (int64_t j = 0; j < K; ++j) dst[j] = o[j] * inv * op.o_norm[j] * kernels::sigmoid(gt[j]);
      }
    }
  });
}

}  // namespace strata
