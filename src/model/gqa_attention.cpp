#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/ops.h"
#include "model/attention.h"
#include "model/config_reader.h"
#include "backend/rope.h"
#include "model/tensor_names.h"
#include "model/weights.h"

namespace strata {

namespace {


class GqaAttention : public Attention {
 public:
  GqaAttention(WeightBinder& w, const ModelConfig& c, int64_t layer, GqaParts parts)
      : c_(c),
        rope_(c.rope, c.head_dim, false),
        scale_(static_cast<float>(c.attention_scale())),
        window_(c.layer_window(layer)) {
    const int64_t H = c.num_heads, KV = c.num_kv_heads, d = c.head_dim;
    using enum TensorKind;
    q_ = w.resident(w.linear(hf_name(AttnQ, layer), H * d, c.hidden_size, c.attention_bias));
    k_ = w.resident(w.linear(hf_name(AttnK, layer), KV * d, c.hidden_size, c.attention_bias));
    v_ = w.resident(w.linear(hf_name(AttnV, layer), KV * d, c.hidden_size, c.attention_bias));
    o_ = w.resident(w.linear(hf_name(AttnOut, layer), c.hidden_size, H * d, c.attention_bias));
    if (parts.qk_norm) {
      q_norm_ = w.vector(tn(Naming::Hf, AttnQNorm, "weight", layer), d);
      k_norm_ = w.vector(tn(Naming::Hf, AttnKNorm, "weight", layer), d);
    }
    if (c.attention_sinks) sinks_ = w.vector(hf_name(AttnSinks, layer), H);
  }

  void forward(int64_t layer, Tensor x, std::span<const Row> rows, Tensor out, Backend& b,
               StepState& step) const override {
    const size_t n = rows.size();
    const int64_t H = c_.num_heads, KV = c_.num_kv_heads, d = c_.head_dim;
    GqaAttend op;
    op.layer = layer;
    op.rows = rows;
    // q, k and v of the n rows one after another: one stacked product.
    op.q = step.qkv.rows(0, n, H * d);
    op.k = step.qkv.slice(n * H * d, n * KV * d);
    op.v = step.qkv.slice(n * (H + KV) * d, n * KV * d);
    op.out = step.heads.rows(0, n, H * d);
    {
      IndependentOps together(b);
      const kernels::WeightMatrix* qkv[] = {&q_, &k_, &v_};
      b.linear_stacked(qkv, x, n, step.qkv.slice(0, n * (H + 2 * KV) * d));
    }
    op.heads = H;
    op.kv_heads = KV;
    op.head_dim = d;
    op.rope = &rope_;
    op.q_norm = q_norm_;
    op.k_norm = k_norm_;
    op.eps = static_cast<float>(c_.rms_norm_eps);
    op.sinks = sinks_;
    op.window = window_.value_or(0);
    op.scale = scale_;
    b.gqa_attention(op);
    b.linear(o_, op.out, n, out);
  }

 private:
  const ModelConfig& c_;
  Rope rope_;
  float scale_;
  kernels::WeightMatrix q_, k_, v_, o_;
  std::optional<int64_t> window_;
  const float* q_norm_ = nullptr;  // per-head q/k RMSNorm (Qwen3)
  const float* k_norm_ = nullptr;
  const float* sinks_ = nullptr;   // per-head sink logits (gpt-oss)
};

}  // namespace

std::unique_ptr<Attention> make_gqa_attention(WeightBinder& w, const ModelConfig& c, int64_t layer, GqaParts parts) {
  return std::make_unique<GqaAttention>(w, c, layer, parts);
}

void validate_gqa_config(const ConfigReader& r, const ModelConfig& c) {
  require_positive(c.head_dim, r, "head_dim");
  require(c.sliding_layers.empty() || static_cast<int64_t>(c.sliding_layers.size()) == c.num_layers, r,
          "layer_types must list one entry per layer");
  require(!c.sliding_window || *c.sliding_window > 0, r, "sliding_window must be positive");
  require(c.head_dim % 2 == 0, r, "head_dim must be even");
  require_positive(c.decoder_sparse_step, r, "decoder_sparse_step");
}

AttentionWidths gqa_attention_widths(const ModelConfig& c) {
  const size_t H = static_cast<size_t>(c.num_heads), KV = static_cast<size_t>(c.num_kv_heads),
               d = static_cast<size_t>(c.head_dim);
  return {.q = H * d, .k = KV * d, .v = KV * d, .out = H * d};
}

CacheWidths gqa_cache_widths(const ModelConfig& c) {
  return {c.num_kv_heads * c.head_dim, c.num_kv_heads * c.head_dim};
}

double gqa_attention_scale(const ModelConfig& c) { return 1.0 / std::sqrt(static_cast<double>(c.head_dim)); }

}  // namespace strata
