#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "model/config_reader.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace {

using nlohmann::json;

using Reader = ConfigReader;

// Checkpoints spell the rope settings two ways: the released DeepSeek-V3 and
// Kimi-K2 config.json use "rope_scaling" (with "type") beside a top-level
// "rope_theta"; newer transformers writes "rope_parameters" (with
// "rope_type" and "rope_theta" inside). Accept both.
RopeConfig read_rope(const json& j, const Reader& top, int64_t max_pos) {
  RopeConfig r;
  r.theta = top.number("rope_theta", 10000.0);
  r.partial_rotary_factor = top.number("partial_rotary_factor", 1.0);
  const json* p = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) p = &j["rope_parameters"];
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) p = &j["rope_scaling"];
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null() && !j["rope_scaling"].is_object())
    top.fail("field 'rope_scaling' must be an object or null");
  r.original_max_position_embeddings = max_pos;
  if (!p) return r;
  Reader rr(*p, top.source() + " (rope settings)");
  {
    r.type = rr.string("rope_type", rr.string("type", "default"));
    r.theta = rr.number("rope_theta", r.theta);
    r.partial_rotary_factor = rr.number("partial_rotary_factor", r.partial_rotary_factor);
    if (r.type == "default") return r;
    if (r.type != "yarn") top.fail("unsupported rope type '" + r.type + "' (supported: default, yarn)");
    r.original_max_position_embeddings = rr.integer("original_max_position_embeddings", max_pos);
    if (rr.has("factor"))
      r.factor = rr.number("factor", 1.0);
    else
      r.factor = static_cast<double>(max_pos) / static_cast<double>(r.original_max_position_embeddings);
    if (rr.has("attention_factor")) r.attention_factor = rr.number("attention_factor", 1.0);
    r.mscale = rr.number("mscale", 0.0);
    r.mscale_all_dim = rr.number("mscale_all_dim", 0.0);
    // transformers treats a 0/null beta as "use the default".
    r.beta_fast = rr.number("beta_fast", 0.0);
    if (r.beta_fast == 0.0) r.beta_fast = 32.0;
    r.beta_slow = rr.number("beta_slow", 0.0);
    if (r.beta_slow == 0.0) r.beta_slow = 1.0;
    r.truncate = rr.boolean("truncate", true);
  }
  if (!(r.factor > 0.0)) top.fail("rope scaling factor must be positive");
  if (r.original_max_position_embeddings <= 0) top.fail("rope original_max_position_embeddings must be positive");
  return r;
}

// Token ids are read as integers and checked against the vocabulary (in
// validate), never narrowed on the way: 2^32 + 5 must not become 5.
void read_token_ids(const json& j, const Reader& r, ModelConfig& c) {
  auto id = [&](const json& v, const char* key) -> int32_t {
    const std::optional<int64_t> i = json_int64(v);
    if (!i || *i < 0 || *i > INT32_MAX) r.fail(std::string(key) + " " + v.dump() + " is not a token id");
    return static_cast<int32_t>(*i);
  };
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = id(j["bos_token_id"], "bos_token_id");
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(id(e, "eos_token_id"));
    if (e.is_array())
      for (const json& v : e)
        if (v.is_number_integer()) c.eos_token_ids.push_back(id(v, "eos_token_id"));
  }
}

