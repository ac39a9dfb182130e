#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace strata {

namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, const std::string& source) : j_(j), source_(source) {}

  const std::string& source() const { return source_; }
  [[noreturn]] void fail(const std::string& what) const { throw Error(source_ + ": " + what); }

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(std::string("missing required field '") + key + "'");
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail(std::string("field '") + key + "' must be an integer");
    return v.get<int64_t>();
  }

  std::optional<int64_t> optional_integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    return integer(key);
  }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number()) fail(std::string("field '") + key + "' must be a number");
    return v.get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(std::string("field '") + key + "' must be true or false");
    return v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) fail(std::string("field '") + key + "' must be a string");
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string source_;
};

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

void read_token_ids(const json& j, ModelConfig& c) {
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = j["bos_token_id"].get<int32_t>();
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int32_t>());
    if (e.is_array())
      for (const json& v : e)
        if (v.is_number_integer()) c.eos_token_ids.push_back(v.get<int32_t>());
  }
}

void read_quantization(const json& j, const Reader& top, ModelConfig& c) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return;
  const json& q = j["quantization_config"];
  if (!q.is_object()) top.fail("field 'quantization_config' must be an object");
  std::string method = q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"] : "";
  if (method == "mxfp4" && c.arch == Arch::GptOss) {
    c.mxfp4_experts = true;
    return;
  }
  if (method != "fp8")
    top.fail("unsupported quantization_config.quant_method '" + method + "' (supported: fp8" +
             (c.arch == Arch::GptOss ? ", mxfp4)" : ")"));
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

void require(bool ok, const Reader& r, const std::string& what) {
  if (!ok) r.fail("inconsistent config: " + what);
}

void validate(const ModelConfig& c, const Reader& r) {
  auto positive = [&](int64_t v, const char* name) {
    require(v > 0, r, std::string(name) + " must be positive (got " + std::to_string(v) + ")");
  };
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
  require(c.rms_norm_eps >= 0.0, r, "rms_norm_eps must not be negative");
  // Absurd sizes would only fail later as allocation errors; catch them here.
  require(c.hidden_size <= (1 << 20) && c.vocab_size <= (1 << 24) && c.num_layers <= 4096 &&
              c.n_routed_experts <= (1 << 16),
          r, "dimensions are implausibly large");
  if (c.arch == Arch::DeepseekV3) {
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
  } else {
    positive(c.head_dim, "head_dim");
    require(c.sliding_layers.empty() || static_cast<int64_t>(c.sliding_layers.size()) == c.num_layers, r,
            "layer_types must list one entry per layer");
    require(!c.sliding_window || *c.sliding_window > 0, r, "sliding_window must be positive");
    require(c.head_dim % 2 == 0, r, "head_dim must be even");
    positive(c.decoder_sparse_step, "decoder_sparse_step");
  }
  if (c.first_k_dense_replace > 0 || c.arch != Arch::DeepseekV3) positive(c.intermediate_size, "intermediate_size");
}

}  // namespace

std::optional<int64_t> ModelConfig::layer_window(int64_t layer) const {
  if (!sliding_window) return std::nullopt;
  if (!sliding_layers.empty() && !sliding_layers.at(layer)) return std::nullopt;
  return sliding_window;
}

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::DeepseekV3: return "deepseek_v3";
    case Arch::Qwen3Moe: return "qwen3_moe";
    case Arch::GptOss: return "gpt_oss";
  }
  return "?";
}

