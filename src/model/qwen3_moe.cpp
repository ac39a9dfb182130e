// Qwen3-MoE: grouped-query attention with per-head q/k norms, softmax-routed
// experts without shared experts; some layers may be dense.
#include "model/model.h"

namespace strata {

Layer bind_qwen3_moe_layer(WeightBinder& w, const ModelConfig& c, int64_t l, ExpertProvider& experts) {
  const std::string p = "model.layers." + std::to_string(l);
  Layer layer;
  layer.attn_norm = w.vector(p + ".input_layernorm.weight", c.hidden_size);
  layer.mlp_norm = w.vector(p + ".post_attention_layernorm.weight", c.hidden_size);
  layer.attention = make_gqa_attention(w, c, p + ".self_attn", l);
  if (!c.layer_is_moe(l)) {
    layer.dense = SwiGlu::bind(w, p + ".mlp", c.hidden_size, c.intermediate_size);
    return layer;
  }
  layer.moe = std::make_unique<MoeBlock>(l, c, make_softmax_router(w, c, p + ".mlp.gate"), std::nullopt, experts);
  return layer;
}

}  // namespace strata
