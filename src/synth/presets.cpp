// Full-size shapes of the models strata targets, as their released
// config.json files spell them (only the fields the shape needs; the writer
// adds the rest). Kimi K3's is its published config.json's text_config
// (docs/kimi_k3.md): an expert of 3 × 3584 × 3072 MXFP4 weights is 17.55 MB,
// and 16 × 92 of them are the 25.8 GB a token reads.
#include <algorithm>

#include "model/arch.h"
#include "synth/synth.h"
#include "util/error.h"

namespace strata::synth {

namespace {

using nlohmann::json;

json deepseek_like(int64_t vocab, int64_t heads, int64_t experts, int64_t top_k, int64_t layers, int64_t first_dense,
                   int64_t moe_width, int64_t n_group, int64_t topk_group, double routed_scale, double rope_theta,
                   json rope_scaling, int64_t max_pos, int32_t bos, int32_t eos) {
  return json{{"model_type", "deepseek_v3"},
              {"vocab_size", vocab},
              {"hidden_size", 7168},
              {"intermediate_size", 18432},
              {"moe_intermediate_size", moe_width},
              {"num_hidden_layers", layers},
              {"num_attention_heads", heads},
              {"num_key_value_heads", heads},
              {"n_shared_experts", 1},
              {"n_routed_experts", experts},
              {"num_experts_per_tok", top_k},
              {"routed_scaling_factor", routed_scale},
              {"kv_lora_rank", 512},
              {"q_lora_rank", 1536},
              {"qk_rope_head_dim", 64},
              {"qk_nope_head_dim", 128},
              {"v_head_dim", 128},
              {"n_group", n_group},
              {"topk_group", topk_group},
              {"topk_method", "noaux_tc"},
              {"scoring_func", "sigmoid"},
              {"first_k_dense_replace", first_dense},
              {"moe_layer_freq", 1},
              {"norm_topk_prob", true},
              {"hidden_act", "silu"},
              {"max_position_embeddings", max_pos},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", rope_theta},
              {"rope_scaling", std::move(rope_scaling)},
              {"tie_word_embeddings", false},
              {"attention_bias", false},
              {"bos_token_id", bos},
              {"eos_token_id", eos}};
}

json kimi_rope() {
  return json{{"type", "yarn"},       {"factor", 32.0},   {"original_max_position_embeddings", 4096},
              {"beta_fast", 1.0},     {"beta_slow", 1.0}, {"mscale", 1.0},
              {"mscale_all_dim", 1.0}};
}

// The published config.json, its text model's fields (the rest are the
// writer's): layers 4, 8, ..., 92 and 93 (1-based) are MLA, the others KDA.
json kimi_k3() {
  constexpr int64_t layers = 93;
  json kda = json::array(), full = json::array();
  for (int64_t l = 1; l <= layers; ++l) (l % 4 == 0 || l == layers ? full : kda).push_back(l);
  json text = {{"model_type", "kimi_linear"},
               {"vocab_size", 163840},
               {"hidden_size", 7168},
               {"intermediate_size", 33792},
               {"moe_intermediate_size", 3072},
               {"routed_expert_hidden_size", 3584},
               {"num_hidden_layers", layers},
               {"num_attention_heads", 96},
               {"num_key_value_heads", 96},
               {"num_experts", 896},
               {"num_experts_per_token", 16},
               {"num_shared_experts", 2},
               {"first_k_dense_replace", 1},
               {"moe_layer_freq", 1},
               {"moe_renormalize", true},
               {"moe_router_activation_func", "sigmoid"},
               {"num_expert_group", 1},
               {"topk_group", 1},
               {"routed_scaling_factor", 1.0},
               {"q_lora_rank", 1536},
               {"kv_lora_rank", 512},
               {"qk_nope_head_dim", 128},
               {"qk_rope_head_dim", 64},
               {"v_head_dim", 128},
               {"mla_use_nope", true},
               {"mla_use_output_gate", true},
               {"attn_res_block_size", 12},
               {"latent_moe_use_norm", true},
               {"hidden_act", "situ"},
               {"activation_situ_beta", 4.0},
               {"activation_situ_linear_beta", 25.0},
               {"rms_norm_eps", 1e-5},
               {"max_position_embeddings", 1048576},
               {"tie_word_embeddings", false},
               {"linear_attn_config",
                {{"kda_layers", kda},
                 {"full_attn_layers", full},
                 {"num_heads", 96},
                 {"head_dim", 128},
                 {"short_conv_kernel_size", 4},
                 {"gate_lower_bound", -5.0},
                 {"use_full_rank_gate", true}}}};
  return json{{"model_type", "kimi_k3"},
              {"bos_token_id", 163584},
              {"eos_token_id", 163586},
              {"tie_word_embeddings", false},
              {"text_config", std::move(text)}};
}

json qwen3_moe(int64_t hidden, int64_t dense_width, int64_t moe_width, int64_t layers, int64_t heads) {
  return json{{"model_type", "qwen3_moe"},
              {"vocab_size", 151936},
              {"hidden_size", hidden},
              {"intermediate_size", dense_width},
              {"moe_intermediate_size", moe_width},
              {"num_hidden_layers", layers},
              {"num_attention_heads", heads},
              {"num_key_value_heads", 4},
              {"head_dim", 128},
              {"num_experts", 128},
              {"num_experts_per_tok", 8},
              {"norm_topk_prob", true},
              {"decoder_sparse_step", 1},
              {"mlp_only_layers", json::array()},
              {"hidden_act", "silu"},
              {"max_position_embeddings", 40960},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 1000000.0},
              {"tie_word_embeddings", false},
              {"attention_bias", false},
              {"use_sliding_window", false},
              {"bos_token_id", 151643},
              {"eos_token_id", 151645}};
}

json gpt_oss(int64_t layers, int64_t experts) {
  json types = json::array();
  for (int64_t l = 0; l < layers; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  return json{{"model_type", "gpt_oss"},
              {"vocab_size", 201088},
              {"hidden_size", 2880},
              {"intermediate_size", 2880},
              {"num_hidden_layers", layers},
              {"num_attention_heads", 64},
              {"num_key_value_heads", 8},
              {"head_dim", 64},
              {"num_local_experts", experts},
              {"num_experts_per_tok", 4},
              {"experts_per_token", 4},
              {"sliding_window", 128},
              {"layer_types", types},
              {"hidden_act", "silu"},
              {"max_position_embeddings", 131072},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 150000.0},
              {"rope_scaling",
               {{"rope_type", "yarn"},
                {"factor", 32.0},
                {"beta_fast", 32.0},
                {"beta_slow", 1.0},
                {"original_max_position_embeddings", 4096},
                {"truncate", false}}},
              {"swiglu_limit", 7.0},
              {"tie_word_embeddings", false},
              {"attention_bias", true},
              {"eos_token_id", 200002},
              {"pad_token_id", 199999}};
}

std::vector<Preset> make_presets() {
  json ds_rope = {{"type", "yarn"},       {"factor", 40.0},   {"original_max_position_embeddings", 4096},
                  {"beta_fast", 32.0},    {"beta_slow", 1.0}, {"mscale", 1.0},
                  {"mscale_all_dim", 1.0}};
  std::vector<Preset> p;
  p.push_back({"deepseek-v3", Arch::DeepseekV3,
               "DeepSeek-V3/R1 (671B): 61 layers (3 dense), 256 experts top-8 + 1 shared, groups 8/4, MLA",
               deepseek_like(129280, 128, 256, 8, 61, 3, 2048, 8, 4, 2.5, 10000.0, ds_rope, 163840, 0, 1)});
  p.push_back(
      {"kimi-k2", Arch::DeepseekV3,
       "Kimi-K2 (1T): 61 layers (1 dense), 384 experts top-8 + 1 shared, MLA with 64 heads",
       deepseek_like(163840, 64, 384, 8, 61, 1, 2048, 1, 1, 2.827, 50000.0, kimi_rope(), 131072, 163584, 163585)});
  p.push_back({"kimi-k3", Arch::KimiK3,
               "Kimi K3 (2.8T): 93 layers (69 KDA, 24 gated NoPE MLA; 1 dense), AttnRes blocks of 12, "
               "896 latent experts (3584 -> 3072) top-16 + 2 shared, SiTU",
               kimi_k3()});
  p.push_back({"qwen3-30b-a3b", Arch::Qwen3Moe,
               "Qwen3-30B-A3B: 48 layers, 128 experts of width 768 top-8, GQA 32/4 heads of 128",
               qwen3_moe(2048, 6144, 768, 48, 32)});
  p.push_back({"qwen3-235b-a22b", Arch::Qwen3Moe,
               "Qwen3-235B-A22B: 94 layers, 128 experts of width 1536 top-8, GQA 64/4 heads of 128",
               qwen3_moe(4096, 12288, 1536, 94, 64)});
  p.push_back({"gpt-oss-20b", Arch::GptOss,
               "gpt-oss-20b: 24 layers, 32 experts top-4, GQA 64/8 heads of 64 with sinks, sliding window 128",
               gpt_oss(24, 32)});
  p.push_back({"gpt-oss-120b", Arch::GptOss,
               "gpt-oss-120b: 36 layers, 128 experts top-4, GQA 64/8 heads of 64 with sinks, sliding window 128",
               gpt_oss(36, 128)});
  return p;
}

}  // namespace


