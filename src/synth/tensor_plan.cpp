// The tensors of a synthesized model, named and laid out exactly as the real
// checkpoints are: Hugging Face safetensors (DeepSeek-V3 per-expert tensors
// and FP8 weight_scale_inv; Qwen3-MoE; gpt-oss fused [E, in, out] experts or
// MXFP4 _blocks/_scales; Kimi K3 under "language_model." with
// compressed-tensors MXFP4 or bf16 experts) and GGUF as llama.cpp's convert_hf_to_gguf.py writes
// deepseek2 / qwen3moe / gpt-oss (stacked ffn_*_exps, attn_k_b/attn_v_b,
// exp_probs_b, sinks; norms, biases and routers F32). Which tensors a layer
// has is its architecture's declaration (ArchSpec::declare_layer) and every
// name comes from the one table (model/tensor_names.h); this file gives each
// kind its shape, type and scale. The names are checked against llama.cpp's
// src/models/{deepseek2,qwen3moe,openai-moe}.cpp load_arch_tensors
// (tests/synth_test.cpp) and the declarations (tests/tensor_names_test.cpp).
//
// Scales keep a random model numerically tame through many layers: weights
// ~ N(0, 1/fan_in), so every sublayer (attention, dense MLP, each expert)
// maps its RMS-normalized input to outputs of std ≈ 0.6 to 1 and each adds
// a comparable share to the residual stream (which grows like sqrt(layers)
// and is normalized before every use); RMSNorm weights ≈ 1, embeddings
// ~ N(0, 1), the output head giving logits of std ≈ 3, routers giving
// logits of std ≈ 1 so that tokens spread over the experts.
#include <cmath>
#include <map>

#include "model/arch.h"
#include "model/checkpoint.h"
#include "model/tensor_names.h"
#include "synth/shape.h"
#include "synth/synth.h"
#include "util/error.h"

namespace strata::synth {

namespace {

using enum TensorKind;

uint64_t tensor_bytes(DType t, const std::vector<int64_t>& shape) {
  uint64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= static_cast<uint64_t>(shape[i]);
  auto row = dtype_row_bytes(t, static_cast<uint64_t>(shape.back()));
  if (!row)
    throw Error(std::string("internal: rows of ") + std::to_string(shape.back()) + " are not whole " + dtype_name(t) +
                " blocks");
  return rows * *row;
}

class Builder {
 public:
  Builder(const ModelConfig& c, Format f, const Quant& q, bool legacy_mla, std::vector<std::string>* notes)
      : c_(c), f_(f), q_(q), legacy_mla_(legacy_mla), notes_(notes) {}

  std::vector<TensorSpec> build() {
    const int64_t H = c_.hidden_size, V = c_.vocab_size;
    matrix(name(TokenEmbd, -1), V, H, gguf() ? Role::Trunk : Role::Embedding, 1.0f);
    for (int64_t l = 0; l < c_.num_layers; ++l) layer(l);
    for (TensorKind k : arch_spec(c_.arch).model_tensors) tensor(k, -1);
    norm(name(OutputNorm, -1), H);
    if (!c_.tie_word_embeddings)
      matrix(name(Output, -1), V, H, gguf() ? Role::Trunk : Role::Embedding, 3.0f / std::sqrt(float(H)));
    if (notes_)
      for (const auto& [what, n] : fallbacks_)
        notes_->push_back(std::to_string(n.first) + " tensor(s) stored as " + what + " (rows not whole blocks; e.g. " +
                          n.second + ")");
    return std::move(out_);
  }

 private:
  enum class Role { Trunk, Expert, Embedding, Router };

  bool gguf() const { return f_ == Format::Gguf; }
  // A tensor's name in this format, from the one table (model/tensor_names.h),
  // with the checkpoint's prefix for its text model (Kimi K3's "language_model.").
  std::string name(TensorKind k, int64_t l, std::string_view suffix = "weight", int64_t e = -1) const {
    if (gguf()) return tn(Naming::Gguf, k, suffix, l, e);
    return arch_spec(c_.arch).hf.tensor_prefix + tn(Naming::Hf, k, suffix, l, e);
  }
  float fan(int64_t in) const { return 1.0f / std::sqrt(static_cast<float>(in)); }

