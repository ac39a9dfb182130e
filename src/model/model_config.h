#pragma once
// The architecture hyper-parameters read from a Hugging Face config.json,
// validated so that a contradictory config fails here with a clear message
// instead of deep inside the forward pass. The common fields are read here;
// each architecture's own fields, checks and per-layer rules come from its
// ArchSpec (model/arch.h), which is also how `Arch` values are named.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/rope.h"

namespace strata {

enum class Arch { DeepseekV3, Qwen3Moe, GptOss, KimiK3 };  // one ArchSpec each (arch.cpp's list)
// "deepseek_v3", "qwen3_moe", "gpt_oss", "kimi_k3" (the config.json model_type).
const char* arch_name(Arch a);

struct ModelConfig {
  Arch arch = Arch::DeepseekV3;
  std::string model_type;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense MLP width
  int64_t moe_intermediate_size = 0;  // one routed expert's width
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // GQA head width (Qwen3); unused by MLA
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  RopeConfig rope;

  // Mixture of experts.
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = false;
  std::string scoring_func;  // "sigmoid" (DeepSeek-V3) or "softmax" (Qwen3-MoE)
  std::string topk_method;   // "noaux_tc" for DeepSeek-V3
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  // Multi-head latent attention (DeepSeek-V3 family).
  std::optional<int64_t> q_lora_rank;
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = true;
  // DeepSeek-V3's next-token-prediction (MTP) layers, after the decoder
  // layers (model/mtp_layer.h): bound and kept, never run by the forward
  // pass. 0 when the checkpoint holds none (model/checkpoint.h).
  int64_t num_nextn_predict_layers = 0;

  // Sliding-window attention: the window in tokens (a layer sees its last
  // `sliding_window` positions, itself included) and which layers use it.
  std::optional<int64_t> sliding_window;
  std::vector<bool> sliding_layers;  // empty: every layer uses sliding_window if set

  // gpt-oss: per-head attention sinks and the clamped SwiGLU of its experts.
  bool attention_sinks = false;
  double swiglu_limit = 7.0;
  // Experts quantized as MXFP4 ("quantization_config": {"quant_method": "mxfp4"}).
  bool mxfp4_experts = false;
  // quantization_config quant_method compressed-tensors: its format
  // ("pack-quantized" int4, "mxfp4-pack-quantized"); "" otherwise.
  std::string compressed_format;

  // Kimi K3 (kimi_k3.cpp): Kimi Delta Attention layers beside MLA ones,
  // attention residuals over depth, a latent MoE and the SiTU activation.
  std::vector<bool> kda_layers;  // per layer: Kimi Delta Attention (else MLA); empty for other architectures
  int64_t kda_heads = 0, kda_head_dim = 0, kda_conv_kernel = 0;
  double kda_gate_lower_bound = 0.0;
  int64_t attn_res_block_size = 0;  // 0: the plain residual stream
  int64_t latent_width = 0;         // the routed experts' input width; 0: hidden_size
  double situ_beta = 0.0, situ_linear_beta = 0.0;  // hidden_act "situ"; 0: SiLU
  bool mla_nope = false;            // MLA without rotation: the rope slices are plain features
  bool mla_output_gate = false;     // MLA heads times sigmoid(g_proj x) before o_proj
  double mla_norm_eps = 0.0;        // q_a/kv_a layernorm eps; 0: rms_norm_eps

  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  // FP8 block-scaled weights ("quantization_config": {"quant_method": "fp8"}).
  std::optional<std::array<int64_t, 2>> fp8_block;

  bool layer_is_moe(int64_t layer) const;
  // The layers whose routed experts are streamed: the decoder layers and
  // the next-token-prediction (MTP) layers after them.
  int64_t expert_layers() const { return num_layers + num_nextn_predict_layers; }
  bool layer_is_kda(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(kda_layers.size()) && kda_layers[layer];
  }
  // The attention window of a layer, if it is a sliding-window layer.
  std::optional<int64_t> layer_window(int64_t layer) const;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Softmax scale of attention, including YaRN's mscale for MLA.
  double attention_scale() const;

  // `source` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  static ModelConfig from_file(const std::string& path);
};

}  // namespace strata
