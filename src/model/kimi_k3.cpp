// Kimi K3: Kimi Delta Attention layers with gated NoPE MLA layers between
// them, attention residuals over depth (AttnRes) instead of the residual
// stream, and a latent MoE whose experts use SiTU; text model of a
// multimodal checkpoint (config.json's text_config, "language_model."
// tensors). Its whole description: config, tensors, binding. What was
// checked against which published source: docs/kimi_k3.md.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "model/config_reader.h"
#include "model/model.h"
#include "util/error.h"

namespace strata {

namespace {

using enum TensorKind;
using nlohmann::json;

// 1-based layer numbers (the modeling code's is_kda_layer(i) reads i + 1).
std::vector<int64_t> layer_list(const ConfigReader& r, const json& cfg, const char* key) {
  std::vector<int64_t> out;
  if (!cfg.contains(key)) return out;
  if (!cfg[key].is_array()) r.fail(std::string("linear_attn_config.") + key + " must be a list of layer numbers");
  for (const json& v : cfg[key]) {
    if (!v.is_number_integer()) r.fail(std::string("linear_attn_config.") + key + " must be a list of layer numbers");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

void read_hf(const ConfigReader& r, ModelConfig& c) {
  // Sized by the layer count below, before the common checks run.
  require(c.num_layers > 0 && c.num_layers <= 4096, r, "num_hidden_layers must be between 1 and 4096");
  if (r.string("hidden_act", "") != "situ") r.fail("kimi_k3 runs hidden_act 'situ' only");
  c.n_routed_experts = r.integer("num_experts");
  c.n_shared_experts = r.integer("num_shared_experts", 0);
  c.first_k_dense_replace = r.integer("first_k_dense_replace", 0);
  c.moe_layer_freq = r.integer("moe_layer_freq", 1);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0);
  c.norm_topk_prob = r.boolean("moe_renormalize", true);
  c.n_group = r.integer("num_expert_group", 1);
  c.topk_group = r.integer("topk_group", 1);
  c.scoring_func = r.string("moe_router_activation_func", "sigmoid");
  c.q_lora_rank = r.optional_integer("q_lora_rank");
  c.kv_lora_rank = r.integer("kv_lora_rank");
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim");
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim");
  c.v_head_dim = r.integer("v_head_dim");
  c.head_dim = c.qk_rope_head_dim;
  c.mla_nope = r.boolean("mla_use_nope", false);
  c.mla_output_gate = r.boolean("mla_use_output_gate", false);
  // KimiMLAAttention builds q_a_layernorm and kv_a_layernorm as
  // KimiRMSNorm(width), whose eps defaults to 1e-6, not rms_norm_eps.
  c.mla_norm_eps = 1e-6;
  c.attn_res_block_size = r.integer("attn_res_block_size");
  c.latent_width = r.integer("routed_expert_hidden_size");
  if (!r.boolean("latent_moe_use_norm", true)) r.fail("latent_moe_use_norm false is not supported");
  // Both are required: the modeling code's fallbacks (beta 1, no cap on the
  // up branch) would be another activation.
  if (!r.has("activation_situ_beta") || !r.has("activation_situ_linear_beta"))
    r.fail("missing activation_situ_beta or activation_situ_linear_beta");
  c.situ_beta = r.number("activation_situ_beta", 4.0);
  c.situ_linear_beta = r.number("activation_situ_linear_beta", 25.0);

  if (!r.has("linear_attn_config") || !r.json()["linear_attn_config"].is_object())
    r.fail("missing the 'linear_attn_config' object");
  const json& la = r.json()["linear_attn_config"];
  const ConfigReader lr(la, r.source() + " (linear_attn_config)");
  c.kda_heads = lr.integer("num_heads");
  c.kda_head_dim = lr.integer("head_dim");
  c.kda_conv_kernel = lr.integer("short_conv_kernel_size", 4);
  if (!lr.has("gate_lower_bound"))
    lr.fail("missing gate_lower_bound (Kimi-Linear's softplus decay without a lower bound is not supported)");
  c.kda_gate_lower_bound = lr.number("gate_lower_bound", -5.0);
  if (!lr.boolean("use_full_rank_gate", false)) lr.fail("only use_full_rank_gate true (Kimi K3) is supported");
  const std::vector<int64_t> kda = layer_list(lr, la, "kda_layers"), full = layer_list(lr, la, "full_attn_layers");
  c.kda_layers.assign(static_cast<size_t>(std::max<int64_t>(c.num_layers, 0)), false);
  std::vector<int> listed(c.kda_layers.size(), 0);
  auto mark = [&](const std::vector<int64_t>& layers, const char* key, bool is_kda) {
    for (int64_t l : layers) {
      if (l < 1 || l > c.num_layers)
        lr.fail(std::string(key) + " lists layer " + std::to_string(l) + " (layers are 1 to num_hidden_layers)");
      if (listed[l - 1]++)
        lr.fail("layer " + std::to_string(l) + " is listed twice (in kda_layers and full_attn_layers, each layer once)");
      c.kda_layers[l - 1] = is_kda;
    }
  };
  mark(kda, "kda_layers", true);
  mark(full, "full_attn_layers", false);
  for (size_t l = 0; l < listed.size(); ++l)
    if (!listed[l]) lr.fail("layer " + std::to_string(l + 1) + " is in neither kda_layers nor full_attn_layers");
}

void validate_hf(const ConfigReader& r, const ModelConfig& c) {
  auto positive = [&](int64_t v, const char* name) { require_positive(v, r, name); };
  positive(c.kv_lora_rank, "kv_lora_rank");
  positive(c.v_head_dim, "v_head_dim");
  positive(c.kda_heads, "linear_attn_config.num_heads");
  positive(c.kda_head_dim, "linear_attn_config.head_dim");
  positive(c.kda_conv_kernel, "linear_attn_config.short_conv_kernel_size");
  positive(c.attn_res_block_size, "attn_res_block_size");
  require(c.attn_res_block_size <= c.num_layers, r, "attn_res_block_size must not exceed num_hidden_layers");
  require(c.kda_heads <= 4096 && c.kda_head_dim <= (1 << 20) / c.kda_heads, r,
          "linear_attn_config's heads and head_dim are implausibly large");
  positive(c.latent_width, "routed_expert_hidden_size");
  positive(c.moe_layer_freq, "moe_layer_freq");
  require(c.qk_nope_head_dim >= 0 && c.qk_rope_head_dim >= 0, r, "MLA head widths must not be negative");
  require(c.mla_nope, r, "only mla_use_nope true (Kimi K3) is supported");
  require(!c.q_lora_rank || *c.q_lora_rank > 0, r, "q_lora_rank must be positive or null");
  require(c.num_kv_heads == c.num_heads, r, "MLA needs num_key_value_heads == num_attention_heads");
  require(c.scoring_func == "sigmoid", r, "moe_router_activation_func '" + c.scoring_func + "' is not supported (sigmoid)");
  require(c.n_group == 1 && c.topk_group == 1, r, "grouped expert selection is not supported for kimi_k3");
  require(c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= c.num_layers, r,
          "first_k_dense_replace must be between 0 and num_hidden_layers");
  bool dense = false;
  for (int64_t l = 0; l < c.num_layers; ++l) dense = dense || !c.layer_is_moe(l);
  if (dense) positive(c.intermediate_size, "intermediate_size");
  require(c.situ_beta > 0 && c.situ_linear_beta > 0, r, "the SiTU betas must be positive");
  require(c.kda_gate_lower_bound < 0, r, "gate_lower_bound must be negative");
  // The CPU backend keeps a head's per-token vectors on the stack.
  require(c.kda_head_dim <= 512, r, "linear_attn_config.head_dim above 512 is not supported");
  require(c.kda_conv_kernel <= 64, r, "linear_attn_config.short_conv_kernel_size above 64 is not supported");
}

// The published layout: the text model's fields (what `j` holds on entry,
// plus K3's own) in text_config, the multimodal wrapper around it. The MLA
// is NoPE: no rope fields. A vision tower is neither configured nor written.
void write_hf(const ModelConfig& c, json& j) {
  json t = j;
  for (const char* k : {"rope_theta", "rope_scaling", "num_experts_per_tok"}) t.erase(k);
  if (t.contains("torch_dtype")) t["dtype"] = t["torch_dtype"];
  t.erase("torch_dtype");
  t["model_type"] = "kimi_linear";
  t["hidden_act"] = "situ";
  t["intermediate_size"] = c.intermediate_size;
  t["moe_intermediate_size"] = c.moe_intermediate_size;
  t["routed_expert_hidden_size"] = c.latent_width;
  t["num_experts"] = c.n_routed_experts;
  t["num_experts_per_token"] = c.num_experts_per_tok;
  t["num_shared_experts"] = c.n_shared_experts;
  t["first_k_dense_replace"] = c.first_k_dense_replace;
  t["moe_layer_freq"] = c.moe_layer_freq;
  t["moe_renormalize"] = c.norm_topk_prob;
  t["moe_router_activation_func"] = c.scoring_func;
  t["num_expert_group"] = c.n_group;
  t["topk_group"] = c.topk_group;
  t["topk_method"] = "noaux_tc";
  t["use_grouped_topk"] = true;
  t["routed_scaling_factor"] = c.routed_scaling_factor;
  t["q_lora_rank"] = c.q_lora_rank ? json(*c.q_lora_rank) : json(nullptr);
  t["kv_lora_rank"] = c.kv_lora_rank;
  t["qk_nope_head_dim"] = c.qk_nope_head_dim;
  t["qk_rope_head_dim"] = c.qk_rope_head_dim;
  t["v_head_dim"] = c.v_head_dim;
  t["mla_use_nope"] = c.mla_nope;
  t["mla_use_output_gate"] = c.mla_output_gate;
  t["attn_res_block_size"] = c.attn_res_block_size;
  t["latent_moe_use_norm"] = true;
  t["activation_situ_beta"] = c.situ_beta;
  t["activation_situ_linear_beta"] = c.situ_linear_beta;
  t["num_nextn_predict_layers"] = 0;
  json kda = json::array(), full = json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) (c.layer_is_kda(l) ? kda : full).push_back(l + 1);
  t["linear_attn_config"] = {{"kda_layers", kda},
                             {"full_attn_layers", full},
                             {"num_heads", c.kda_heads},
                             {"head_dim", c.kda_head_dim},
                             {"short_conv_kernel_size", c.kda_conv_kernel},
                             {"gate_lower_bound", c.kda_gate_lower_bound},
                             {"use_full_rank_gate", true}};
  if (c.mxfp4_experts) {
    // As published: only the routed experts are MXFP4.
    const json weights = {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32},
                          {"symmetric", true}};
    t["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "mxfp4-pack-quantized"},
        {"config_groups",
         {{"group_0",
           {{"format", "mxfp4-pack-quantized"}, {"targets", {"Linear"}}, {"weights", weights},
            {"input_activations", nullptr}}}}},
        {"ignore",
         {"re:.*shared_experts.*", "lm_head", "re:.*self_attn.*", "re:.*\\.mlp\\..*",
          "re:.*routed_expert_(down|up)_proj.*", "re:.*_res_proj.*", "re:vision_tower.*", "re:mm_projector.*"}}};
  }
  json top = {{"architectures", {"KimiK3ForConditionalGeneration"}},
              {"model_type", "kimi_k3"},
              {"tie_word_embeddings", c.tie_word_embeddings}};
  for (const char* k : {"bos_token_id", "eos_token_id", "transformers_version"})
    if (j.contains(k)) top[k] = j[k];
  top["text_config"] = std::move(t);
  j = std::move(top);
}

bool layer_is_moe(const ModelConfig& c, int64_t l) {
  return l >= c.first_k_dense_replace && l % c.moe_layer_freq == 0;
}

AttentionWidths attention_widths(const ModelConfig& c) {
  const AttentionWidths a = kda_attention_widths(c), b = mla_attention_widths(c);
  return {std::max(a.q, b.q),   std::max(a.k, b.k),   std::max(a.v, b.v),       std::max(a.out, b.out),
          std::max(a.q_latent, b.q_latent), std::max(a.kv, b.kv), std::max(a.gate, b.gate), std::max(a.beta, b.beta)};
}

void declare_layer(const ModelConfig& c, int64_t l, Naming, std::vector<TensorKind>& out) {
  out.insert(out.end(), {AttnNorm, FfnNorm, AttnResProj, AttnResNorm, FfnResProj, FfnResNorm, AttnGate, AttnOut});
  if (c.layer_is_kda(l))
    out.insert(out.end(), {AttnQ, AttnK, AttnV, KdaQConv, KdaKConv, KdaVConv, KdaALog, KdaDtBias, KdaFA, KdaFB,
                           KdaBeta, KdaONorm});
  else
    out.insert(out.end(), {AttnQA, AttnQANorm, AttnQB, AttnKvAMqa, AttnKvANorm, AttnKvB});
  if (!c.layer_is_moe(l))
    out.insert(out.end(), {FfnGate, FfnUp, FfnDown});
  else
    out.insert(out.end(), {MoeRouter, MoeRouterBias, LatentDown, LatentNorm, LatentUp, MoeGateShexp, MoeUpShexp,
                           MoeDownShexp, ExpW1, ExpW2, ExpW3});
}

ExpertActivation situ(const ModelConfig& c) {
  ExpertActivation a;
  a.kind = ExpertActivation::Kind::Situ;
  a.beta = static_cast<float>(c.situ_beta);
  a.linear_beta = static_cast<float>(c.situ_linear_beta);
  return a;
}

Layer bind_layer(WeightBinder& w, const ModelConfig& c, int64_t l, ExpertProvider& experts) {
  Layer layer;
  layer.attn_norm = w.vector(tn(Naming::Hf, AttnNorm, "weight", l), c.hidden_size);
  layer.mlp_norm = w.vector(tn(Naming::Hf, FfnNorm, "weight", l), c.hidden_size);
  layer.attention = c.layer_is_kda(l) ? make_kda_attention(w, c, l) : make_mla_attention(w, c, l);
  layer.attn_res_query = depth_query(w, c, AttnResNorm, AttnResProj, l);
  layer.mlp_res_query = depth_query(w, c, FfnResNorm, FfnResProj, l);
  if (!c.layer_is_moe(l)) {
    layer.dense = SwiGlu::bind(w, FfnGate, FfnUp, FfnDown, l, c.hidden_size, c.intermediate_size);
    layer.dense->activation = situ(c);
    return layer;
  }
  std::optional<SwiGlu> shared;
  if (c.n_shared_experts > 0) {
    shared = SwiGlu::bind(w, MoeGateShexp, MoeUpShexp, MoeDownShexp, l, c.hidden_size,
                          c.moe_intermediate_size * c.n_shared_experts);
    shared->activation = situ(c);
  }
  LatentProjection latent;
  latent.down = w.resident(w.linear(hf_name(LatentDown, l), c.latent_width, c.hidden_size));
  latent.up = w.resident(w.linear(hf_name(LatentUp, l), c.hidden_size, c.latent_width));
  latent.norm = w.vector(tn(Naming::Hf, LatentNorm, "weight", l), c.latent_width);
  latent.eps = static_cast<float>(c.rms_norm_eps);
  layer.moe = std::make_unique<MoeBlock>(
      l, c, make_sigmoid_group_router(w, c, hf_name(MoeRouter, l), hf_name(MoeRouterBias, l)), std::move(shared),
      experts, situ(c), latent);
  return layer;
}

// Routed experts: bf16 "<e>.w{1,2,3}.weight", or MXFP4 "weight_packed" +
// "weight_scale" as the published checkpoint stores them (per tensor, by what
// is there). w1 gate, w3 up: [width × latent]; w2 down: [latent × width].
ExpertBindFn bind_experts(const TensorSource&, WeightBinder& binder, const ModelConfig& c) {
  return [&binder, &c](int64_t l, int64_t e) {
    auto matrix = [&](TensorKind kind, int64_t out, int64_t in) { return binder.linear(hf_name(kind, l, e), out, in); };
    ExpertWeights x;
    x.gate = matrix(ExpW1, c.moe_intermediate_size, c.latent_width);
    x.up = matrix(ExpW3, c.moe_intermediate_size, c.latent_width);
    x.down = matrix(ExpW2, c.latent_width, c.moe_intermediate_size);
    return x;
  };
}

constexpr TensorKind kModelTensors[] = {OutputResProj, OutputResNorm};
constexpr const char* kModelTypes[] = {"kimi_k3"};
constexpr const char* kHiddenActs[] = {"situ"};

}  // namespace

const ArchSpec& kimi_k3_arch() {
  static const ArchSpec spec{
      .arch = Arch::KimiK3,
      .name = "kimi_k3",
      .hf_model_types = kModelTypes,
      .gguf_arch = "kimi-k3",
      .hf = {.compressed_tensors = true,
             .compressed_mxfp4_experts = true,
             .text_config = true,
             .hidden_acts = kHiddenActs,
             .tensor_prefix = "language_model.",
             .read = read_hf,
             .validate = validate_hf,
             .write = write_hf},
      .gguf = {},  // strata reads no GGUF of it
      .layer_is_moe = layer_is_moe,
      .attention_scale = mla_attention_scale,
      .cache_widths = mla_cache_widths,
      .attention_widths = attention_widths,
      .model_tensors = kModelTensors,
      .gguf_tensors = {},
      .declare_layer = declare_layer,
      .bind_layer = bind_layer,
      .bind_experts = bind_experts,
  };
  return spec;
}

}  // namespace strata
