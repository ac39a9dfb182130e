// DeepSeek-V3 family (DeepSeek-V3/R1, Kimi-K2): MLA attention, dense lead
// layers, then sigmoid-routed experts with shared experts. Its whole
// description: config (config.json and GGUF "deepseek2"), tensors, binding.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "formats/gguf_writer.h"
#include "formats/safetensors.h"  // quote_name
#include "model/arch.h"
#include "model/config_reader.h"
#include "model/gguf_config.h"
#include "model/model.h"

namespace strata {

namespace {

using enum TensorKind;
using nlohmann::json;

void read_hf(const ConfigReader& r, ModelConfig& c) {
  c.n_routed_experts = r.integer("n_routed_experts");
  c.n_shared_experts = r.integer("n_shared_experts", 0);
  c.n_group = r.integer("n_group", 1);
  c.topk_group = r.integer("topk_group", 1);
  c.first_k_dense_replace = r.integer("first_k_dense_replace", 0);
  c.moe_layer_freq = r.integer("moe_layer_freq", 1);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0);
  c.scoring_func = r.string("scoring_func", "sigmoid");
  c.topk_method = r.string("topk_method", "noaux_tc");
  c.q_lora_rank = r.optional_integer("q_lora_rank");
  c.kv_lora_rank = r.integer("kv_lora_rank");
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim");
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim");
  c.v_head_dim = r.integer("v_head_dim");
  c.rope_interleave = r.boolean("rope_interleave", true);
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0);
  c.head_dim = c.qk_rope_head_dim;  // the rotary width, as transformers sets it
}

void validate_hf(const ConfigReader& r, const ModelConfig& c) {
  auto positive = [&](int64_t v, const char* name) { require_positive(v, r, name); };
  positive(c.kv_lora_rank, "kv_lora_rank");
  positive(c.qk_rope_head_dim, "qk_rope_head_dim");
  positive(c.v_head_dim, "v_head_dim");
  require(c.qk_nope_head_dim >= 0, r, "qk_nope_head_dim must not be negative");
  require(c.qk_rope_head_dim % 2 == 0, r, "qk_rope_head_dim must be even");
  require(!c.q_lora_rank || *c.q_lora_rank > 0, r, "q_lora_rank must be positive or null");
  require(c.num_kv_heads == c.num_heads, r, "MLA needs num_key_value_heads == num_attention_heads");
  positive(c.n_group, "n_group");
  require(c.n_routed_experts % c.n_group == 0, r, "n_routed_experts must be a multiple of n_group");
  require(c.topk_group >= 1 && c.topk_group <= c.n_group, r, "topk_group must be between 1 and n_group");
  require(c.n_routed_experts / c.n_group >= 2 || c.n_group == 1, r,
          "each expert group needs at least 2 experts (groups are scored by their top-2)");
  require(c.num_experts_per_tok <= c.topk_group * (c.n_routed_experts / c.n_group), r,
          "num_experts_per_tok exceeds the experts in the selected groups");
  require(c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= c.num_layers, r,
          "first_k_dense_replace must be between 0 and num_hidden_layers");
  positive(c.moe_layer_freq, "moe_layer_freq");
  require(c.scoring_func == "sigmoid", r, "scoring_func '" + c.scoring_func + "' is not supported (sigmoid)");
  require(c.topk_method == "noaux_tc" || c.topk_method == "greedy" || c.topk_method == "group_limited_greedy", r,
          "topk_method '" + c.topk_method + "' is not supported");
  if (c.first_k_dense_replace > 0) positive(c.intermediate_size, "intermediate_size");
  require(c.num_nextn_predict_layers >= 0 && c.num_nextn_predict_layers <= 16, r,
          "num_nextn_predict_layers must be between 0 and 16");
}

void write_hf(const ModelConfig& c, json& j) {
  j["architectures"] = {"DeepseekV3ForCausalLM"};
  j["model_type"] = "deepseek_v3";
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["topk_method"] = c.topk_method;
  j["scoring_func"] = c.scoring_func;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["moe_layer_freq"] = c.moe_layer_freq;
  j["q_lora_rank"] = c.q_lora_rank ? json(*c.q_lora_rank) : json(nullptr);
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["rope_interleave"] = c.rope_interleave;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["ep_size"] = 1;
  j["pretraining_tp"] = 1;
  j["aux_loss_alpha"] = 0.001;
  j["seq_aux"] = true;
  if (j["rope_scaling"].is_object()) {
    j["rope_scaling"]["mscale"] = c.rope.mscale;
    j["rope_scaling"]["mscale_all_dim"] = c.rope.mscale_all_dim;
  }
}

