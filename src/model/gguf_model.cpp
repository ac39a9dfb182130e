#include "model/gguf_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "formats/safetensors.h"  // quote_name
#include "util/error.h"

namespace strata {

namespace {

using nlohmann::json;

// The shortest decimal that rounds to f, as a double: the converter stored
// f32(x) for a decimal x from config.json, and this gives x back.
double decimal_of_f32(float f) {
  if (!std::isfinite(f)) return f;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  std::from_chars(buf, r.ptr, d);
  return d;
}

// Metadata access with the architecture prefix and the f32 decimal recovery.
class Meta {
 public:
  Meta(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  const GgufFile& file() const { return f_; }
  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  std::optional<double> number(const std::string& k) const {
    const GgufValue* v = f_.find_value(k);
    if (!v) return std::nullopt;
    if (v->type == GgufType::F32) return decimal_of_f32(static_cast<float>(v->f));
    return f_.find_float(k);  // f64 or integer; throws on other types
  }
  double number(const std::string& k, double fallback) const { return number(k).value_or(fallback); }

  // An integer, or a per-layer array of integers that must all be equal
  // (llama.cpp's get_key_or_arr); nullopt if absent.
  std::optional<int64_t> integer(const std::string& k) const {
    const GgufValue* v = f_.find_value(k);
    if (!v) return std::nullopt;
    if (v->type != GgufType::ARRAY) return f_.get_int(k);
    std::vector<int64_t> all = f_.get_int_array(k);
    if (all.empty()) f_.fail("metadata " + quote_name(k) + " is an empty array");
    for (int64_t x : all)
      if (x != all[0]) f_.fail("metadata " + quote_name(k) + " differs between layers, which strata does not support");
    return all[0];
  }
  int64_t integer(const std::string& k, int64_t fallback) const { return integer(k).value_or(fallback); }
  int64_t required(const std::string& k) const {
    auto v = integer(k);
    if (!v) f_.fail("metadata " + quote_name(k) + " is missing");
    return *v;
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

void read_tokens(const Meta& m, json& j) {
  const GgufFile& f = m.file();
  if (auto bos = f.find_u32("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *bos;
  std::vector<int64_t> eos;
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto id = f.find_u32(k))
      if (std::find(eos.begin(), eos.end(), *id) == eos.end()) eos.push_back(*id);
  if (eos.size() == 1) j["eos_token_id"] = eos[0];
  if (eos.size() > 1) j["eos_token_id"] = eos;
}

// rope_theta and rope_scaling as config.json spells them (see the header).
void read_rope(const Meta& m, bool deepseek, bool gpt_oss, int64_t context, json& j) {
  const GgufFile& f = m.file();
  j["rope_theta"] = m.number(m.key("rope.freq_base"), 10000.0);
  std::string type = "none";
  if (auto t = f.find_string(m.key("rope.scaling.type"))) type = std::string(*t);
  if (type == "none") return;
  if (type != "yarn")
    f.fail("metadata " + quote_name(m.key("rope.scaling.type")) + " is " + quote_name(type) + "; supported: none, yarn");
  auto factor = m.number(m.key("rope.scaling.factor"));
  if (!factor || !(*factor > 0.0))
    f.fail("metadata " + quote_name(m.key("rope.scaling.factor")) + " must be present and positive for YaRN");
  json r = {{"type", "yarn"},
            {"factor", *factor},
            {"original_max_position_embeddings", m.integer(m.key("rope.scaling.original_context_length"), context)}};
  if (auto b = m.number(m.key("rope.scaling.yarn_beta_fast"))) r["beta_fast"] = *b;
  if (auto b = m.number(m.key("rope.scaling.yarn_beta_slow"))) r["beta_slow"] = *b;
  if (auto a = m.number(m.key("rope.scaling.yarn_attn_factor"))) r["attention_factor"] = *a;
  // gpt-oss's config.json says "truncate": false (not recorded in GGUF; ggml
  // always truncates, so llama.cpp differs from transformers here).
  if (gpt_oss) r["truncate"] = false;
  if (const GgufValue* v = f.find_value(m.key("rope.scaling.yarn_log_multiplier"))) {
    double mul = *m.number(m.key("rope.scaling.yarn_log_multiplier"));
    if (deepseek) {
      // Undo the converter's 0.1 the way llama.cpp does (in f32), then
      // recover the decimal: 0.1f / 0.1f is exactly 1.
      double all_dim = v->type == GgufType::F32 ? decimal_of_f32(static_cast<float>(v->f) / 0.1f) : mul / 0.1;
      r["mscale"] = all_dim;
      r["mscale_all_dim"] = all_dim;
    } else {
      // Other architectures store mscale_all_dim itself (llama-context.cpp).
      r["mscale"] = 1.0;
      r["mscale_all_dim"] = mul;
    }
  }
  j["rope_scaling"] = r;
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& file) { return config_from_gguf(file, file); }

ModelConfig config_from_gguf(const GgufFile& f, const TensorSource& tensors) {
  const std::string arch = f.architecture();
  if (arch.empty()) f.fail("metadata 'general.architecture' is missing");
  const bool deepseek = arch == "deepseek2", gpt_oss = arch == "gpt-oss";
  if (!deepseek && !gpt_oss && arch != "qwen3moe")
    f.fail("unsupported GGUF architecture '" + arch + "' (supported: deepseek2, qwen3moe, gpt-oss)");
  Meta m(f, arch);
  auto has_tensor = [&](const std::string& name) { return tensors.find(name) != nullptr; };

  json j;
  j["model_type"] = deepseek ? "deepseek_v3" : gpt_oss ? "gpt_oss" : "qwen3_moe";
  j["hidden_act"] = "silu";
  const int64_t hidden = m.required(m.key("embedding_length"));
  const int64_t layers = m.required(m.key("block_count"));
  const int64_t heads = m.required(m.key("attention.head_count"));
  const int64_t context = m.required(m.key("context_length"));
  j["hidden_size"] = hidden;
  j["num_hidden_layers"] = layers;
  j["num_attention_heads"] = heads;
  j["max_position_embeddings"] = context;
  const int64_t expert_ff = m.required(m.key("expert_feed_forward_length"));
  j["moe_intermediate_size"] = expert_ff;
  j["num_experts_per_tok"] = m.required(m.key("expert_used_count"));
  if (auto ff = m.integer(m.key("feed_forward_length"))) j["intermediate_size"] = *ff;
  auto eps = m.number(m.key("attention.layer_norm_rms_epsilon"));
  if (!eps) f.fail("metadata " + quote_name(m.key("attention.layer_norm_rms_epsilon")) + " is missing");
  j["rms_norm_eps"] = *eps;

  // Vocabulary: the embedding's rows are what the weights hold.
  std::optional<int64_t> vocab = m.integer(m.key("vocab_size"));
  if (const TensorView* e = tensors.find("token_embd.weight"); e && e->shape.size() == 2) {
    if (vocab && *vocab != e->shape[0])
      f.fail("metadata " + quote_name(m.key("vocab_size")) + " is " + std::to_string(*vocab) +
             " but token_embd.weight has " + std::to_string(e->shape[0]) + " rows");
    vocab = e->shape[0];
  }
  if (!vocab) vocab = f.find_array_length("tokenizer.ggml.tokens");
  if (!vocab) f.fail("cannot tell the vocabulary size: no token_embd.weight, " + m.key("vocab_size") + " or tokenizer.ggml.tokens");
  j["vocab_size"] = *vocab;
  j["tie_word_embeddings"] = !has_tensor("output.weight");
  read_tokens(m, j);
  read_rope(m, deepseek, gpt_oss, context, j);

  const int64_t experts = m.required(m.key("expert_count"));
  std::optional<int64_t> gating = m.integer(m.key("expert_gating_func"));
  auto gating_name = [&](int64_t g) -> std::string {
    if (g == 1) return "softmax";
    if (g == 2) return "sigmoid";
    if (g == 4) return "sqrtsoftplus";
    f.fail("metadata " + quote_name(m.key("expert_gating_func")) + " is " + std::to_string(g) +
           " (known: 1 softmax, 2 sigmoid, 4 sqrtsoftplus)");
  };
  if (auto norm = f.find_bool(m.key("expert_weights_norm")))
    j["norm_topk_prob"] = *norm;
  else if (!gpt_oss)  // gpt-oss: softmax over the chosen logits, no such flag
    j["norm_topk_prob"] = !deepseek;

  if (deepseek) {
    j["n_routed_experts"] = experts;
    j["n_shared_experts"] = m.integer(m.key("expert_shared_count"), 0);
    j["n_group"] = std::max<int64_t>(1, m.integer(m.key("expert_group_count"), 1));
    j["topk_group"] = std::max<int64_t>(1, m.integer(m.key("expert_group_used_count"), 1));
    j["first_k_dense_replace"] = m.integer(m.key("leading_dense_block_count"), 0);
    j["routed_scaling_factor"] = m.number(m.key("expert_weights_scale"), 1.0);
    j["scoring_func"] = gating_name(gating.value_or(1));
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
      f.fail("metadata: key length " + std::to_string(key_len) + " leaves no room for " + std::to_string(rope) +
             " rotary dimensions");
    j["qk_nope_head_dim"] = key_len - rope;
    j["v_head_dim"] = value_len;
    j["num_key_value_heads"] = heads;  // MLA: every head has its own key
    j["attention_bias"] = has_tensor("blk.0.attn_q_a.bias") || has_tensor("blk.0.attn_q.bias");
    j["rope_interleave"] = true;
  } else if (gpt_oss) {
    // config.json's intermediate_size is the expert width (no dense layers).
    j["intermediate_size"] = expert_ff;
    j["num_local_experts"] = experts;
    j["num_key_value_heads"] = m.integer(m.key("attention.head_count_kv"), heads);
    if (auto k = m.integer(m.key("attention.key_length"))) j["head_dim"] = *k;
    j["sliding_window"] = m.required(m.key("attention.sliding_window"));
    // llama.cpp: attention.sliding_window_pattern as a per-layer bool array,
    // or a period n (default 2) with layer l sliding when l % n < n − 1; so
    // layers alternate sliding, full, ... as HF's layer_types do.
    json types = json::array();
    const std::string pk = m.key("attention.sliding_window_pattern");
    const GgufValue* pv = f.find_value(pk);
    if (pv && pv->type == GgufType::ARRAY) {
      if (pv->elem_type != GgufType::BOOL || static_cast<int64_t>(pv->count) != layers)
        f.fail("metadata " + quote_name(pk) + " must be one bool per layer");
      for (uint64_t l = 0; l < pv->count; ++l) types.push_back(pv->element_int(l) ? "sliding_attention" : "full_attention");
    } else {
      const int64_t n = m.integer(pk, 2);
      for (int64_t l = 0; l < layers && l < 4096; ++l)
        types.push_back(n == 0 || l % n < n - 1 ? "sliding_attention" : "full_attention");
    }
    j["layer_types"] = types;
    j["attention_bias"] = has_tensor("blk.0.attn_q.bias") || has_tensor("blk.0.attn_qkv.bias");
    j["swiglu_limit"] = 7.0;  // llama.cpp hard-codes gpt-oss's clamp (and alpha 1.702)
  } else {
    j["num_experts"] = experts;
    if (gating && *gating != 1)
      f.fail("metadata " + quote_name(m.key("expert_gating_func")) + " is " + gating_name(*gating) +
             "; qwen3moe routes with softmax");
    j["num_key_value_heads"] = m.integer(m.key("attention.head_count_kv"), heads);
    if (auto k = m.integer(m.key("attention.key_length"))) {
      if (auto v = m.integer(m.key("attention.value_length")); v && *v != *k)
        f.fail("metadata: key_length " + std::to_string(*k) + " and value_length " + std::to_string(*v) +
               " differ, which qwen3moe does not allow");
      j["head_dim"] = *k;
    }
    if (!j.contains("intermediate_size"))
      f.fail("metadata " + quote_name(m.key("feed_forward_length")) + " is missing");
    json dense = json::array();
    for (int64_t l = 0; l < layers && l < 4096; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      if (!has_tensor(p + "ffn_gate_inp.weight") && has_tensor(p + "ffn_gate.weight")) dense.push_back(l);
    }
    if (!dense.empty()) j["mlp_only_layers"] = dense;
    j["attention_bias"] = has_tensor("blk.0.attn_q.bias") || has_tensor("blk.0.attn_qkv.bias");
  }
  return ModelConfig::from_json(j, f.path());
}

// ---------------------------------------------------------------------------

namespace {

// NoSuffix: the HF name has no ".weight"/".bias" of its own.
enum class Kind { Plain, Experts, GateUpExperts, Qkv, NoSuffix };

struct NameRule {
  std::string_view gguf;  // the part between "blk.N." and ".weight"/".bias"
  std::string_view hf;    // after "model.layers.N."
  Kind kind = Kind::Plain;
};

constexpr NameRule kCommon[] = {
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"attn_output", "self_attn.o_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_exps", "gate_proj", Kind::Experts},
    {"ffn_up_exps", "up_proj", Kind::Experts},
    {"ffn_down_exps", "down_proj", Kind::Experts},
    {"ffn_gate_up_exps", "", Kind::GateUpExperts},
};

constexpr NameRule kDeepseek2[] = {
    {"attn_q", "self_attn.q_proj"},
    {"attn_q_a", "self_attn.q_a_proj"},
    {"attn_q_a_norm", "self_attn.q_a_layernorm"},
    {"attn_q_b", "self_attn.q_b_proj"},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
    {"attn_kv_b", "self_attn.kv_b_proj"},
    {"attn_k_b", "self_attn.k_b_proj"},
    {"attn_v_b", "self_attn.v_b_proj"},
    {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
    {"ffn_down_shexp", "mlp.shared_experts.down_proj"},
    {"exp_probs_b", "mlp.gate.e_score_correction_bias", Kind::NoSuffix},
};

constexpr NameRule kGptOss[] = {
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_qkv", "", Kind::Qkv},
    {"attn_sinks", "self_attn.sinks", Kind::NoSuffix},  // HF has no ".weight" suffix
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_gate_inp", "mlp.router"},
};

constexpr NameRule kQwen3Moe[] = {
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"attn_qkv", "", Kind::Qkv},
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

// A contiguous piece of t: `nbytes` bytes at `byte_offset`, seen as `shape`.
TensorView slice(const TensorView& t, std::vector<int64_t> shape, uint64_t byte_offset, uint64_t nbytes) {
  TensorView v;
  v.dtype = t.dtype;
  v.shape = std::move(shape);
  v.file = t.file;
  v.offset = t.offset + byte_offset;
  v.data = t.data + byte_offset;
  v.nbytes = static_cast<size_t>(nbytes);
  return v;
}

}  // namespace

GgufHfView::GgufHfView(const TensorSource& tensors, const std::string& arch, const ModelConfig& c,
                       std::string describe)
    : describe_(std::move(describe)) {
  const bool deepseek = arch == "deepseek2", gpt_oss = arch == "gpt-oss";
  if (!deepseek && !gpt_oss && arch != "qwen3moe")
    throw Error(describe_ + ": unsupported GGUF architecture '" + arch + "' (supported: deepseek2, qwen3moe, gpt-oss)");
  auto fail = [&](const std::string& gguf, const std::string& what) {
    throw Error(describe_ + ": tensor " + quote_name(gguf) + " " + what);
  };

  for (const std::string& g : tensors.names()) {
    const TensorView& t = tensors.get(g);
    if (g == "token_embd.weight") { add("model.embed_tokens.weight", t, g); continue; }
    if (g == "output_norm.weight") { add("model.norm.weight", t, g); continue; }
    if (g == "output.weight") { add("lm_head.weight", t, g); continue; }

    // blk.<N>.<base>.<weight|bias>
    std::string_view rest = g;
    const NameRule* rule = nullptr;
    std::string layer, suffix;
    if (rest.starts_with("blk.")) {
      rest.remove_prefix(4);
      size_t dot = rest.find('.');
      size_t last = rest.rfind('.');
      if (dot != std::string_view::npos && dot > 0 && last > dot &&
          std::all_of(rest.begin(), rest.begin() + dot, [](char ch) { return ch >= '0' && ch <= '9'; })) {
        layer = std::string(rest.substr(0, dot));
        std::string_view base = rest.substr(dot + 1, last - dot - 1);
        suffix = std::string(rest.substr(last + 1));
        if (suffix == "weight" || suffix == "bias") {
          for (const NameRule& r : kCommon)
            if (r.gguf == base) rule = &r;
          if (deepseek) {
            for (const NameRule& r : kDeepseek2)
              if (r.gguf == base) rule = &r;
          } else if (gpt_oss) {
            for (const NameRule& r : kGptOss)
              if (r.gguf == base) rule = &r;
          } else {
            for (const NameRule& r : kQwen3Moe)
              if (r.gguf == base) rule = &r;
          }
        }
      }
    }
    if (!rule) {
      unmapped_.push_back(g);
      continue;
    }
    const std::string p = "model.layers." + layer + ".";
    const std::string sfx = "." + suffix;

    switch (rule->kind) {
      case Kind::Plain:
        add(p + std::string(rule->hf) + sfx, t, g);
        break;
      case Kind::NoSuffix:
        add(p + std::string(rule->hf), t, g);
        break;
      case Kind::Experts:
      case Kind::GateUpExperts: {
        // Weights are [experts, out, in]; biases (gpt-oss) [experts, out].
        const int64_t E = c.n_routed_experts;
        const size_t dims = suffix == "bias" ? 2 : 3;
        if (t.shape.size() != dims || t.shape[0] != E)
          fail(g, "has shape " + shape_str(t.shape) + " but the config has " + std::to_string(E) + " experts (expected " +
                      (dims == 3 ? "[experts, out, in])" : "[experts, out])"));
        std::vector<int64_t> shape(t.shape.begin() + 1, t.shape.end());
        const uint64_t per_expert = t.nbytes / static_cast<uint64_t>(E);
        if (rule->kind == Kind::Experts) {
          for (int64_t e = 0; e < E; ++e) {
            const std::string n = p + "mlp.experts." + std::to_string(e) + "." + std::string(rule->hf) + sfx;
            add(n, slice(t, shape, e * per_expert, per_expert), g);
          }
        } else {
          if (shape[0] % 2 != 0) fail(g, "has shape " + shape_str(t.shape) + " with an odd number of gate+up rows");
          shape[0] /= 2;
          for (int64_t e = 0; e < E; ++e) {
            const std::string n = p + "mlp.experts." + std::to_string(e) + ".";
            const uint64_t half = per_expert / 2;
            add(n + "gate_proj" + sfx, slice(t, shape, e * per_expert, half), g);
            add(n + "up_proj" + sfx, slice(t, shape, e * per_expert + half, half), g);
          }
        }
        break;
      }
      case Kind::Qkv: {
        const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
        const bool bias = suffix == "bias";
        if (t.shape.size() != (bias ? 1u : 2u) || t.shape[0] != q + 2 * kv)
          fail(g, "has shape " + shape_str(t.shape) + " but the config implies " + std::to_string(q + 2 * kv) +
                      " rows (q " + std::to_string(q) + " + k " + std::to_string(kv) + " + v " + std::to_string(kv) + ")");
        const uint64_t row = t.nbytes / static_cast<uint64_t>(t.shape[0]);  // bytes per output row (or element)
        auto part = [&](const char* proj, int64_t row0, int64_t rows) {
          const std::string n = p + "self_attn." + proj + sfx;
          std::vector<int64_t> shape = bias ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, t.shape[1]};
          add(n, slice(t, shape, static_cast<uint64_t>(row0) * row, static_cast<uint64_t>(rows) * row), g);
        };
        part("q_proj", 0, q);
        part("k_proj", q, kv);
        part("v_proj", q + kv, kv);
        break;
      }
    }
  }
  std::sort(unmapped_.begin(), unmapped_.end());
}

void GgufHfView::add(const std::string& hf_name, TensorView view, const std::string& gguf_name) {
  view.name = hf_name;
  auto [it, inserted] = index_.emplace(hf_name, views_.size());
  if (!inserted)
    throw Error(describe_ + ": tensors " + quote_name(sources_[it->second]) + " and " + quote_name(gguf_name) +
                " both provide " + quote_name(hf_name));
  views_.push_back(std::move(view));
  sources_.push_back(gguf_name);
}

const TensorView* GgufHfView::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &views_[it->second];
}

std::vector<std::string> GgufHfView::names() const {
  std::vector<std::string> out;
  out.reserve(views_.size());
  for (const TensorView& v : views_) out.push_back(v.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::string GgufHfView::gguf_name(const std::string& hf_name) const {
  auto it = index_.find(hf_name);
  return it == index_.end() ? std::string() : sources_[it->second];
}

std::unique_ptr<TensorSource> hf_view_of_gguf(const GgufFile& file, const ModelConfig& config) {
  return std::make_unique<GgufHfView>(file, file.architecture(), config, file.path());
}

std::unique_ptr<TensorSource> hf_view_of_gguf(std::unique_ptr<GgufFile> file, const ModelConfig& config) {
  auto view = std::make_unique<GgufHfView>(*file, file->architecture(), config, file->path());
  view->own(std::move(file));
  return view;
}

}  // namespace strata