// compressed-tensors: the format at the top of the config or only in its
// config groups (then every group's must agree); each group's weights must
// be what the binder reads. Which tensors are quantized (the `ignore` list
// and the groups' targets) is not interpreted: WeightBinder::linear decides
// per tensor by what is stored.
void read_compressed_tensors(const json& q, const Reader& top, ModelConfig& c) {
  std::string format = q.contains("format") && q["format"].is_string() ? q["format"].get<std::string>() : "";
  const json empty = json::object();
  const json& groups = q.contains("config_groups") && q["config_groups"].is_object() ? q["config_groups"] : empty;
  for (const auto& [name, g] : groups.items()) {
    if (!g.is_object()) top.fail("quantization_config.config_groups." + name + " must be an object");
    const std::string own = g.contains("format") && g["format"].is_string() ? g["format"].get<std::string>() : "";
    if (format.empty() || format == "mixed-precision") format = own;
    if (!own.empty() && own != format)
      top.fail("quantization_config: config group '" + name + "' has format '" + own + "', another group '" + format +
               "' (one format per checkpoint is supported)");
  }
  const bool int4 = format == "pack-quantized", mxfp4 = format == "mxfp4-pack-quantized";
  if (!int4 && !mxfp4)
    top.fail("unsupported compressed-tensors format '" + format + "' (supported: pack-quantized, mxfp4-pack-quantized)");
  for (const auto& item : groups.items()) {
    // Not a structured binding: the lambda below captures the name (clang 14 cannot).
    const std::string& name = item.key();
    const json& g = item.value();
    if (!g.contains("weights") || !g["weights"].is_object()) continue;
    const json& w = g["weights"];
    auto field = [&](const char* key, const json& want) {
      if (w.contains(key) && !w[key].is_null() && w[key] != want)
        top.fail("quantization_config.config_groups." + name + ".weights." + key + " is " + w[key].dump() + "; " +
                 format + " needs " + want.dump());
    };
    field("num_bits", 4);
    field("type", int4 ? "int" : "float");
    field("symmetric", true);
    if (mxfp4) field("group_size", 32);
    if (int4 && w.contains("group_size") &&
        (!w["group_size"].is_number_integer() || w["group_size"].get<int64_t>() % 32 != 0 ||
         w["group_size"].get<int64_t>() <= 0))
      top.fail("quantization_config.config_groups." + name + ".weights.group_size must be a positive multiple of 32");
  }
  c.compressed_format = format;
  c.mxfp4_experts = mxfp4;
}

void read_quantization(const json& j, const Reader& top, const ArchSpec& spec, ModelConfig& c) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return;
  const json& q = j["quantization_config"];
  if (!q.is_object()) top.fail("field 'quantization_config' must be an object");
  std::string method = q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"] : "";
  if (method == "mxfp4" && spec.hf.mxfp4_experts) {
    c.mxfp4_experts = true;
    return;
  }
  if (method == "compressed-tensors" && spec.hf.compressed_tensors) {
    read_compressed_tensors(q, top, c);
    return;
  }
  if (method != "fp8")
    top.fail("unsupported quantization_config.quant_method '" + method + "' (supported: fp8" +
             std::string(spec.hf.compressed_tensors ? ", compressed-tensors" : "") +
             (spec.hf.mxfp4_experts ? ", mxfp4)" : ")"));
  std::string fmt = q.value("fmt", "e4m3");
  if (fmt != "e4m3") top.fail("unsupported fp8 format '" + fmt + "' (supported: e4m3)");
  std::array<int64_t, 2> block{128, 128};
  if (q.contains("weight_block_size")) {
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
      top.fail("quantization_config.weight_block_size must be two positive integers");
    block = {b[0].get<int64_t>(), b[1].get<int64_t>()};
  }
  c.fp8_block = block;
}

