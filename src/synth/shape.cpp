#include "synth/shape.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "model/arch.h"
#include "model/tensor_names.h"
#include "util/error.h"

namespace strata::synth {

namespace {

// Scaling factors and integer targets of one candidate shape.
struct Axes {
  double w = 1.0;       // width factor
  int64_t layers = 0;   // exact
  int64_t experts = 0;  // before group rounding
};

int64_t round_to(double x, int64_t align) {
  int64_t v = static_cast<int64_t>(std::llround(x / static_cast<double>(align))) * align;
  return std::max(align, v);
}

// Smallest granule the widths are rounded to: whole blocks of every type a
// matrix row may use (Q4_K/Q6_K: 256; MXFP4/Q8_0: 32; 64 keeps heads of
// FP8 128-blocks tidy).
int64_t width_align(const Quant& q) {
  auto kq = [](DType t) { return t == DType::Q4_K || t == DType::Q6_K; };
  return kq(q.trunk) || kq(q.experts) ? 256 : 64;
}

int64_t min_layers(const ModelConfig& b) { return std::min<int64_t>(b.num_layers, 2); }

int64_t min_experts(const ModelConfig& b) {
  return std::min<int64_t>(b.n_routed_experts, std::max<int64_t>(2 * b.num_experts_per_tok, 4));
}

// DeepSeek expert groups: E divisible by G, ≥ 2 experts per group, and the
// selected groups holding at least top-k experts. Keeps G when E is free
// (rounding E up), otherwise lowers G until E fits.
void fit_groups(ModelConfig& c, const ModelConfig& b, bool experts_pinned) {
  if (c.arch != Arch::DeepseekV3 || b.n_group <= 1) return;
  const int64_t K = c.num_experts_per_tok;
  auto ok = [&](int64_t E, int64_t G, int64_t TG) { return E % G == 0 && E / G >= 2 && TG * (E / G) >= K; };
  auto tg_for = [&](int64_t G) {
    return std::clamp<int64_t>(std::llround(double(b.topk_group) * double(G) / double(b.n_group)), 1, G);
  };
  if (!experts_pinned) {
    const int64_t G = b.n_group, TG = b.topk_group;
    const int64_t per = std::max<int64_t>({2, (K + TG - 1) / TG, (c.n_routed_experts + G - 1) / G});
    c.n_routed_experts = per * G;
    c.n_group = G;
    c.topk_group = TG;
    return;
  }
  for (int64_t G = b.n_group; G >= 1; --G) {
    const int64_t TG = tg_for(G);
    if (G == 1 || ok(c.n_routed_experts, G, TG)) {
      c.n_group = G;
      c.topk_group = G == 1 ? 1 : TG;
      return;
    }
  }
}

int64_t embed_row_bytes(const ModelConfig& c, const ShapeRequest& r) {
  DType t = r.quant.trunk;
  if (r.format == Format::Safetensors && (t == DType::F8_E4M3 || t == DType::U8)) t = DType::BF16;
  auto row = dtype_row_bytes(t, static_cast<uint64_t>(c.hidden_size));
  if (!row) row = dtype_row_bytes(DType::Q8_0, static_cast<uint64_t>(c.hidden_size));
  if (!row) row = static_cast<size_t>(c.hidden_size) * 2;
  return static_cast<int64_t>(*row) * (c.tie_word_embeddings ? 1 : 2);
}

// The vocabulary: the base model's, unless embeddings and head would take more
// than a fifth of the budget (a synthetic vocabulary can shrink); never
// smaller than a real tokenizer's.
int64_t pick_vocab(const ModelConfig& c, const ModelConfig& b, const ShapeRequest& r) {
  if (r.vocab) return *r.vocab;  // checked by fit_shape
  int64_t v = b.vocab_size;
  if (r.target_bytes) {
    const double budget = 0.2 * *r.target_bytes / static_cast<double>(embed_row_bytes(c, r));
    if (budget < static_cast<double>(v)) v = std::max<int64_t>(r.min_vocab, static_cast<int64_t>(budget) / 256 * 256);
  }
  v = std::max(v, r.min_vocab);
  return std::max(v, r.tokenizer_vocab);
}

ModelConfig shaped(const ModelConfig& b, const Axes& a, const ShapeRequest& r) {
  ModelConfig c = b;
  const int64_t align = width_align(r.quant);
  if (r.hidden || a.w != 1.0) {
    const double w = a.w;
    c.hidden_size = r.hidden ? *r.hidden : round_to(b.hidden_size * w, align);
    if (b.intermediate_size > 0) c.intermediate_size = round_to(b.intermediate_size * w, align);
    c.moe_intermediate_size = round_to(b.moe_intermediate_size * w, align);
    if (c.arch == Arch::GptOss) c.intermediate_size = c.moe_intermediate_size;
    if (b.latent_width > 0) c.latent_width = round_to(b.latent_width * w, align);
    if (b.kda_heads > 0) c.kda_heads = std::max<int64_t>(1, std::llround(b.kda_heads * w));
    if (b.kv_lora_rank > 0) {  // MLA (DeepSeek-V3, Kimi K3)
      if (b.q_lora_rank) c.q_lora_rank = round_to(*b.q_lora_rank * w, align);
      c.kv_lora_rank = round_to(b.kv_lora_rank * w, align);
      c.num_heads = std::max<int64_t>(1, std::llround(b.num_heads * w));
      c.num_kv_heads = c.num_heads;
    } else {
      const int64_t ratio = b.num_heads / b.num_kv_heads;
      c.num_kv_heads = std::max<int64_t>(1, std::llround(b.num_kv_heads * w));
      c.num_heads = c.num_kv_heads * ratio;
    }
  }

  const int64_t L = a.layers;
  c.num_layers = L;
  if (b.first_k_dense_replace > 0 || c.arch == Arch::DeepseekV3) {
    if (b.first_k_dense_replace == 0 || L < 2)
      c.first_k_dense_replace = 0;
    else
      c.first_k_dense_replace = std::clamp<int64_t>(
          std::llround(double(b.first_k_dense_replace) * double(L) / double(b.num_layers)), 1, L - 1);
  }
  if (!b.kda_layers.empty()) {
    // Kimi K3: the base's pattern of KDA and MLA layers (3:1), ending as it
    // ends (on MLA), and AttnRes blocks as many as the base has, about.
    // (--layers may ask for more layers than the base has: the pattern
    // before its last layer repeats.)
    const size_t period = std::max<size_t>(1, b.kda_layers.size() - 1);
    c.kda_layers.assign(static_cast<size_t>(L), false);
    for (int64_t l = 0; l + 1 < L; ++l) c.kda_layers[l] = b.kda_layers[static_cast<size_t>(l) % period];
    c.kda_layers[L - 1] = b.kda_layers.back();
    c.attn_res_block_size = std::clamp<int64_t>(
        std::llround(double(b.attn_res_block_size) * double(L) / double(b.num_layers)), 1, L);
  }
  if (!b.sliding_layers.empty()) {
    c.sliding_layers.resize(L);
    for (int64_t l = 0; l < L; ++l) c.sliding_layers[l] = b.sliding_layers[l % b.sliding_layers.size()];
  }
  c.mlp_only_layers.clear();
  for (int64_t l : b.mlp_only_layers)
    if (l < L) c.mlp_only_layers.push_back(l);

  c.n_routed_experts = std::max(a.experts, c.num_experts_per_tok);
  fit_groups(c, b, r.experts.has_value());
  c.vocab_size = pick_vocab(c, b, r);
  return c;
}

struct Candidate {
  ModelConfig config;
  uint64_t bytes = 0;
};

}  // namespace

void for_each_tensor_once(const ModelConfig& c, Format format, const Quant& q, bool legacy_mla,
                          const std::function<void(const TensorSpec&, uint64_t copies)>& fn) {
  // Layers of one class (dense or MoE; KDA or MLA) hold the same tensors, so
  // plan one layer of each class (dense classes first) and count it as many
  // times as the model has such layers.
  std::map<std::pair<bool, bool>, uint64_t> classes;  // (moe, kda) → layers
  for (int64_t l = 0; l < c.num_layers; ++l) ++classes[{c.layer_is_moe(l), c.layer_is_kda(l)}];
  ModelConfig few = c;
  few.num_layers = static_cast<int64_t>(classes.size());
  few.first_k_dense_replace = 0;
  few.moe_layer_freq = 1;
  few.decoder_sparse_step = 1;
  few.mlp_only_layers.clear();
  few.kda_layers.clear();
  std::vector<uint64_t> copies;
  for (const auto& [cls, n] : classes) {
    const int64_t l = static_cast<int64_t>(copies.size());
    if (!cls.first) {
      few.first_k_dense_replace = l + 1;
      if (c.arch == Arch::Qwen3Moe) few.mlp_only_layers.push_back(l);
    }
    if (!c.kda_layers.empty()) few.kda_layers.push_back(cls.second);
    copies.push_back(n);
  }
  if (!few.sliding_layers.empty()) few.sliding_layers.resize(few.num_layers);
  const Naming naming = format == Format::Gguf ? Naming::Gguf : Naming::Hf;
  const std::string_view prefix = format == Format::Gguf ? "" : arch_spec(c.arch).hf.tensor_prefix;
  for (const TensorSpec& t : plan_tensors(few, format, q, legacy_mla, nullptr)) {
    const auto id = parse_tensor_name(std::string_view(t.name).substr(prefix.size()), naming);
    const int64_t layer = id ? id->layer : -1;
    fn(t, layer >= 0 && layer < few.num_layers ? copies[static_cast<size_t>(layer)] : 1);
  }
}

uint64_t estimate_bytes(const ModelConfig& c, const ShapeRequest& r) {
  const bool gguf = r.format == Format::Gguf;
  uint64_t bytes = 0;
  for_each_tensor_once(c, r.format, r.quant, r.legacy_mla, [&](const TensorSpec& t, uint64_t copies) {
    // Headers: a tensor's entry (safetensors JSON / GGUF info + alignment).
    bytes += copies * (t.nbytes + (gguf ? 100 : 120));
  });
  // The GGUF vocabulary (tokens, types, merges).
  if (gguf) bytes += static_cast<uint64_t>(c.vocab_size) * 16;
  return bytes;
}

ShapeResult fit_shape(const ModelConfig& base, const ShapeRequest& r) {
  if (r.layers && *r.layers < 1) throw Error("--layers must be at least 1");
  if (r.experts && *r.experts < base.num_experts_per_tok)
    throw Error("--experts " + std::to_string(*r.experts) + " is fewer than the " +
                std::to_string(base.num_experts_per_tok) + " experts each token uses");
  if (r.hidden && (*r.hidden < 32 || *r.hidden % 32 != 0)) throw Error("--hidden must be a positive multiple of 32");
  if (r.vocab && r.tokenizer_vocab > 0)
    throw Error("--vocab sizes the synthetic vocabulary; with --tokenizer the vocabulary is the tokenizer's");
  if (r.vocab && *r.vocab > (int64_t{1} << 30))
    throw Error("--vocab " + std::to_string(*r.vocab) + " is above the largest supported vocabulary (2^30 tokens)");
  if (r.vocab && *r.vocab < r.min_vocab)
    throw Error("--vocab " + std::to_string(*r.vocab) + " is below the synthetic vocabulary's minimum of " +
                std::to_string(r.min_vocab) + " tokens");

  const bool wfree = !r.hidden, lfree = !r.layers, efree = !r.experts;
  const int free_axes = int(wfree) + int(lfree) + int(efree);
  const double w_pin = r.hidden ? double(*r.hidden) / double(base.hidden_size) : 1.0;

  // s in (0, 1]: each free axis takes an equal share of log(bytes).
  auto axes_at = [&](double s) {
    Axes a;
    const double share = free_axes ? 1.0 / free_axes : 0.0;
    a.w = wfree ? std::pow(s, share / 2) : w_pin;
    a.layers =
        lfree ? std::max<int64_t>(min_layers(base), std::llround(base.num_layers * std::pow(s, share))) : *r.layers;
    a.experts = efree ? std::max<int64_t>(min_experts(base), std::llround(base.n_routed_experts * std::pow(s, share)))
                      : *r.experts;
    return a;
  };
  // The width factor has a floor: hidden ≥ 4 blocks of the alignment.
  auto clamp_w = [&](Axes a) {
    const double floor_w = std::min(1.0, 4.0 * width_align(r.quant) / double(base.hidden_size));
    if (wfree) a.w = std::max(a.w, floor_w);
    return a;
  };
  auto eval = [&](const Axes& a) {
    Candidate c;
    c.config = shaped(base, clamp_w(a), r);
    c.bytes = estimate_bytes(c.config, r);
    return c;
  };

  ShapeRequest full_req = r;
  full_req.target_bytes.reset();
  ShapeResult out;
  {
    Axes a;
    a.layers = base.num_layers;
    a.experts = base.n_routed_experts;
    ModelConfig full = shaped(base, a, full_req);
    out.full_bytes = estimate_bytes(full, full_req);
  }

  if (!r.target_bytes) {
    Candidate c = eval(axes_at(1.0));
    out.config = c.config;
    out.estimated_bytes = c.bytes;
    return out;
  }
  const double T = *r.target_bytes;
  if (free_axes == 0) throw Error("--size has nothing to scale: --layers, --experts and --hidden are all given");

  Candidate top = eval(axes_at(1.0));
  if (static_cast<double>(top.bytes) < T / 1.1)
    throw Error("--size " + std::to_string(T / 1e9) + " GB is larger than the full-size shape (" +
                std::to_string(top.bytes / 1e9) + " GB); give a bigger shape with --config");
  Candidate bottom = eval(axes_at(1e-12));
  if (static_cast<double>(bottom.bytes) > T * 1.1)
    throw Error("--size " + std::to_string(T / 1e9) + " GB is smaller than the smallest shape of this class (" +
                std::to_string(bottom.bytes / 1e9) + " GB at this --quant)");

  // Bisection on log s for the largest s whose bytes stay within T.
  double lo = std::log(1e-12), hi = 0.0;
  for (int i = 0; i < 48; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (static_cast<double>(eval(axes_at(std::exp(mid))).bytes) <= T)
      lo = mid;
    else
      hi = mid;
  }
  Candidate best;
  double best_err = std::numeric_limits<double>::infinity();
  auto consider = [&](const Axes& a) {
    Candidate c = eval(a);
    const double err = std::fabs(static_cast<double>(c.bytes) - T);
    if (err < best_err) {
      best_err = err;
      best = std::move(c);
    }
  };
  for (double s : {std::exp(lo), std::exp(hi)}) {
    const Axes a0 = axes_at(s);
    for (int dl = -3; dl <= 3; ++dl) {
      if (!lfree && dl != 0) continue;
      for (int de = -4; de <= 4; ++de) {
        if (!efree && de != 0) continue;
        Axes a = a0;
        a.layers = std::max<int64_t>(min_layers(base), std::min<int64_t>(base.num_layers, a0.layers + dl));
        a.experts = std::max<int64_t>(
            min_experts(base), std::min<int64_t>(base.n_routed_experts, std::llround(a0.experts * (1.0 + 0.04 * de))));
        consider(a);
      }
    }
  }
  out.config = best.config;
  out.estimated_bytes = best.bytes;
  return out;
}

}  // namespace strata::synth
