#include "model/gguf_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "formats/safetensors.h"  // quote_name
#include "model/arch.h"
#include "model/gguf_config.h"
#include "model/tensor_names.h"
#include "util/error.h"

namespace strata {

namespace {

using nlohmann::json;

using Meta = GgufKeys;

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
void read_rope(const Meta& m, const ArchSpec& spec, int64_t context, json& j) {
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
  if (!spec.gguf.rope_truncate) r["truncate"] = false;
  if (const GgufValue* v = f.find_value(m.key("rope.scaling.yarn_log_multiplier"))) {
    double mul = *m.number(m.key("rope.scaling.yarn_log_multiplier"));
    if (spec.gguf.yarn_log_multiplier_is_scaled) {
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

double decimal_of_f32(float f) {
  if (!std::isfinite(f)) return f;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  std::from_chars(buf, r.ptr, d);
  return d;
}

std::optional<double> GgufKeys::number(const std::string& k) const {
  const GgufValue* v = f_.find_value(k);
  if (!v) return std::nullopt;
  if (v->type == GgufType::F32) return decimal_of_f32(static_cast<float>(v->f));
  return f_.find_float(k);  // f64 or integer; throws on other types
}

std::optional<int64_t> GgufKeys::integer(const std::string& k) const {
  const GgufValue* v = f_.find_value(k);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY) return f_.get_int(k);
  std::vector<int64_t> all = f_.get_int_array(k);
  if (all.empty()) f_.fail("metadata " + quote_name(k) + " is an empty array");
  for (int64_t x : all)
    if (x != all[0]) f_.fail("metadata " + quote_name(k) + " differs between layers, which strata does not support");
  return all[0];
}

int64_t GgufKeys::required(const std::string& k) const {
  auto v = integer(k);
  if (!v) f_.fail("metadata " + quote_name(k) + " is missing");
  return *v;
}

std::string GgufConfigInput::gating_name(int64_t g) const {
  if (g == 1) return "softmax";
  if (g == 2) return "sigmoid";
  if (g == 4) return "sqrtsoftplus";
  file().fail("metadata " + quote_name(m.key("expert_gating_func")) + " is " + std::to_string(g) +
              " (known: 1 softmax, 2 sigmoid, 4 sqrtsoftplus)");
}

ModelConfig config_from_gguf(const GgufFile& file) { return config_from_gguf(file, file); }

ModelConfig config_from_gguf(const GgufFile& f, const TensorSource& tensors) {
  const std::string arch = f.architecture();
  if (arch.empty()) f.fail("metadata 'general.architecture' is missing");
  const ArchSpec* spec = arch_for_gguf(arch);
  if (!spec) f.fail("unsupported GGUF architecture '" + arch + "' (supported: " + supported_gguf_archs() + ")");
  Meta m(f, arch);
  auto has_tensor = [&](const std::string& name) { return tensors.find(name) != nullptr; };

  json j;
  j["model_type"] = spec->name;
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
  const std::string embd = tn(Naming::Gguf, TensorKind::TokenEmbd, "weight");
  if (const TensorView* e = tensors.find(embd); e && e->shape.size() == 2) {
    if (vocab && *vocab != e->shape[0])
      f.fail("metadata " + quote_name(m.key("vocab_size")) + " is " + std::to_string(*vocab) +
             " but " + embd + " has " + std::to_string(e->shape[0]) + " rows");
    vocab = e->shape[0];
  }
  if (!vocab) vocab = f.find_array_length("tokenizer.ggml.tokens");
  if (!vocab) f.fail("cannot tell the vocabulary size: no " + embd + ", " + m.key("vocab_size") + " or tokenizer.ggml.tokens");
  j["vocab_size"] = *vocab;
  j["tie_word_embeddings"] = !has_tensor(tn(Naming::Gguf, TensorKind::Output, "weight"));
  read_tokens(m, j);
  read_rope(m, *spec, context, j);

  const int64_t experts = m.required(m.key("expert_count"));
  std::optional<int64_t> gating = m.integer(m.key("expert_gating_func"));
  if (auto norm = f.find_bool(m.key("expert_weights_norm")))
    j["norm_topk_prob"] = *norm;
  else if (spec->gguf.norm_topk_prob_default)
    j["norm_topk_prob"] = *spec->gguf.norm_topk_prob_default;

  spec->gguf.read(GgufConfigInput{m, tensors, heads, layers, expert_ff, experts, gating}, j);
  return ModelConfig::from_json(j, f.path());
}

// ---------------------------------------------------------------------------

namespace {

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
  const ArchSpec* spec = arch_for_gguf(arch);
  if (!spec)
    throw Error(describe_ + ": unsupported GGUF architecture '" + arch + "' (supported: " + supported_gguf_archs() + ")");
  auto fail = [&](const std::string& gguf, const std::string& what) {
    throw Error(describe_ + ": tensor " + quote_name(gguf) + " " + what);
  };

  for (const std::string& g : tensors.names()) {
    const TensorView& t = tensors.get(g);
    // The kinds this architecture's GGUF files hold, each under its table
    // name; top-level tensors (token_embd, output, ...) only as ".weight".
    const auto id = parse_tensor_name(g, Naming::Gguf, spec->gguf_tensors);
    if (!id || !(id->suffix == ".weight" || (id->suffix == ".bias" && id->layer >= 0))) {
      unmapped_.push_back(g);
      continue;
    }
    const std::string suffix(id->suffix.substr(1));
    const int64_t l = id->layer;
    auto hf = [&](TensorKind k, int64_t e = -1) { return tn(Naming::Hf, k, suffix, l, e); };

    switch (tensor_name(id->kind).layout) {
      case Layout::Same:
      case Layout::NoSuffix:
        add(hf(id->kind), t, g);
        break;
      case Layout::StackedExperts:
      case Layout::StackedGateUp: {
        // Weights are [experts, out, in]; biases (gpt-oss) [experts, out].
        const int64_t E = c.n_routed_experts;
        const size_t dims = suffix == "bias" ? 2 : 3;
        if (t.shape.size() != dims || t.shape[0] != E)
          fail(g, "has shape " + shape_str(t.shape) + " but the config has " + std::to_string(E) + " experts (expected " +
                      (dims == 3 ? "[experts, out, in])" : "[experts, out])"));
        std::vector<int64_t> shape(t.shape.begin() + 1, t.shape.end());
        const uint64_t per_expert = t.nbytes / static_cast<uint64_t>(E);
        if (tensor_name(id->kind).layout == Layout::StackedExperts) {
          for (int64_t e = 0; e < E; ++e) add(hf(id->kind, e), slice(t, shape, e * per_expert, per_expert), g);
        } else {
          if (shape[0] % 2 != 0) fail(g, "has shape " + shape_str(t.shape) + " with an odd number of gate+up rows");
          shape[0] /= 2;
          for (int64_t e = 0; e < E; ++e) {
            const uint64_t half = per_expert / 2;
            add(hf(TensorKind::FfnGateExps, e), slice(t, shape, e * per_expert, half), g);
            add(hf(TensorKind::FfnUpExps, e), slice(t, shape, e * per_expert + half, half), g);
          }
        }
        break;
      }
      case Layout::FusedQkv: {
        const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
        const bool bias = suffix == "bias";
        if (t.shape.size() != (bias ? 1u : 2u) || t.shape[0] != q + 2 * kv)
          fail(g, "has shape " + shape_str(t.shape) + " but the config implies " + std::to_string(q + 2 * kv) +
                      " rows (q " + std::to_string(q) + " + k " + std::to_string(kv) + " + v " + std::to_string(kv) + ")");
        const uint64_t row = t.nbytes / static_cast<uint64_t>(t.shape[0]);  // bytes per output row (or element)
        auto part = [&](TensorKind k, int64_t row0, int64_t rows) {
          std::vector<int64_t> shape = bias ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, t.shape[1]};
          add(hf(k), slice(t, shape, static_cast<uint64_t>(row0) * row, static_cast<uint64_t>(rows) * row), g);
        };
        part(TensorKind::AttnQ, 0, q);
        part(TensorKind::AttnK, q, kv);
        part(TensorKind::AttnV, q + kv, kv);
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
