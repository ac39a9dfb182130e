// Qwen3-MoE: grouped-query attention with per-head q/k norms, softmax-routed
// experts without shared experts; some layers may be dense. Its whole
// description: config (config.json and GGUF "qwen3moe"), tensors, binding.
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
  const json& j = r.json();
  // transformers 5 writes "num_local_experts"; released checkpoints say "num_experts".
  c.n_routed_experts = r.has("num_experts") ? r.integer("num_experts") : r.integer("num_local_experts");
  c.decoder_sparse_step = r.integer("decoder_sparse_step", 1);
  c.scoring_func = "softmax";
  if (r.has("head_dim"))
    c.head_dim = r.integer("head_dim");
  else if (c.num_heads > 0 && c.hidden_size % c.num_heads == 0)
    c.head_dim = c.hidden_size / c.num_heads;
  else
    r.fail("inconsistent config: hidden_size is not a multiple of num_attention_heads and head_dim is absent");
  if (r.has("mlp_only_layers")) {
    const json& m = j["mlp_only_layers"];
    if (!m.is_array()) r.fail("field 'mlp_only_layers' must be a list of layer indices");
    for (const json& v : m) {
      if (!v.is_number_integer()) r.fail("field 'mlp_only_layers' must be a list of layer indices");
      c.mlp_only_layers.push_back(v.get<int64_t>());
    }
  }
  if (r.boolean("use_sliding_window", false)) c.sliding_window = r.integer("sliding_window", 4096);
}

void validate_hf(const ConfigReader& r, const ModelConfig& c) {
  validate_gqa_config(r, c);
  require_positive(c.intermediate_size, r, "intermediate_size");
}

void write_hf(const ModelConfig& c, json& j) {
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
}

void write_gguf(const ModelConfig& c, bool, GgufWriter& w) {
  auto k = [](const char* suffix) { return std::string(qwen3_moe_arch().gguf_arch) + "." + suffix; };
  w.set_u32(k("attention.head_count_kv"), static_cast<uint32_t>(c.num_kv_heads));
  w.set_u32(k("attention.key_length"), static_cast<uint32_t>(c.head_dim));
  w.set_u32(k("attention.value_length"), static_cast<uint32_t>(c.head_dim));
}

void read_gguf(const GgufConfigInput& in, json& j) {
  const GgufKeys& m = in.m;
  const GgufFile& f = in.file();
  j["num_experts"] = in.experts;
  if (in.gating && *in.gating != 1)
    f.fail("metadata " + quote_name(m.key("expert_gating_func")) + " is " + in.gating_name(*in.gating) +
           "; qwen3moe routes with softmax");
  j["num_key_value_heads"] = m.integer(m.key("attention.head_count_kv"), in.heads);
  if (auto k = m.integer(m.key("attention.key_length"))) {
    if (auto v = m.integer(m.key("attention.value_length")); v && *v != *k)
      f.fail("metadata: key_length " + std::to_string(*k) + " and value_length " + std::to_string(*v) +
             " differ, which qwen3moe does not allow");
    j["head_dim"] = *k;
  }
  if (!j.contains("intermediate_size"))
    f.fail("metadata " + quote_name(m.key("feed_forward_length")) + " is missing");
  // Dense layers are the ones with an MLP and no router.
  json dense = json::array();
  for (int64_t l = 0; l < in.layers && l < 4096; ++l)
    if (!in.has_tensor(tn(Naming::Gguf, FfnGateInp, "weight", l)) && in.has_tensor(tn(Naming::Gguf, FfnGate, "weight", l)))
      dense.push_back(l);
  if (!dense.empty()) j["mlp_only_layers"] = dense;
  j["attention_bias"] = in.has_tensor(tn(Naming::Gguf, AttnQ, "bias", 0)) ||
                        in.has_tensor(tn(Naming::Gguf, AttnQkv, "bias", 0));
}

constexpr TensorKind kGgufTensors[] = {
    TokenEmbd, OutputNorm,  Output,    AttnNorm,    FfnNorm,   AttnOut,   FfnGateInp, FfnGate,   FfnUp,
    FfnDown,   FfnGateExps, FfnUpExps, FfnDownExps, FfnGateUpExps, AttnQ, AttnK,      AttnV,     AttnQNorm,
    AttnKNorm, AttnQkv,
};

void declare_layer(const ModelConfig& c, int64_t l, Naming, std::vector<TensorKind>& out) {
  out.insert(out.end(), {AttnNorm, AttnQ, AttnK, AttnV, AttnOut, AttnQNorm, AttnKNorm, FfnNorm});
  if (!c.layer_is_moe(l))
    out.insert(out.end(), {FfnGate, FfnUp, FfnDown});
  else
    out.insert(out.end(), {FfnGateInp, FfnGateExps, FfnUpExps, FfnDownExps});
}

Layer bind_layer(WeightBinder& w, const ModelConfig& c, int64_t l, ExpertProvider& experts) {
  Layer layer;
  layer.attn_norm = w.vector(tn(Naming::Hf, AttnNorm, "weight", l), c.hidden_size);
  layer.mlp_norm = w.vector(tn(Naming::Hf, FfnNorm, "weight", l), c.hidden_size);
  layer.attention = make_gqa_attention(w, c, l, {.qk_norm = true});
  if (!c.layer_is_moe(l)) {
    layer.dense = SwiGlu::bind(w, FfnGate, FfnUp, FfnDown, l, c.hidden_size, c.intermediate_size);
    return layer;
  }
  layer.moe = std::make_unique<MoeBlock>(l, c, make_softmax_router(w, c, hf_name(FfnGateInp, l)), std::nullopt, experts);
  return layer;
}

ExpertBindFn bind_experts(const TensorSource&, WeightBinder& binder, const ModelConfig& c) {
  return per_expert_tensors(binder, c);
}

bool layer_is_moe(const ModelConfig& c, int64_t l) {
  if (std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), l) != c.mlp_only_layers.end()) return false;
  return (l + 1) % c.decoder_sparse_step == 0;
}

constexpr const char* kModelTypes[] = {"qwen3_moe"};

}  // namespace

const ArchSpec& qwen3_moe_arch() {
  static const ArchSpec spec{
      .arch = Arch::Qwen3Moe,
      .name = "qwen3_moe",
      .hf_model_types = kModelTypes,
      .gguf_arch = "qwen3moe",
      .hf = {.compressed_tensors = true, .read = read_hf, .validate = validate_hf, .write = write_hf},
      // llama.cpp hard-codes normalised top-k for qwen3moe; released Qwen3-MoE use true.
      .gguf = {.norm_topk_prob_default = true, .read = read_gguf, .write = write_gguf},
      .layer_is_moe = layer_is_moe,
      .attention_scale = gqa_attention_scale,
      .cache_widths = gqa_cache_widths,
      .attention_widths = gqa_attention_widths,
      .gguf_tensors = kGgufTensors,
      .declare_layer = declare_layer,
      .bind_layer = bind_layer,
      .bind_experts = bind_experts,
  };
  return spec;
}

}  // namespace strata