void write_gguf(const ModelConfig& c, bool legacy, GgufWriter& w) {
  auto k = [](const char* suffix) { return std::string(deepseek_v3_arch().gguf_arch) + "." + suffix; };
  w.set_u32(k("attention.head_count_kv"), legacy ? static_cast<uint32_t>(c.num_heads) : 1u);
  w.set_u32(k("leading_dense_block_count"), static_cast<uint32_t>(c.first_k_dense_replace));
  if (c.num_nextn_predict_layers > 0)
    w.set_u32(k("nextn_predict_layers"), static_cast<uint32_t>(c.num_nextn_predict_layers));
  if (c.q_lora_rank) w.set_u32(k("attention.q_lora_rank"), static_cast<uint32_t>(*c.q_lora_rank));
  w.set_u32(k("attention.kv_lora_rank"), static_cast<uint32_t>(c.kv_lora_rank));
  if (legacy) {
    w.set_u32(k("attention.key_length"), static_cast<uint32_t>(c.qk_head_dim()));
    w.set_u32(k("attention.value_length"), static_cast<uint32_t>(c.v_head_dim));
  } else {
    w.set_u32(k("attention.key_length"), static_cast<uint32_t>(c.kv_lora_rank + c.qk_rope_head_dim));
    w.set_u32(k("attention.value_length"), static_cast<uint32_t>(c.kv_lora_rank));
    w.set_u32(k("attention.key_length_mla"), static_cast<uint32_t>(c.qk_head_dim()));
    w.set_u32(k("attention.value_length_mla"), static_cast<uint32_t>(c.v_head_dim));
  }
  w.set_u32(k("rope.dimension_count"), static_cast<uint32_t>(c.qk_rope_head_dim));
  w.set_u32(k("expert_shared_count"), static_cast<uint32_t>(c.n_shared_experts));
  w.set_f32(k("expert_weights_scale"), static_cast<float>(c.routed_scaling_factor));
  if (c.norm_topk_prob) w.set_bool(k("expert_weights_norm"), true);
  w.set_u32(k("expert_gating_func"), 2);  // sigmoid
  w.set_u32(k("expert_group_count"), static_cast<uint32_t>(c.n_group));
  w.set_u32(k("expert_group_used_count"), static_cast<uint32_t>(c.topk_group));
  if (c.rope.type == "yarn" && c.rope.mscale_all_dim != 0.0)
    w.set_f32(k("rope.scaling.yarn_log_multiplier"), static_cast<float>(0.1 * c.rope.mscale_all_dim));
}

void read_gguf(const GgufConfigInput& in, json& j) {
  const GgufKeys& m = in.m;
  j["n_routed_experts"] = in.experts;
  j["n_shared_experts"] = m.integer(m.key("expert_shared_count"), 0);
  j["n_group"] = std::max<int64_t>(1, m.integer(m.key("expert_group_count"), 1));
  j["topk_group"] = std::max<int64_t>(1, m.integer(m.key("expert_group_used_count"), 1));
  j["first_k_dense_replace"] = m.integer(m.key("leading_dense_block_count"), 0);
  j["routed_scaling_factor"] = m.number(m.key("expert_weights_scale"), 1.0);
  j["scoring_func"] = in.gating_name(in.gating.value_or(1));
  j["topk_method"] = "noaux_tc";
  const int64_t q_lora = m.integer(m.key("attention.q_lora_rank"), 0);
  j["q_lora_rank"] = q_lora > 0 ? json(q_lora) : json(nullptr);
  j["kv_lora_rank"] = m.required(m.key("attention.kv_lora_rank"));
  const int64_t rope = m.required(m.key("rope.dimension_count"));
  j["qk_rope_head_dim"] = rope;
  // Newer files run MLA as MQA and keep the real head sizes in *_mla.
  auto k_mla = m.integer(m.key("attention.key_length_mla"));
  auto v_mla = m.integer(m.key("attention.value_length_mla"));
  int64_t key_len = 0, value_len = 0;
  if (k_mla && v_mla) {
    key_len = *k_mla;
    value_len = *v_mla;
  } else {
    key_len = m.required(m.key("attention.key_length"));
    value_len = m.required(m.key("attention.value_length"));
  }
  if (key_len <= rope)
    in.file().fail("metadata: key length " + std::to_string(key_len) + " leaves no room for " + std::to_string(rope) +
                   " rotary dimensions");
  j["qk_nope_head_dim"] = key_len - rope;
  j["v_head_dim"] = value_len;
  j["num_key_value_heads"] = in.heads;  // MLA: every head has its own key
  j["attention_bias"] = in.has_tensor(tn(Naming::Gguf, AttnQA, "bias", 0)) ||
                        in.has_tensor(tn(Naming::Gguf, AttnQ, "bias", 0));
  j["rope_interleave"] = true;
  // The MTP layers follow the decoder layers and block_count counts both
  // (llama.cpp's converters: num_hidden_layers + num_nextn_predict_layers).
  // Upstream's DeepSeek-V3 conversion drops them and writes no key; a file
  // with the key but without the tensors loads without them
  // (model/checkpoint.h).
  const int64_t nextn = m.integer(m.key("nextn_predict_layers"), 0);
  if (nextn < 0 || nextn >= in.layers)
    in.file().fail("metadata " + m.key("nextn_predict_layers") + " is " + std::to_string(nextn) + " of " +
                   std::to_string(in.layers) + " blocks");
  j["num_hidden_layers"] = in.layers - nextn;
  j["num_nextn_predict_layers"] = nextn;
}

