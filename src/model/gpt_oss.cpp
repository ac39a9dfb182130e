// gpt-oss: grouped-query attention with sinks and alternating sliding-window
// layers, and experts with a clamped SwiGLU whose gate and up projections are
// fused (rows interleaved gate, up, gate, up...) and carry biases. Experts
// come as MXFP4 (`*_blocks` + `*_scales`, as OpenAI ships them) or as BF16
// tensors stored [in, out] (transformers' save_pretrained). See docs/gpt_oss.md.
// Its whole description: config (config.json and GGUF "gpt-oss"), tensors,
// binding.
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>

#include "formats/gguf_writer.h"
#include "formats/safetensors.h"  // quote_name
#include "model/arch.h"
#include "model/config_reader.h"
#include "model/gguf_config.h"
#include "model/model.h"
#include "util/error.h"

namespace strata {

namespace {

using enum TensorKind;
using nlohmann::json;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

const TensorView& expect(const TensorSource& src, const std::string& name, const std::vector<int64_t>& shape,
                         std::initializer_list<DType> types) {
  const TensorView& t = src.get(name);
  if (t.shape != shape)
    throw Error(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + " but the config implies " +
                shape_str(shape));
  for (DType d : types)
    if (t.dtype == d) return t;
  throw Error(t.file + ": tensor '" + name + "' has unsupported type " + dtype_name(t.dtype));
}

float load_scalar(const TensorView& t, size_t i) {
  uint16_t h;
  switch (t.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    case DType::BF16: std::memcpy(&h, t.data + 2 * i, 2); return bf16_to_f32(h);
    default: std::memcpy(&h, t.data + 2 * i, 2); return f16_to_f32(h);
  }
}

// Binds gpt-oss experts; owns what had to be converted (biases to f32, and
// the [in, out] BF16 layout turned into rows of outputs).
class GptOssExperts {
 public:
  GptOssExperts(const TensorSource& src, const ModelConfig& c) : src_(src), c_(c), binder_(src, c) {}

  ExpertWeights bind(int64_t l, int64_t e) {
    const int64_t H = c_.hidden_size, I = c_.moe_intermediate_size;
    ExpertWeights w;
    if (src_.find(tn(Naming::Hf, FfnGateExps, "weight", l, e))) {
      // GGUF (through its HF view): gate and up de-interleaved into separate
      // per-expert tensors, each with its bias.
      w.gate = binder_.linear(hf_name(FfnGateExps, l, e), I, H, true);
      w.up = binder_.linear(hf_name(FfnUpExps, l, e), I, H, true);
      w.down = binder_.linear(hf_name(FfnDownExps, l, e), H, I, true);
      return w;
    }
    const std::string gate_up = hf_name(FfnGateUpExpsFused, l), down = hf_name(FfnDownExpsFused, l);
    w.gate_up = c_.mxfp4_experts ? binder_.mxfp4(gate_up, e, 2 * I, H) : transposed(gate_up, e, H, 2 * I);
    w.down = c_.mxfp4_experts ? binder_.mxfp4(down, e, H, I) : transposed(down, e, I, H);
    w.gate_up.bias = bias(gate_up + "_bias", e, 2 * I);
    w.down.bias = bias(down + "_bias", e, H);
    return w;
  }

 private:
  // `<name>` [E, in, out] in BF16/F16/F32: copied once into [out, in] rows,
  // the layout the kernels read (no change of precision).
  kernels::WeightMatrix transposed(const std::string& name, int64_t e, int64_t in, int64_t out) {
    const int64_t E = c_.n_routed_experts;
    const TensorView& t = expect(src_, name, {E, in, out}, {DType::BF16, DType::F16, DType::F32});
    const size_t elem = dtype_size(t.dtype);
    auto& buf = owned_bytes_.emplace_back(static_cast<size_t>(in * out) * elem);
    const uint8_t* base = t.data + static_cast<size_t>(e * in * out) * elem;
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o)
        std::memcpy(&buf[(o * in + i) * elem], base + (i * out + o) * elem, elem);
    kernels::WeightMatrix w;
    w.dtype = t.dtype;
    w.out = out;
    w.in = in;
    w.data = buf.data();
    return w;
  }