  void emit(std::string name, DType t, std::vector<int64_t> shape, Fill fill, float scale) {
    TensorSpec s;
    s.nbytes = tensor_bytes(t, shape);
    s.name = std::move(name);
    s.dtype = t;
    s.shape = std::move(shape);
    s.fill = fill;
    s.scale = scale;
    out_.push_back(std::move(s));
  }

  // The stored type of a matrix of `in` columns, falling back when its rows
  // are not whole blocks (as llama-quantize does).
  DType pick(DType want, int64_t in, const std::string& name) {
    if (dtype_row_bytes(want, static_cast<uint64_t>(in))) return want;
    for (DType fb : {DType::Q8_0, DType::F16}) {
      if (dtype_row_bytes(fb, static_cast<uint64_t>(in))) {
        auto& e = fallbacks_[std::string(dtype_name(fb)) + " instead of " + dtype_name(want)];
        if (e.first++ == 0) e.second = name;
        return fb;
      }
    }
    return DType::F32;
  }

  DType vector_type() const {
    if (gguf()) return DType::F32;
    return q_.trunk == DType::F16 || q_.trunk == DType::F32 ? q_.trunk : DType::BF16;
  }

  void norm(const std::string& name, int64_t n) { emit(name, vector_type(), {n}, Fill::NormWeight, 1.0f); }
  void bias(const std::string& name, std::vector<int64_t> shape, float scale = 0.02f) {
    emit(name, vector_type(), std::move(shape), Fill::Gaussian, scale);
  }

  // A [out, in] weight called `name` (ending in ".weight"), std `scale`.
  void matrix(const std::string& name, int64_t out, int64_t in, Role role, float scale) {
    if (gguf()) {
      DType want = role == Role::Router ? DType::F32 : role == Role::Expert ? q_.experts : q_.trunk;
      emit(name, pick(want, in, name), {out, in}, Fill::Gaussian, scale);
      return;
    }
    const DType t = role == Role::Expert ? q_.experts : q_.trunk;
    if (t == DType::F8_E4M3 && role != Role::Embedding && role != Role::Router) {
      emit(name, DType::F8_E4M3, {out, in}, Fill::Fp8Codes, scale);
      const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
      emit(prefix + ".weight_scale_inv", DType::F32, {(out + 127) / 128, (in + 127) / 128}, Fill::Fp8ScaleInv, scale);
      return;
    }
    emit(name, t == DType::F8_E4M3 || t == DType::U8 ? DType::BF16 : t, {out, in}, Fill::Gaussian, scale);
  }

  // GGUF stacked experts {E, out, in}.
  void stacked(const std::string& name, int64_t E, int64_t out, int64_t in, float scale) {
    emit(name, pick(q_.experts, in, name), {E, out, in}, Fill::Gaussian, scale);
  }

  // HF checkpoints name this kind once per routed expert ("experts.%d.").
  static bool per_expert(TensorKind k) {
    const TensorName& t = tensor_name(k);
    if (t.role != TensorRole::Expert || !t.hf) return false;
    const std::string_view hf = t.hf;
    const size_t first = hf.find("%d");
    return first != std::string_view::npos && hf.find("%d", first + 2) != std::string_view::npos;
  }

  // A layer's tensors are the ones its architecture declares
  // (ArchSpec::declare_layer), in that order; here they get shapes, types and
  // scales. HF checkpoints hold routed experts one tensor each, expert by
  // expert (gate, up, down of expert 0, then of expert 1, ...).
  void layer(int64_t l) {
    std::vector<TensorKind> kinds;
    arch_spec(c_.arch).declare_layer(c_, l, gguf() ? Naming::Gguf : Naming::Hf, kinds);
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (!gguf() && per_expert(kinds[i])) {
        size_t j = i;
        while (j < kinds.size() && per_expert(kinds[j])) ++j;
        for (int64_t e = 0; e < c_.n_routed_experts; ++e)
          for (size_t k = i; k < j; ++k) expert(kinds[k], l, e);
        i = j - 1;
        continue;
      }
      tensor(kinds[i], l);
    }
  }

