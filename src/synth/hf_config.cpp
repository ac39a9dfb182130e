// config.json for a synthesized model, with the field names the released
// checkpoints use (DeepSeek-V3 / Kimi-K2, Qwen3-MoE, gpt-oss): transformers
// 4.x and 5.x and strata's ModelConfig::from_json all read these.
#include "synth/synth.h"

namespace strata::synth {

namespace {

using nlohmann::json;

json token_ids(const ModelConfig& c) {
  json eos;
  if (c.eos_token_ids.size() == 1)
    eos = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty())
    eos = c.eos_token_ids;
  return eos;
}

json fp8_quantization() {
  return {
      {"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
}

}  // namespace

json hf_config_json(const ModelConfig& c, const Quant& q, Format f) {
  json j;
  const bool fp8 = f == Format::Safetensors && q.trunk == DType::F8_E4M3;
  const char* dtype = f == Format::Safetensors && q.trunk == DType::F16   ? "float16"
                      : f == Format::Safetensors && q.trunk == DType::F32 ? "float32"
                                                                          : "bfloat16";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["attention_dropout"] = 0.0;
  j["use_cache"] = true;
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  j["eos_token_id"] = token_ids(c);
  j["rope_theta"] = c.rope.theta;
  j["torch_dtype"] = dtype;
  j["transformers_version"] = "4.57.1";

  json rope = nullptr;
  if (c.rope.type == "yarn") {
    rope = {{"type", "yarn"},
            {"rope_type", "yarn"},
            {"factor", c.rope.factor},
            {"original_max_position_embeddings", c.rope.original_max_position_embeddings},
            {"beta_fast", c.rope.beta_fast},
            {"beta_slow", c.rope.beta_slow}};
    if (c.arch == Arch::DeepseekV3) {
      rope["mscale"] = c.rope.mscale;
      rope["mscale_all_dim"] = c.rope.mscale_all_dim;
    }
    if (c.rope.attention_factor) rope["attention_factor"] = *c.rope.attention_factor;
    if (c.arch == Arch::GptOss) {
      rope.erase("type");  // the release writes rope_type only
      rope["truncate"] = c.rope.truncate;
    }
  }
  j["rope_scaling"] = rope;

  switch (c.arch) {
    case Arch::DeepseekV3:
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
      j["num_nextn_predict_layers"] = 0;  // no MTP layer is written
      j["ep_size"] = 1;
      j["pretraining_tp"] = 1;
      j["aux_loss_alpha"] = 0.001;
      j["seq_aux"] = true;
      if (fp8) j["quantization_config"] = fp8_quantization();
      break;
    case Arch::Qwen3Moe: {
      j["architectures"] = {"Qwen3MoeForCausalLM"};
      j["model_type"] = "qwen3_moe";
      j["intermediate_size"] = c.intermediate_size;
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["num_experts"] = c.n_routed_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["decoder_sparse_step"] = c.decoder_sparse_step;
      j["mlp_only_layers"] = c.mlp_only_layers;
      j["head_dim"] = c.head_dim;
      j["max_window_layers"] = c.num_layers;
      j["use_sliding_window"] = c.sliding_window.has_value();
      j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
      j["output_router_logits"] = false;
      j["router_aux_loss_coef"] = 0.001;
      if (fp8) j["quantization_config"] = fp8_quantization();
      break;
    }
    case Arch::GptOss: {
      j["architectures"] = {"GptOssForCausalLM"};
      j["model_type"] = "gpt_oss";
      j["intermediate_size"] = c.moe_intermediate_size;
      j["num_local_experts"] = c.n_routed_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["experts_per_token"] = c.num_experts_per_tok;
      j["head_dim"] = c.head_dim;
      j["sliding_window"] = c.sliding_window.value_or(128);
      json types = json::array();
      for (int64_t l = 0; l < c.num_layers; ++l)
        types.push_back(c.layer_window(l) ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
      j["swiglu_limit"] = c.swiglu_limit;
      j["initial_context_length"] = c.rope.original_max_position_embeddings;
      j["output_router_logits"] = false;
      j["router_aux_loss_coef"] = 0.9;
      if (f == Format::Safetensors && q.experts == DType::U8)
        j["quantization_config"] = {
            {"quant_method", "mxfp4"},
            {"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
      break;
    }
  }
  return j;
}

json generation_config_json(const ModelConfig& c) {
  json g;
  g["_from_model_config"] = true;
  if (c.bos_token_id) g["bos_token_id"] = *c.bos_token_id;
  json eos = token_ids(c);
  if (!eos.is_null()) g["eos_token_id"] = eos;
  g["do_sample"] = false;
  g["transformers_version"] = "4.57.1";
  return g;
}

}  // namespace strata::synth