// Every integer size in [0, cap]: the caps are far past any real model's,
// yet small enough that the products the model forms from them (a tensor's
// elements, a cache row, a step's buffers) fit int64. Absurd sizes would
// otherwise fail later as allocation errors, or overflow silently. Called
// after the architecture's checks, so a negative size gets their message.
void check_sizes(const ModelConfig& c, const Reader& r) {
  constexpr int64_t kWidth = 1 << 20, kHeadWidth = 1 << 16, kHeads = 1 << 14, kLayers = 4096, kExperts = 1 << 16,
                    kPositions = int64_t{1} << 30;
  auto size_in = [&](int64_t v, int64_t cap, const char* name) {
    require(v >= 0 && v <= cap, r,
            std::string(name) + " is " + std::to_string(v) + "; it must be between 0 and " + std::to_string(cap));
  };
  size_in(c.vocab_size, 1 << 24, "vocab_size");
  size_in(c.hidden_size, kWidth, "hidden_size");
  size_in(c.intermediate_size, kWidth, "intermediate_size");
  size_in(c.moe_intermediate_size, kWidth, "moe_intermediate_size");
  size_in(c.num_layers, kLayers, "num_hidden_layers");
  size_in(c.num_heads, kHeads, "num_attention_heads");
  size_in(c.num_kv_heads, kHeads, "num_key_value_heads");
  size_in(c.head_dim, 4096, "head_dim");
  size_in(c.max_position_embeddings, kPositions, "max_position_embeddings");
  size_in(c.rope.original_max_position_embeddings, kPositions, "rope original_max_position_embeddings");
  size_in(c.n_routed_experts, kExperts, "number of routed experts");
  size_in(c.num_experts_per_tok, kExperts, "num_experts_per_tok");
  size_in(c.n_shared_experts, 1024, "number of shared experts");
  size_in(c.n_group, kExperts, "n_group");
  size_in(c.topk_group, kExperts, "topk_group");
  size_in(c.first_k_dense_replace, kLayers, "first_k_dense_replace");
  size_in(c.moe_layer_freq, kLayers, "moe_layer_freq");
  size_in(c.decoder_sparse_step, kLayers, "decoder_sparse_step");
  size_in(c.q_lora_rank.value_or(0), kWidth, "q_lora_rank");
  size_in(c.kv_lora_rank, kWidth, "kv_lora_rank");
  size_in(c.qk_rope_head_dim, kHeadWidth, "qk_rope_head_dim");
  size_in(c.qk_nope_head_dim, kHeadWidth, "qk_nope_head_dim");
  size_in(c.v_head_dim, kHeadWidth, "v_head_dim");
  size_in(c.num_nextn_predict_layers, 16, "num_nextn_predict_layers");
  size_in(c.sliding_window.value_or(0), kPositions, "sliding_window");
  size_in(c.kda_heads, kHeads, "linear_attn_config.num_heads");
  size_in(c.kda_head_dim, kHeadWidth, "linear_attn_config.head_dim");
  size_in(c.kda_conv_kernel, 1024, "linear_attn_config.short_conv_kernel_size");
  size_in(c.attn_res_block_size, kLayers, "attn_res_block_size");
  size_in(c.latent_width, kWidth, "routed_expert_hidden_size");
  if (c.fp8_block) {
    size_in((*c.fp8_block)[0], kWidth, "quantization_config.weight_block_size[0]");
    size_in((*c.fp8_block)[1], kWidth, "quantization_config.weight_block_size[1]");
  }
}

void validate(const ModelConfig& c, const Reader& r, const ArchSpec& spec) {
  auto positive = [&](int64_t v, const char* name) { require_positive(v, r, name); };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.num_heads, "num_attention_heads");
  positive(c.num_kv_heads, "num_key_value_heads");
  require(c.num_heads % c.num_kv_heads == 0, r, "num_attention_heads must be a multiple of num_key_value_heads");
  positive(c.n_routed_experts, "number of routed experts");
  positive(c.num_experts_per_tok, "num_experts_per_tok");
  require(c.num_experts_per_tok <= c.n_routed_experts, r, "num_experts_per_tok exceeds the number of experts");
  positive(c.moe_intermediate_size, "moe_intermediate_size");
  // Every real number that enters arithmetic: finite and in a range where
  // the maths means something (NaN fails every comparison, so each check is
  // written to be false for it). Out of range, logits come out non-finite
  // and greedy decoding would quietly pick token 0.
  auto in_range = [&](double v, double lo, double hi, const std::string& name) {
    require(std::isfinite(v) && v >= lo && v <= hi, r,
            name + " is " + std::to_string(v) + "; it must be a finite number in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  };
  in_range(c.rms_norm_eps, 0.0, 1.0, "rms_norm_eps");
  in_range(c.mla_norm_eps, 0.0, 1.0, "the MLA norms' eps");
  in_range(c.routed_scaling_factor, 1e-6, 1e6, "routed_scaling_factor");
  in_range(c.swiglu_limit, 1e-6, 1e6, "swiglu_limit");
  in_range(c.rope.theta, 1e-6, 1e30, "rope_theta");
  in_range(c.rope.factor, 1e-6, 1e9, "the rope scaling factor");
  in_range(c.rope.partial_rotary_factor, 0.0, 1.0, "partial_rotary_factor");
  in_range(c.rope.mscale, -1e6, 1e6, "rope mscale");
  in_range(c.rope.mscale_all_dim, -1e6, 1e6, "rope mscale_all_dim");
  in_range(c.rope.beta_fast, -1e6, 1e6, "rope beta_fast");
  in_range(c.rope.beta_slow, -1e6, 1e6, "rope beta_slow");
  if (c.rope.attention_factor) in_range(*c.rope.attention_factor, 1e-6, 1e6, "rope attention_factor");
  in_range(c.situ_beta, 0.0, 1e6, "activation_situ_beta");
  in_range(c.situ_linear_beta, 0.0, 1e6, "activation_situ_linear_beta");
  in_range(c.kda_gate_lower_bound, -1e6, 0.0, "gate_lower_bound");
  auto token = [&](int32_t id, const char* key) {
    require(id < c.vocab_size, r,
            std::string(key) + " " + std::to_string(id) + " is outside the vocabulary (vocab_size " +
                std::to_string(c.vocab_size) + ")");
  };
  if (c.bos_token_id) token(*c.bos_token_id, "bos_token_id");
  for (int32_t id : c.eos_token_ids) token(id, "eos_token_id");
  spec.hf.validate(r, c);
  check_sizes(c, r);
}

}  // namespace