  // A [out, in] projection, with its bias when `with_bias`.
  void proj(TensorKind k, int64_t l, int64_t out, int64_t in, bool with_bias) {
    matrix(name(k, l), out, in, Role::Trunk, fan(in));
    if (with_bias) bias(name(k, l, "bias"), {out});
  }

  // {out, in} of one routed expert's gate, up or down projection (a latent
  // MoE's experts read and write its latent width).
  std::pair<int64_t, int64_t> expert_shape(TensorKind k) const {
    const int64_t H = c_.latent_width > 0 ? c_.latent_width : c_.hidden_size, I = c_.moe_intermediate_size;
    return k == FfnDownExps || k == ExpW2 ? std::pair{H, I} : std::pair{I, H};
  }

  void expert(TensorKind k, int64_t l, int64_t e) {
    const auto [out, in] = expert_shape(k);
    if (q_.experts == DType::U8 && arch_spec(c_.arch).hf.compressed_mxfp4_experts) {
      // compressed-tensors mxfp4-pack-quantized: [out, in/2] codes, two per
      // byte, and [out, in/32] E8M0 scales.
      if (in % 32 != 0) throw Error("MXFP4 experts need widths divisible by 32");
      const std::string x = name(k, l, "", e);
      emit(x + ".weight_packed", DType::U8, {out, in / 2}, Fill::Mxfp4Blocks, fan(in));
      emit(x + ".weight_scale", DType::U8, {out, in / 32}, Fill::Mxfp4Scales, fan(in));
      return;
    }
    matrix(name(k, l, "weight", e), out, in, Role::Expert, fan(in));
  }

  // F32 vectors whatever the trunk's type (K3's convolutions, decay
  // parameters and router bias, as its modules hold them).
  void f32(TensorKind k, int64_t l, std::vector<int64_t> shape, Fill fill, float scale, const char* suffix = "weight") {
    emit(name(k, l, suffix), DType::F32, std::move(shape), fill, scale);
  }

  // Kimi Delta Attention's own tensors (c_.kda_*); its q, k, v, gate and
  // output projections are the D = heads × head_dim wide ones.
  bool kda_tensor(TensorKind k, int64_t l) {
    if (!c_.layer_is_kda(l)) return false;
    const int64_t H = c_.hidden_size, K = c_.kda_head_dim, D = c_.kda_heads * K, W = c_.kda_conv_kernel;
    switch (k) {
      case AttnQ:
      case AttnK:
      case AttnV:
      case AttnGate: proj(k, l, D, H, false); return true;
      case AttnOut: proj(k, l, H, D, false); return true;
      // Depthwise convolutions mixing each channel's last W values.
      case KdaQConv:
      case KdaKConv:
      case KdaVConv: f32(k, l, {D, 1, W}, Fill::Gaussian, 0.5f); return true;
      // e^A_log ≈ 1 scales the decay's pre-activation.
      case KdaALog: f32(k, l, {c_.kda_heads}, Fill::Gaussian, 0.5f, ""); return true;
      case KdaDtBias: f32(k, l, {D}, Fill::Gaussian, 0.5f, ""); return true;
      case KdaFA: proj(k, l, K, H, false); return true;
      case KdaFB: proj(k, l, D, K, false); return true;
      case KdaBeta: proj(k, l, c_.kda_heads, H, false); return true;
      case KdaONorm: f32(k, l, {K}, Fill::NormWeight, 1.0f); return true;
      default: return false;
    }
  }

