// DeepSeek-V3 family (DeepSeek-V3/R1, Kimi-K2): MLA attention, dense lead
// layers, then sigmoid-routed experts with shared experts.
#include "model/model.h"

namespace strata {

Layer bind_deepseek_v3_layer(WeightBinder& w, const ModelConfig& c, int64_t l, ExpertProvider& experts) {
  const std::string p = "model.layers." + std::to_string(l);
  Layer layer;
  layer.attn_norm = w.vector(p + ".input_layernorm.weight", c.hidden_size);
  layer.mlp_norm = w.vector(p + ".post_attention_layernorm.weight", c.hidden_size);
  layer.attention = make_mla_attention(w, c, p + ".self_attn");
  if (!c.layer_is_moe(l)) {
    layer.dense = SwiGlu::bind(w, p + ".mlp", c.hidden_size, c.intermediate_size);
    return layer;
  }
  std::optional<SwiGlu> shared;
  if (c.n_shared_experts > 0)
    shared = SwiGlu::bind(w, p + ".mlp.shared_experts", c.hidden_size, c.moe_intermediate_size * c.n_shared_experts);
  layer.moe = std::make_unique<MoeBlock>(l, c, make_sigmoid_group_router(w, c, p + ".mlp.gate"), std::move(shared),
                                         experts);
  return layer;
}

}  // namespace strata