std::optional<int64_t> ModelConfig::layer_window(int64_t layer) const {
  if (!sliding_window) return std::nullopt;
  if (!sliding_layers.empty() && !sliding_layers.at(layer)) return std::nullopt;
  return sliding_window;
}

const char* arch_name(Arch a) { return arch_spec(a).name; }

bool ModelConfig::layer_is_moe(int64_t layer) const { return arch_spec(arch).layer_is_moe(*this, layer); }

double ModelConfig::attention_scale() const { return arch_spec(arch).attention_scale(*this); }

ModelConfig ModelConfig::from_json(const nlohmann::json& top_json, const std::string& source) {
  Reader top(top_json, source);
  if (!top_json.is_object()) top.fail("config is not a JSON object");
  ModelConfig c;
  c.model_type = top.string("model_type", "");
  const ArchSpec* spec = arch_for_model_type(c.model_type);
  if (!spec) top.fail("unsupported model_type '" + c.model_type + "' (supported: " + supported_model_types() + ")");
  c.arch = spec->arch;
  // A multimodal wrapper keeps the text model's config in "text_config".
  if (spec->hf.text_config && (!top_json.contains("text_config") || !top_json["text_config"].is_object()))
    top.fail("a " + c.model_type + " config needs a 'text_config' object");
  const json& j = spec->hf.text_config ? top_json["text_config"] : top_json;
  Reader r(j, spec->hf.text_config ? source + " (text_config)" : source);

  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size", 0);
  c.moe_intermediate_size =
      spec->hf.expert_width_is_intermediate ? c.intermediate_size : r.integer("moe_intermediate_size");
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads = r.integer("num_attention_heads");
  c.num_kv_heads = r.integer("num_key_value_heads", c.num_heads);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = r.integer("max_position_embeddings", 4096);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.attention_bias = r.boolean("attention_bias", false);
  c.num_experts_per_tok = r.has("num_experts_per_tok")     ? r.integer("num_experts_per_tok")
                          : r.has("num_experts_per_token") ? r.integer("num_experts_per_token")
                                                            : r.integer("experts_per_token");
  c.norm_topk_prob = r.boolean("norm_topk_prob", spec->hf.norm_topk_prob_default);
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu" && std::find(spec->hf.hidden_acts.begin(), spec->hf.hidden_acts.end(), act) == spec->hf.hidden_acts.end())
    r.fail("unsupported hidden_act '" + act + "' for " + c.model_type);
  if (c.max_position_embeddings <= 0) r.fail("max_position_embeddings must be positive");
  if (spec->hf.default_rope && !r.has("rope_scaling") && !r.has("rope_parameters")) {
    nlohmann::json patched = j;
    spec->hf.default_rope(r, patched);
    c.rope = read_rope(patched, Reader(patched, source), c.max_position_embeddings);
  } else {
    c.rope = read_rope(j, r, c.max_position_embeddings);
  }
  read_token_ids(top_json, top, c);
  if (&j != &top_json) {
    ModelConfig inner;
    read_token_ids(j, r, inner);
    if (!c.bos_token_id) c.bos_token_id = inner.bos_token_id;
    if (c.eos_token_ids.empty()) c.eos_token_ids = inner.eos_token_ids;
  }
  read_quantization(j.contains("quantization_config") ? j : top_json, r, *spec, c);
  spec->hf.read(r, c);
  validate(c, r, *spec);
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open");
  return from_json(read_json_file(path), path);
}

}  // namespace strata