  void tensor(TensorKind k, int64_t l) {
    if (kda_tensor(k, l)) return;
    const int64_t H = c_.hidden_size, nH = c_.num_heads, nKV = c_.num_kv_heads, d = c_.head_dim;
    const int64_t E = c_.n_routed_experts, I = c_.moe_intermediate_size;
    const int64_t lora = c_.kv_lora_rank, rope = c_.qk_rope_head_dim, nope = c_.qk_nope_head_dim, v = c_.v_head_dim;
    const int64_t ql = c_.q_lora_rank.value_or(0), S = I * c_.n_shared_experts;
    const bool b = c_.attention_bias;
    const bool mla = lora > 0;  // latent attention: q and o are sized by the MLA head widths
    switch (k) {
      case AttnNorm:
      case FfnNorm:
      case PostAttnNorm: norm(name(k, l), H); break;
      // Multi-head latent attention.
      case AttnQA: proj(k, l, ql, H, b); break;
      case AttnQANorm: norm(name(k, l), ql); break;
      case AttnQB: proj(k, l, nH * c_.qk_head_dim(), ql, false); break;
      case AttnKvAMqa: proj(k, l, lora + rope, H, b); break;
      case AttnKvANorm: norm(name(k, l), lora); break;
      case AttnKvB: proj(k, l, nH * (nope + v), lora, false); break;
      case AttnKB:
        // Older converters kept kv_b whole (legacy_mla).
        if (legacy_mla_) {
          proj(AttnKvB, l, nH * (nope + v), lora, false);
        } else {
          // kv_b split per head: k_b transposed ({H, lora, nope}).
          const std::string kb = name(k, l);
          emit(kb, pick(q_.trunk, nope, kb), {nH, lora, nope}, Fill::Gaussian, fan(lora));
        }
        break;
      case AttnVB:
        if (!legacy_mla_) {
          const std::string vb = name(k, l);  // v_b as is ({H, v, lora})
          emit(vb, pick(q_.trunk, lora, vb), {nH, v, lora}, Fill::Gaussian, fan(lora));
        }
        break;
      // Query and output: MLA's or grouped-query attention's.
      case AttnQ: mla ? proj(k, l, nH * c_.qk_head_dim(), H, false) : proj(k, l, nH * d, H, b); break;
      case AttnOut: mla ? proj(k, l, H, nH * v, b) : proj(k, l, H, nH * d, b); break;
      case AttnK:
      case AttnV: proj(k, l, nKV * d, H, b); break;
      case AttnQNorm:
      case AttnKNorm: norm(name(k, l), d); break;
      // A sink is one more logit in each head's softmax; O(1) values.
      case AttnSinks: emit(name(k, l), vector_type(), {nH}, Fill::Gaussian, 0.5f); break;
      // Dense MLP and shared experts.
      case FfnGate:
      case FfnUp: matrix(name(k, l), c_.intermediate_size, H, Role::Trunk, fan(H)); break;
      case FfnDown: matrix(name(k, l), H, c_.intermediate_size, Role::Trunk, fan(c_.intermediate_size)); break;
      case FfnGateShexp:
      case FfnUpShexp: matrix(name(k, l), S, H, Role::Trunk, fan(H)); break;
      case FfnDownShexp: matrix(name(k, l), H, S, Role::Trunk, fan(S)); break;
      // Routers.
      case FfnGateInp: matrix(name(k, l), E, H, Role::Router, fan(H)); break;
      case FfnRouter:  // gpt-oss's router is a linear with bias
        matrix(name(k, l), E, H, Role::Router, fan(H));
        bias(name(k, l, "bias"), {E});
        break;
      case ExpProbsB: emit(name(k, l, "bias"), DType::F32, {E}, Fill::Gaussian, 0.01f); break;
      // Routed experts: GGUF stacked {E, out, in} (+ {E, out} biases).
      case FfnGateExps:
      case FfnUpExps:
      case FfnDownExps: {
        const auto [out, in] = expert_shape(k);
        stacked(name(k, l), E, out, in, fan(in));
        if (arch_spec(c_.arch).expert_biases) bias(name(k, l, "bias"), {E, out});
        break;
      }
      // gpt-oss HF experts: one tensor per layer for all experts.
      case FfnGateUpExpsFused:
      case FfnDownExpsFused: fused_experts(k, l); break;
      // Kimi K3: the MLA output gate, AttnRes queries (norm ⊙ projection
      // scoring RMS-normalized states: O(1) scores), the latent MoE.
      case AttnGate: proj(k, l, nH * v, H, false); break;
      case AttnResProj:
      case FfnResProj:
      case OutputResProj: emit(name(k, l), vector_type(), {1, H}, Fill::Gaussian, fan(H)); break;
      case AttnResNorm:
      case FfnResNorm:
      case OutputResNorm: norm(name(k, l), H); break;
      case MoeRouter: matrix(name(k, l), E, H, Role::Router, fan(H)); break;
      case MoeRouterBias: f32(k, l, {E}, Fill::Gaussian, 0.01f, ""); break;
      case LatentDown: proj(k, l, c_.latent_width, H, false); break;
      case LatentNorm: norm(name(k, l), c_.latent_width); break;
      case LatentUp: proj(k, l, H, c_.latent_width, false); break;
      case MoeGateShexp:
      case MoeUpShexp: matrix(name(k, l), S, H, Role::Trunk, fan(H)); break;
      case MoeDownShexp: matrix(name(k, l), H, S, Role::Trunk, fan(S)); break;
      default: throw Error("internal: synth has no layout for tensor " + name(k, l));
    }
  }

