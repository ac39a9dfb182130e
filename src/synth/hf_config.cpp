// config.json for a synthesized model, with the field names the released
// checkpoints use (DeepSeek-V3 / Kimi-K2, Qwen3-MoE, gpt-oss, Kimi K3's
// text_config inside its multimodal wrapper): transformers
// 4.x and 5.x and strata's ModelConfig::from_json all read these.
#include "model/arch.h"
#include "model/tensor_names.h"
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
    if (c.rope.attention_factor) rope["attention_factor"] = *c.rope.attention_factor;
  }
  j["rope_scaling"] = rope;

  const ArchSpec& spec = arch_spec(c.arch);
  const bool mxfp4 = f == Format::Safetensors && q.experts == DType::U8;
  if (mxfp4 && spec.hf.compressed_mxfp4_experts) {
    // Kimi K3 writes its compressed-tensors quantization_config itself.
    ModelConfig quantized = c;
    quantized.mxfp4_experts = true;
    spec.hf.write(quantized, j);
    return j;
  }
  spec.hf.write(c, j);
  // Only DeepSeek-V3 and Qwen3-MoE ship FP8, only gpt-oss and Kimi K3 MXFP4
  // experts (synth refuses the other pairs).
  if (fp8) j["quantization_config"] = fp8_quantization();
  if (mxfp4) {
    // The modules the release keeps unquantized, in its order.
    auto glob = [](TensorKind k) {
      std::string s = tensor_name(k).hf;
      for (size_t i; (i = s.find("%d")) != std::string::npos;) s.replace(i, 2, "*");
      return s;
    };
    const std::string attention = glob(TensorKind::AttnQ);
    j["quantization_config"] = {{"quant_method", "mxfp4"},
                                {"modules_to_not_convert",
                                 {attention.substr(0, attention.rfind('.')), glob(TensorKind::FfnRouter),
                                  glob(TensorKind::TokenEmbd), glob(TensorKind::Output)}}};
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