  const float* bias(const std::string& name, int64_t e, int64_t n) {
    const TensorView& t = expect(src_, name, {c_.n_routed_experts, n}, {DType::BF16, DType::F16, DType::F32});
    auto& v = owned_floats_.emplace_back(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = load_scalar(t, static_cast<size_t>(e * n + i));
    return v.data();
  }

  const TensorSource& src_;
  const ModelConfig& c_;
  WeightBinder binder_;
  std::deque<std::vector<uint8_t>> owned_bytes_;
  std::deque<std::vector<float>> owned_floats_;
};

void read_hf(const ConfigReader& r, ModelConfig& c) {
  const json& j = r.json();
  c.n_routed_experts = r.has("num_local_experts") ? r.integer("num_local_experts") : r.integer("num_experts");
  // Zero heads is refused by the common checks, after this.
  c.head_dim = r.has("head_dim") ? r.integer("head_dim") : c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
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
}

void validate_hf(const ConfigReader& r, const ModelConfig& c) {
  validate_gqa_config(r, c);
  require_positive(c.intermediate_size, r, "intermediate_size");
}

// GptOssConfig's default when the config names no rope settings.
void default_rope(const ConfigReader& r, json& config) {
  config["rope_theta"] = r.number("rope_theta", 150000.0);
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                            {"original_max_position_embeddings", 4096}, {"truncate", false}};
}

void write_hf(const ModelConfig& c, json& j) {
  j["architectures"] = {"GptOssForCausalLM"};
  j["model_type"] = "gpt_oss";
  j["intermediate_size"] = c.moe_intermediate_size;
  j["num_local_experts"] = c.n_routed_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["experts_per_token"] = c.num_experts_per_tok;
  j["head_dim"] = c.head_dim;
  j["sliding_window"] = c.sliding_window.value_or(128);
  json types = json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) types.push_back(c.layer_window(l) ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["swiglu_limit"] = c.swiglu_limit;
  j["initial_context_length"] = c.rope.original_max_position_embeddings;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.9;
  if (j["rope_scaling"].is_object()) {
    j["rope_scaling"].erase("type");  // the release writes rope_type only
    j["rope_scaling"]["truncate"] = c.rope.truncate;
  }
}

void write_gguf(const ModelConfig& c, bool, GgufWriter& w) {
  auto k = [](const char* suffix) { return std::string(gpt_oss_arch().gguf_arch) + "." + suffix; };
  w.set_u32(k("attention.head_count_kv"), static_cast<uint32_t>(c.num_kv_heads));
  w.set_u32(k("attention.key_length"), static_cast<uint32_t>(c.head_dim));
  w.set_u32(k("attention.value_length"), static_cast<uint32_t>(c.head_dim));
  w.set_u32(k("attention.sliding_window"), static_cast<uint32_t>(c.sliding_window.value_or(128)));
}

void read_gguf(const GgufConfigInput& in, json& j) {
  const GgufKeys& m = in.m;
  const GgufFile& f = in.file();
  // config.json's intermediate_size is the expert width (no dense layers).
  j["intermediate_size"] = in.expert_ff;
  j["num_local_experts"] = in.experts;
  j["num_key_value_heads"] = m.integer(m.key("attention.head_count_kv"), in.heads);
  if (auto k = m.integer(m.key("attention.key_length"))) j["head_dim"] = *k;
  j["sliding_window"] = m.required(m.key("attention.sliding_window"));
  // llama.cpp: attention.sliding_window_pattern as a per-layer bool array,
  // or a period n (default 2) with layer l sliding when l % n < n − 1; so
  // layers alternate sliding, full, ... as HF's layer_types do.
  json types = json::array();
  const std::string pk = m.key("attention.sliding_window_pattern");
  const GgufValue* pv = f.find_value(pk);
  if (pv && pv->type == GgufType::ARRAY) {
    if (pv->elem_type != GgufType::BOOL || static_cast<int64_t>(pv->count) != in.layers)
      f.fail("metadata " + quote_name(pk) + " must be one bool per layer");
    for (uint64_t l = 0; l < pv->count; ++l) types.push_back(pv->element_int(l) ? "sliding_attention" : "full_attention");
  } else {
    const int64_t n = m.integer(pk, 2);
    if (n < 0) f.fail("metadata " + quote_name(pk) + " is " + std::to_string(n) + ", a negative period");
    for (int64_t l = 0; l < in.layers && l < 4096; ++l)
      types.push_back(n == 0 || l % n < n - 1 ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = types;
  j["attention_bias"] = in.has_tensor(tn(Naming::Gguf, AttnQ, "bias", 0)) ||
                        in.has_tensor(tn(Naming::Gguf, AttnQkv, "bias", 0));
  j["swiglu_limit"] = 7.0;  // llama.cpp hard-codes gpt-oss's clamp (and alpha 1.702)
}

// gpt-oss's router is ffn_gate_inp in GGUF but mlp.router in HF (FfnRouter).
constexpr TensorKind kGgufTensors[] = {
    TokenEmbd, OutputNorm,  Output,    AttnNorm,    FfnNorm,       AttnOut, FfnRouter, FfnGate,
    FfnUp,     FfnDown,     FfnGateExps, FfnUpExps, FfnDownExps, FfnGateUpExps, AttnQ, AttnK,
    AttnV,     AttnQkv,     AttnSinks, PostAttnNorm,
};

void declare_layer(const ModelConfig&, int64_t, Naming naming, std::vector<TensorKind>& out) {
  out.insert(out.end(), {AttnNorm, AttnQ, AttnK, AttnV, AttnOut, AttnSinks});
  if (naming == Naming::Gguf)
    out.insert(out.end(), {PostAttnNorm, FfnRouter, FfnGateExps, FfnUpExps, FfnDownExps});
  else
    out.insert(out.end(), {FfnNorm, FfnRouter, FfnGateUpExpsFused, FfnDownExpsFused});
}

Layer bind_layer(WeightBinder& w, const ModelConfig& c, int64_t l, ExpertProvider& experts) {
  Layer layer;
  layer.attn_norm = w.vector(tn(Naming::Hf, AttnNorm, "weight", l), c.hidden_size);
  layer.mlp_norm = w.vector(tn(Naming::Hf, FfnNorm, "weight", l), c.hidden_size);
  layer.attention = make_gqa_attention(w, c, l, {});
  ExpertActivation act;
  act.kind = ExpertActivation::Kind::ClampedSwiGlu;
  act.limit = static_cast<float>(c.swiglu_limit);
  layer.moe = std::make_unique<MoeBlock>(l, c, make_topk_softmax_router(w, c, hf_name(FfnRouter, l)), std::nullopt,
                                         experts, act);
  return layer;
}

// gpt-oss keeps its experts in fused 3-D tensors rather than one tensor each.
ExpertBindFn bind_experts(const TensorSource& src, WeightBinder&, const ModelConfig& c) {
  auto experts = std::make_shared<GptOssExperts>(src, c);
  return [experts](int64_t l, int64_t e) { return experts->bind(l, e); };
}

// Every layer routes: gpt-oss has no dense layers.
bool layer_is_moe(const ModelConfig&, int64_t) { return true; }

constexpr const char* kModelTypes[] = {"gpt_oss"};

}  // namespace

const ArchSpec& gpt_oss_arch() {
  static const ArchSpec spec{
      .arch = Arch::GptOss,
      .name = "gpt_oss",
      .hf_model_types = kModelTypes,
      .gguf_arch = "gpt-oss",
      .hf = {.expert_width_is_intermediate = true,
             .mxfp4_experts = true,
             .default_rope = default_rope,
             .read = read_hf,
             .validate = validate_hf,
             .write = write_hf},
      // Its config.json says "truncate": false (not recorded in GGUF); no
      // expert_weights_norm: softmax over the chosen logits.
      .gguf = {.rope_truncate = false, .norm_topk_prob_default = std::nullopt, .read = read_gguf, .write = write_gguf},
      .layer_is_moe = layer_is_moe,
      .attention_scale = gqa_attention_scale,
      .cache_widths = gqa_cache_widths,
      .attention_widths = gqa_attention_widths,
      .fused_gate_up = true,
      .expert_biases = true,
      .gguf_tensors = kGgufTensors,
      .declare_layer = declare_layer,
      .bind_layer = bind_layer,
      .bind_experts = bind_experts,
  };
  return spec;
}

}  // namespace strata