  void fused_experts(TensorKind k, int64_t l) {
    const int64_t H = c_.hidden_size, E = c_.n_routed_experts, I = c_.moe_intermediate_size;
    const bool gate_up = k == FfnGateUpExpsFused;
    const int64_t out = gate_up ? 2 * I : H, in = gate_up ? H : I;
    const std::string x = name(k, l, "");
    if (q_.experts == DType::U8) {
      // OpenAI's MXFP4: [E, out, in/32, 16] codes and [E, out, in/32] E8M0 scales.
      if (H % 32 != 0 || I % 32 != 0)
        throw Error("gpt-oss MXFP4 experts need hidden_size and intermediate_size divisible by 32");
      emit(x + "_blocks", DType::U8, {E, out, in / 32, 16}, Fill::Mxfp4Blocks, fan(in));
      emit(x + "_scales", DType::U8, {E, out, in / 32}, Fill::Mxfp4Scales, fan(in));
      bias(x + "_bias", {E, out});
      return;
    }
    // transformers' save_pretrained layout: [E, in, out], gate/up columns interleaved.
    emit(x, q_.experts, {E, in, out}, Fill::Gaussian, fan(in));
    bias(x + "_bias", {E, out});
  }

  const ModelConfig& c_;
  Format f_;
  const Quant& q_;
  bool legacy_mla_;
  std::vector<std::string>* notes_;
  std::vector<TensorSpec> out_;
  std::map<std::string, std::pair<int, std::string>> fallbacks_;
};

}  // namespace

std::vector<TensorSpec> plan_tensors(const ModelConfig& c, Format format, const Quant& q, bool legacy_mla,
                                     std::vector<std::string>* notes) {
  return Builder(c, format, q, legacy_mla, notes).build();
}

void count_params(const ModelConfig& c, uint64_t* total, uint64_t* active) {
  Quant q;  // bf16 safetensors: one stored value per parameter
  const size_t prefix = std::string_view(arch_spec(c.arch).hf.tensor_prefix).size();
  uint64_t all = 0, experts = 0;
  for_each_tensor_once(c, Format::Safetensors, q, false, [&](const TensorSpec& t, uint64_t copies) {
    uint64_t n = copies;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    all += n;
    if (is_routed_expert_tensor(t.name.substr(prefix)) && t.name.find("bias") == std::string::npos) experts += n;
  });
  *total = all;
  const double share = static_cast<double>(c.num_experts_per_tok) / static_cast<double>(c.n_routed_experts);
  *active = all - experts + static_cast<uint64_t>(std::llround(static_cast<double>(experts) * share));
}

}  // namespace strata::synth