// A config.json model_type or a GGUF architecture name, as the specs list them.
std::optional<Arch> arch_from_name(std::string_view name) {
  if (const ArchSpec* s = arch_for_model_type(name)) return s->arch;
  if (const ArchSpec* s = arch_for_gguf(name)) return s->arch;
  return std::nullopt;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

const Preset* find_preset(std::string_view name) {
  for (const Preset& p : presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::string default_quant(Format format) { return format == Format::Gguf ? "q8_0" : "bf16"; }

namespace {

std::optional<DType> gguf_type(std::string_view s) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  if (s == "q8_0") return DType::Q8_0;
  if (s == "q4_k") return DType::Q4_K;
  if (s == "q6_k") return DType::Q6_K;
  if (s == "mxfp4") return DType::MXFP4;
  return std::nullopt;
}

}  // namespace

Quant parse_quant(std::string_view spec_in, Format format, Arch arch) {
  std::string spec(spec_in.empty() ? default_quant(format) : std::string(spec_in));
  std::transform(spec.begin(), spec.end(), spec.begin(), [](unsigned char ch) { return std::tolower(ch); });
  Quant q;
  q.spec = spec;
  if (format == Format::Safetensors) {
    if (spec == "bf16" || spec == "f16" || spec == "f32") {
      q.trunk = q.experts = spec == "bf16" ? DType::BF16 : spec == "f16" ? DType::F16 : DType::F32;
    } else if (spec == "fp8") {
      if (arch == Arch::GptOss || arch == Arch::KimiK3)
        throw Error("--quant fp8: " + std::string(arch_name(arch)) + " checkpoints are not FP8 (use bf16 or mxfp4)");
      q.trunk = q.experts = DType::F8_E4M3;
    } else if (spec == "mxfp4" || spec == "bf16+mxfp4") {
      // gpt-oss's own _blocks/_scales, Kimi K3's compressed-tensors weight_packed/weight_scale.
      const ArchSpec::Hf& hf = arch_spec(arch).hf;
      if (!hf.mxfp4_experts && !hf.compressed_mxfp4_experts)
        throw Error("--quant mxfp4: only gpt-oss and kimi_k3 ship MXFP4 experts in safetensors (use bf16 or fp8)");
      q.spec = "mxfp4";
      q.trunk = DType::BF16;
      q.experts = DType::U8;
    } else {
      throw Error("--quant '" + spec +
                  "' is not a safetensors type (bf16, f16, f32, fp8, mxfp4 for gpt-oss and kimi_k3)");
    }
    return q;
  }
  if (!arch_spec(arch).gguf.write)
    throw Error(std::string("--format gguf: strata reads no GGUF of ") + arch_name(arch) + " (use safetensors)");
  const size_t plus = spec.find('+');
  const std::string trunk = spec.substr(0, plus);
  const std::string experts = plus == std::string::npos ? trunk : spec.substr(plus + 1);
  auto t = gguf_type(trunk), e = gguf_type(experts);
  if (!t || !e || experts.find('+') != std::string::npos)
    throw Error("--quant '" + spec +
                "' is not a GGUF spec: TRUNK[+EXPERTS], each one of f32, f16, bf16, q8_0, q4_k, q6_k, mxfp4 "
                "(e.g. q8_0, q8_0+mxfp4)");
  q.trunk = *t;
  q.experts = *e;
  return q;
}

}  // namespace strata::synth
