#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "model/attention.h"
#include "backend/rope.h"
#include "model/tensor_names.h"
#include "model/weights.h"

namespace strata {

namespace {


class MlaAttention : public Attention {
 public:
  MlaAttention(WeightBinder& w, const ModelConfig& c, int64_t l)
      : c_(c), rope_(c.rope, c.qk_rope_head_dim, c.rope_interleave), scale_(static_cast<float>(c.attention_scale())) {
    using enum TensorKind;
    const int64_t H = c.num_heads, qk = c.qk_head_dim();
    if (c.q_lora_rank) {
      q_a_ = w.resident(w.linear(hf_name(AttnQA, l), *c.q_lora_rank, c.hidden_size, c.attention_bias));
      q_a_norm_ = w.vector(tn(Naming::Hf, AttnQANorm, "weight", l), *c.q_lora_rank);
      q_b_ = w.resident(w.linear(hf_name(AttnQB, l), H * qk, *c.q_lora_rank));
    } else {
      q_ = w.resident(w.linear(hf_name(AttnQ, l), H * qk, c.hidden_size));
    }
    kv_a_ = w.resident(w.linear(hf_name(AttnKvAMqa, l), c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size, c.attention_bias));
    kv_a_norm_ = w.vector(tn(Naming::Hf, AttnKvANorm, "weight", l), c.kv_lora_rank);
    if (w.has(tn(Naming::Hf, AttnKvB, "weight", l))) {
      kv_b_ = w.linear(hf_name(AttnKvB, l), H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    } else {
      // llama.cpp's converter stores kv_b_proj already split per head for
      // absorbed attention: k_b[h] = W_UK[h]ᵀ [lora × nope], v_b[h] = W_UV[h]
      // [v × lora]. Then both absorptions are ordinary products.
      for (int64_t h = 0; h < H; ++h) {
        k_b_.push_back(w.stacked(tn(Naming::Hf, AttnKB, "weight", l), h, c.kv_lora_rank, c.qk_nope_head_dim));
        v_b_.push_back(w.stacked(tn(Naming::Hf, AttnVB, "weight", l), h, c.v_head_dim, c.kv_lora_rank));
      }
    }
    o_ = w.resident(w.linear(hf_name(AttnOut, l), c.hidden_size, H * c.v_head_dim, c.attention_bias));
    // Kimi K3: heads times sigmoid(g_proj x) before o_proj.
    if (c.mla_output_gate) gate_ = w.resident(w.linear(hf_name(AttnGate, l), H * c.v_head_dim, c.hidden_size));
  }

  void forward(int64_t layer, Tensor x, std::span<const Row> rows, Tensor out, Backend& b,
               StepState& step) const override {
    const size_t n = rows.size();
    const int64_t H = c_.num_heads, qk = c_.qk_head_dim(), lora = c_.kv_lora_rank, rope = c_.qk_rope_head_dim;
    // q_a/kv_a norms: Kimi K3 builds them with its norm class's own eps.
    const float eps = static_cast<float>(c_.mla_norm_eps > 0 ? c_.mla_norm_eps : c_.rms_norm_eps);
    MlaAttend op;
    op.layer = layer;
    op.rows = rows;
    op.q = step.q.rows(0, n, H * qk);
    if (c_.q_lora_rank) {
      const int64_t r = *c_.q_lora_rank;
      const Tensor qa = step.q_latent.rows(0, n, r);
      b.linear(q_a_, x, n, qa);
      b.rms_norm(qa, q_a_norm_, n, r, eps, qa);
      b.linear(q_b_, qa, n, op.q);
    } else {
      b.linear(q_, x, n, op.q);
    }
    op.kv = step.kv.rows(0, n, lora + rope);
    b.linear(kv_a_, x, n, op.kv);
    op.out = step.heads.rows(0, n, H * c_.v_head_dim);
    op.heads = H;
    op.nope = c_.qk_nope_head_dim;
    op.rope_dim = rope;
    op.latent = lora;
    op.v_dim = c_.v_head_dim;
    op.rope = c_.mla_nope ? nullptr : &rope_;
    op.kv_norm = kv_a_norm_;
    op.eps = eps;
    op.scale = scale_;
    if (k_b_.empty()) op.kv_b = &kv_b_;
    op.k_b = k_b_;
    op.v_b = v_b_;
    b.mla_attention(op);
    if (gate_.valid()) {
      const Tensor g = step.gate_in.rows(0, n, H * c_.v_head_dim);
      b.linear(gate_, x, n, g);
      b.sigmoid_mul(op.out, g);
    }
    b.linear(o_, op.out, n, out);
  }

 private:
  const ModelConfig& c_;
  Rope rope_;
  float scale_;
  kernels::WeightMatrix q_, q_a_, q_b_, kv_a_, kv_b_, o_, gate_;
  std::vector<kernels::WeightMatrix> k_b_, v_b_;  // per head, when stored split (GGUF)
  const float* q_a_norm_ = nullptr;
  const float* kv_a_norm_ = nullptr;
};

}  // namespace

AttentionWidths mla_attention_widths(const ModelConfig& c) {
  const size_t H = static_cast<size_t>(c.num_heads);
  return {.q = H * static_cast<size_t>(c.qk_head_dim()),
          .out = H * static_cast<size_t>(c.v_head_dim),
          .q_latent = static_cast<size_t>(c.q_lora_rank.value_or(0)),
          .kv = static_cast<size_t>(c.kv_lora_rank + c.qk_rope_head_dim),
          .gate = c.mla_output_gate ? H * static_cast<size_t>(c.v_head_dim) : 0};
}

CacheWidths mla_cache_widths(const ModelConfig& c) { return {c.kv_lora_rank + c.qk_rope_head_dim, 0}; }

double mla_attention_scale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  // DeepSeek's YaRN also sharpens the softmax: scale · mscale², with
  // mscale = 0.1 · mscale_all_dim · ln(factor) + 1.
  if (c.rope.type != "default" && c.rope.mscale_all_dim != 0.0 && c.rope.factor > 1.0) {
    double m = 0.1 * c.rope.mscale_all_dim * std::log(c.rope.factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

std::unique_ptr<Attention> make_mla_attention(WeightBinder& w, const ModelConfig& c, int64_t layer) {
  return std::make_unique<MlaAttention>(w, c, layer);
}

}  // namespace strata