constexpr TensorKind kGgufTensors[] = {
    TokenEmbd,    OutputNorm,    Output,       AttnNorm,    FfnNorm,     AttnOut,     FfnGateInp,
    FfnGate,      FfnUp,         FfnDown,      FfnGateExps, FfnUpExps,   FfnDownExps, FfnGateUpExps,
    AttnQ,        AttnQA,        AttnQANorm,   AttnQB,      AttnKvAMqa,  AttnKvANorm, AttnKvB,
    AttnKB,       AttnVB,        FfnGateShexp, FfnUpShexp,  FfnDownShexp, ExpProbsB,
    NextnENorm,   NextnHNorm,    NextnEhProj,  NextnEmbedTokens, NextnSharedHeadNorm, NextnSharedHeadHead,
};

void declare_layer(const ModelConfig& c, int64_t l, Naming naming, std::vector<TensorKind>& out) {
  out.push_back(AttnNorm);
  if (c.q_lora_rank)
    out.insert(out.end(), {AttnQA, AttnQANorm, AttnQB});
  else
    out.push_back(AttnQ);
  out.insert(out.end(), {AttnKvAMqa, AttnKvANorm});
  // The current converter splits kv_b per head (gguf_model.h).
  if (naming == Naming::Gguf)
    out.insert(out.end(), {AttnKB, AttnVB});
  else
    out.push_back(AttnKvB);
  out.insert(out.end(), {AttnOut, FfnNorm});
  if (!c.layer_is_moe(l)) {
    out.insert(out.end(), {FfnGate, FfnUp, FfnDown});
    return;
  }
  out.insert(out.end(), {FfnGateInp, ExpProbsB, FfnGateExps, FfnUpExps, FfnDownExps});
  if (c.n_shared_experts > 0) out.insert(out.end(), {FfnGateShexp, FfnUpShexp, FfnDownShexp});
}

Layer bind_layer(WeightBinder& w, const ModelConfig& c, int64_t l, ExpertProvider& experts) {
  Layer layer;
  layer.attn_norm = w.vector(tn(Naming::Hf, AttnNorm, "weight", l), c.hidden_size);
  layer.mlp_norm = w.vector(tn(Naming::Hf, FfnNorm, "weight", l), c.hidden_size);
  layer.attention = make_mla_attention(w, c, l);
  if (!c.layer_is_moe(l)) {
    layer.dense = SwiGlu::bind(w, FfnGate, FfnUp, FfnDown, l, c.hidden_size, c.intermediate_size);
    return layer;
  }
  std::optional<SwiGlu> shared;
  if (c.n_shared_experts > 0)
    shared = SwiGlu::bind(w, FfnGateShexp, FfnUpShexp, FfnDownShexp, l, c.hidden_size,
                          c.moe_intermediate_size * c.n_shared_experts);
  layer.moe = std::make_unique<MoeBlock>(
      l, c, make_sigmoid_group_router(w, c, hf_name(FfnGateInp, l), hf_name(ExpProbsB, l)), std::move(shared),
      experts);
  return layer;
}

ExpertBindFn bind_experts(const TensorSource&, WeightBinder& binder, const ModelConfig& c) {
  return per_expert_tensors(binder, c);
}

bool layer_is_moe(const ModelConfig& c, int64_t l) {
  return l >= c.first_k_dense_replace && l % c.moe_layer_freq == 0;
}

constexpr const char* kModelTypes[] = {"deepseek_v3", "kimi_k2"};

}  // namespace

const ArchSpec& deepseek_v3_arch() {
  static const ArchSpec spec{
      .arch = Arch::DeepseekV3,
      .name = "deepseek_v3",
      .hf_model_types = kModelTypes,
      .gguf_arch = "deepseek2",
      .hf = {.norm_topk_prob_default = true,
             .compressed_tensors = true,
             .read = read_hf,
             .validate = validate_hf,
             .write = write_hf},
      // The converter writes expert_weights_norm only when true; gating
      // absent means llama.cpp's DeepSeek-V2 default, softmax.
      .gguf = {.yarn_log_multiplier_is_scaled = true,
               .norm_topk_prob_default = false,
               .read = read_gguf,
               .write = write_gguf},
      .layer_is_moe = layer_is_moe,
      .attention_scale = mla_attention_scale,
      .cache_widths = mla_cache_widths,
      .attention_widths = mla_attention_widths,
      .gguf_tensors = kGgufTensors,
      .declare_layer = declare_layer,
      .bind_layer = bind_layer,
      .bind_experts = bind_experts,
  };
  return spec;
}

}  // namespace strata
