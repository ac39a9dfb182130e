// Kimi Delta Attention (Kimi K3's linear-attention layers): its projections
// here, the recurrence in the backend (KdaAttend, backend/backend.h), its
// state in the sequence's cache.
#include <cmath>

#include "model/attention.h"
#include "model/tensor_names.h"
#include "model/weights.h"

namespace strata {

namespace {

class KdaAttention : public Attention {
 public:
  KdaAttention(WeightBinder& w, const ModelConfig& c, int64_t l) : c_(c) {
    using enum TensorKind;
    const int64_t H = c.kda_heads, K = c.kda_head_dim, D = H * K, W = c.kda_conv_kernel;
    q_ = w.resident(w.linear(hf_name(AttnQ, l), D, c.hidden_size));
    k_ = w.resident(w.linear(hf_name(AttnK, l), D, c.hidden_size));
    v_ = w.resident(w.linear(hf_name(AttnV, l), D, c.hidden_size));
    f_a_ = w.resident(w.linear(hf_name(KdaFA, l), K, c.hidden_size));
    f_b_ = w.resident(w.linear(hf_name(KdaFB, l), D, K));
    beta_ = w.resident(w.linear(hf_name(KdaBeta, l), H, c.hidden_size));
    gate_ = w.resident(w.linear(hf_name(AttnGate, l), D, c.hidden_size));
    o_ = w.resident(w.linear(hf_name(AttnOut, l), c.hidden_size, D));
    // [channels, 1, kernel] as the modeling code's nn.Conv1d stores them (or [channels, kernel]).
    op_.conv[0] = w.values(tn(Naming::Hf, KdaQConv, "weight", l), D * W);
    op_.conv[1] = w.values(tn(Naming::Hf, KdaKConv, "weight", l), D * W);
    op_.conv[2] = w.values(tn(Naming::Hf, KdaVConv, "weight", l), D * W);
    op_.a_log = w.leading(hf_name(KdaALog, l), H);  // [heads], or padded: the first `heads` count
    op_.dt_bias = w.values(hf_name(KdaDtBias, l), D);
    op_.o_norm = w.vector(tn(Naming::Hf, KdaONorm, "weight", l), K);
    op_.heads = H;
    op_.head_dim = K;
    op_.conv_kernel = W;
    op_.lower_bound = static_cast<float>(c.kda_gate_lower_bound);
    op_.eps = static_cast<float>(c.rms_norm_eps);
  }

  void forward(int64_t layer, Tensor x, std::span<const Row> rows, Tensor out, Backend& b,
               StepState& step) const override {
    const size_t n = rows.size();
    const int64_t H = c_.kda_heads, K = c_.kda_head_dim, D = H * K;
    KdaAttend op = op_;
    op.layer = layer;
    op.rows = rows;
    // q, k and v of the n rows one after another: one stacked product.
    op.q = step.qkv.rows(0, n, D);
    op.k = step.qkv.rows(n, n, D);
    op.v = step.qkv.rows(2 * n, n, D);
    op.decay = step.kv.rows(0, n, D);
    op.beta = step.beta.rows(0, n, H);
    op.gate = step.gate_in.rows(0, n, D);
    op.out = step.heads.rows(0, n, D);
    const Tensor low_rank = step.q_latent.rows(0, n, K);
    {
      IndependentOps together(b);
      const kernels::WeightMatrix* qkv[] = {&q_, &k_, &v_};
      b.linear_stacked(qkv, x, n, step.qkv.rows(0, 3 * n, D));
      b.linear(f_a_, x, n, low_rank);
      b.linear(beta_, x, n, op.beta);
      b.linear(gate_, x, n, op.gate);
    }
    b.linear(f_b_, low_rank, n, op.decay);
    b.kda_attention(op);
    b.linear(o_, op.out, n, out);
  }

 private:
  const ModelConfig& c_;
  kernels::WeightMatrix q_, k_, v_, f_a_, f_b_, beta_, gate_, o_;
  KdaAttend op_;  // the layer's constants; each step fills in its rows and tensors
};

}  // namespace

std::unique_ptr<Attention> make_kda_attention(WeightBinder& w, const ModelConfig& c, int64_t layer) {
  return std::make_unique<KdaAttention>(w, c, layer);
}

AttentionWidths kda_attention_widths(const ModelConfig& c) {
  const size_t H = static_cast<size_t>(c.kda_heads), K = static_cast<size_t>(c.kda_head_dim), D = H * K;
  return {.q = D, .k = D, .v = D, .out = D, .q_latent = K, .kv = D, .gate = D, .beta = H};
}

}  // namespace strata