bool ModelConfig::layer_is_moe(int64_t layer) const {
  if (arch == Arch::GptOss) return true;
  if (arch == Arch::DeepseekV3) return layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

double ModelConfig::attention_scale() const {
  if (arch != Arch::DeepseekV3) return 1.0 / std::sqrt(static_cast<double>(head_dim));
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  // DeepSeek's YaRN also sharpens the softmax: scale · mscale², with
  // mscale = 0.1 · mscale_all_dim · ln(factor) + 1.
  if (rope.type != "default" && rope.mscale_all_dim != 0.0 && rope.factor > 1.0) {
    double m = 0.1 * rope.mscale_all_dim * std::log(rope.factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  Reader r(j, source);
  if (!j.is_object()) r.fail("config is not a JSON object");
  ModelConfig c;
  c.model_type = r.string("model_type", "");
  if (c.model_type == "deepseek_v3" || c.model_type == "kimi_k2")
    c.arch = Arch::DeepseekV3;
  else if (c.model_type == "qwen3_moe")
    c.arch = Arch::Qwen3Moe;
  else if (c.model_type == "gpt_oss")
    c.arch = Arch::GptOss;
  else
    r.fail("unsupported model_type '" + c.model_type + "' (supported: deepseek_v3, kimi_k2, qwen3_moe, gpt_oss)");

  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size", 0);
  // gpt-oss has no dense layers: its intermediate_size is the expert width.
  c.moe_intermediate_size = c.arch == Arch::GptOss ? c.intermediate_size : r.integer("moe_intermediate_size");
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads = r.integer("num_attention_heads");
  c.num_kv_heads = r.integer("num_key_value_heads", c.num_heads);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = r.integer("max_position_embeddings", 4096);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.attention_bias = r.boolean("attention_bias", false);
  c.num_experts_per_tok =
      r.has("num_experts_per_tok") ? r.integer("num_experts_per_tok") : r.integer("experts_per_token");
  c.norm_topk_prob = r.boolean("norm_topk_prob", c.arch == Arch::DeepseekV3);
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.fail("unsupported hidden_act '" + act + "' (supported: silu)");
  if (c.max_position_embeddings <= 0) r.fail("max_position_embeddings must be positive");
  if (c.arch == Arch::GptOss && !r.has("rope_scaling") && !r.has("rope_parameters")) {
    // GptOssConfig's default when the config names no rope settings.
    nlohmann::json patched = j;
    patched["rope_theta"] = r.number("rope_theta", 150000.0);
    patched["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                               {"original_max_position_embeddings", 4096}, {"truncate", false}};
    c.rope = read_rope(patched, Reader(patched, source), c.max_position_embeddings);
  } else {
    c.rope = read_rope(j, r, c.max_position_embeddings);
  }
  read_token_ids(j, c);
  read_quantization(j, r, c);

  if (c.arch == Arch::DeepseekV3) {
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
    c.head_dim = c.qk_rope_head_dim;  // the rotary width, as transformers sets it
  } else if (c.arch == Arch::GptOss) {
    c.n_routed_experts = r.has("num_local_experts") ? r.integer("num_local_experts") : r.integer("num_experts");
    c.head_dim = r.has("head_dim") ? r.integer("head_dim") : c.hidden_size / c.num_heads;
    c.scoring_func = "softmax_topk";
    c.attention_sinks = true;
    c.swiglu_limit = r.number("swiglu_limit", 7.0);
    c.sliding_window = r.integer("sliding_window", 128);
    c.sliding_layers.resize(c.num_layers > 0 && c.num_layers <= 4096 ? c.num_layers : 0);
    if (r.has("layer_types")) {
      const json& t = j["layer_types"];
      if (!t.is_array()) r.fail("field 'layer_types' must be a list");
      c.sliding_layers.assign(t.size(), false);
      for (size_t i = 0; i < t.size(); ++i) {
        if (!t[i].is_string()) r.fail("field 'layer_types' must be a list of strings");
        const std::string kind = t[i].get<std::string>();
        if (kind != "sliding_attention" && kind != "full_attention")
          r.fail("layer_types: unknown attention type '" + kind + "'");
        c.sliding_layers[i] = kind == "sliding_attention";
      }
    } else {
      // transformers' default: even layers slide, odd layers see everything.
      for (size_t i = 0; i < c.sliding_layers.size(); ++i) c.sliding_layers[i] = i % 2 == 0;
    }
  } else {
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
  validate(c, r);
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
  return from_json(j, path);
}

}  // namespace strata
