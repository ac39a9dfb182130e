// The tensors of a synthesized model, named and laid out exactly as the real
// checkpoints are: Hugging Face safetensors (DeepSeek-V3 per-expert tensors
// and FP8 weight_scale_inv; Qwen3-MoE; gpt-oss fused [E, in, out] experts or
// MXFP4 _blocks/_scales) and GGUF as llama.cpp's convert_hf_to_gguf.py writes
// deepseek2 / qwen3moe / gpt-oss (stacked ffn_*_exps, attn_k_b/attn_v_b,
// exp_probs_b, sinks; norms, biases and routers F32). The names are checked
// against llama.cpp's src/models/{deepseek2,qwen3moe,openai-moe}.cpp
// load_arch_tensors and strata's model/*.cpp bindings (tests/synth_test.cpp).
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
  // A tensor's name in this format, from the one table (model/tensor_names.h).
  std::string name(TensorKind k, int64_t l, std::string_view suffix = "weight", int64_t e = -1) const {
    return tn(gguf() ? Naming::Gguf : Naming::Hf, k, suffix, l, e);
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

  void layer(int64_t l) {
    const int64_t H = c_.hidden_size;
    norm(name(AttnNorm, l), H);
    switch (c_.arch) {
      case Arch::DeepseekV3: mla(l); break;
      case Arch::Qwen3Moe:
      case Arch::GptOss: gqa(l); break;
    }
    // gpt-oss's GGUF spells post_attention_layernorm post_attention_norm.
    norm(name(gguf() && c_.arch == Arch::GptOss ? PostAttnNorm : FfnNorm, l), H);
    if (!c_.layer_is_moe(l)) {
      dense(l, c_.intermediate_size);
      return;
    }
    switch (c_.arch) {
      case Arch::DeepseekV3:
      case Arch::Qwen3Moe: moe(l); break;
      case Arch::GptOss: gpt_oss_moe(l); break;
    }
  }

  void mla(int64_t l) {
    const int64_t H = c_.hidden_size, nH = c_.num_heads, qk = c_.qk_head_dim(), lora = c_.kv_lora_rank;
    const int64_t rope = c_.qk_rope_head_dim, nope = c_.qk_nope_head_dim, v = c_.v_head_dim;
    const bool b = c_.attention_bias;
    if (c_.q_lora_rank) {
      const int64_t ql = *c_.q_lora_rank;
      matrix(name(AttnQA, l), ql, H, Role::Trunk, fan(H));
      if (b) bias(name(AttnQA, l, "bias"), {ql});
      norm(name(AttnQANorm, l), ql);
      matrix(name(AttnQB, l), nH * qk, ql, Role::Trunk, fan(ql));
    } else {
      matrix(name(AttnQ, l), nH * qk, H, Role::Trunk, fan(H));
    }
    matrix(name(AttnKvAMqa, l), lora + rope, H, Role::Trunk, fan(H));
    if (b) bias(name(AttnKvAMqa, l, "bias"), {lora + rope});
    norm(name(AttnKvANorm, l), lora);
    if (!gguf() || legacy_mla_) {
      matrix(name(AttnKvB, l), nH * (nope + v), lora, Role::Trunk, fan(lora));
    } else {
      // kv_b split per head: k_b transposed ({H, lora, nope}), v_b as is ({H, v, lora}).
      const std::string kb = name(AttnKB, l), vb = name(AttnVB, l);
      emit(kb, pick(q_.trunk, nope, kb), {nH, lora, nope}, Fill::Gaussian, fan(lora));
      emit(vb, pick(q_.trunk, lora, vb), {nH, v, lora}, Fill::Gaussian, fan(lora));
    }
    matrix(name(AttnOut, l), H, nH * v, Role::Trunk, fan(nH * v));
    if (b) bias(name(AttnOut, l, "bias"), {H});
  }

  void gqa(int64_t l) {
    const int64_t H = c_.hidden_size, nH = c_.num_heads, nKV = c_.num_kv_heads, d = c_.head_dim;
    const bool b = c_.attention_bias;
    auto proj = [&](TensorKind k, int64_t out, int64_t in, float scale) {
      matrix(name(k, l), out, in, Role::Trunk, scale);
      if (b) bias(name(k, l, "bias"), {out});
    };
    proj(AttnQ, nH * d, H, fan(H));
    proj(AttnK, nKV * d, H, fan(H));
    proj(AttnV, nKV * d, H, fan(H));
    proj(AttnOut, H, nH * d, fan(nH * d));
    if (c_.arch == Arch::Qwen3Moe) {
      norm(name(AttnQNorm, l), d);
      norm(name(AttnKNorm, l), d);
    }
    // A sink is one more logit in each head's softmax; O(1) values.
    if (c_.attention_sinks) emit(name(AttnSinks, l), vector_type(), {nH}, Fill::Gaussian, 0.5f);
  }

  void dense(int64_t l, int64_t I) {
    const int64_t H = c_.hidden_size;
    matrix(name(FfnGate, l), I, H, Role::Trunk, fan(H));
    matrix(name(FfnUp, l), I, H, Role::Trunk, fan(H));
    matrix(name(FfnDown, l), H, I, Role::Trunk, fan(I));
  }

  void shared_experts(int64_t l) {
    const int64_t H = c_.hidden_size, S = c_.moe_intermediate_size * c_.n_shared_experts;
    matrix(name(FfnGateShexp, l), S, H, Role::Trunk, fan(H));
    matrix(name(FfnUpShexp, l), S, H, Role::Trunk, fan(H));
    matrix(name(FfnDownShexp, l), H, S, Role::Trunk, fan(S));
  }

  // DeepSeek-V3 and Qwen3-MoE routed experts (+ DeepSeek's shared experts).
  void moe(int64_t l) {
    const int64_t H = c_.hidden_size, E = c_.n_routed_experts, I = c_.moe_intermediate_size;
    const bool ds = c_.arch == Arch::DeepseekV3;
    matrix(name(FfnGateInp, l), E, H, Role::Router, fan(H));
    if (ds) emit(name(ExpProbsB, l, "bias"), DType::F32, {E}, Fill::Gaussian, 0.01f);
    if (gguf()) {
      stacked(name(FfnGateExps, l), E, I, H, fan(H));
      stacked(name(FfnUpExps, l), E, I, H, fan(H));
      stacked(name(FfnDownExps, l), E, H, I, fan(I));
    } else {
      for (int64_t e = 0; e < E; ++e) {
        matrix(name(FfnGateExps, l, "weight", e), I, H, Role::Expert, fan(H));
        matrix(name(FfnUpExps, l, "weight", e), I, H, Role::Expert, fan(H));
        matrix(name(FfnDownExps, l, "weight", e), H, I, Role::Expert, fan(I));
      }
    }
    if (ds && c_.n_shared_experts > 0) shared_experts(l);
  }

  void gpt_oss_moe(int64_t l) {
    const int64_t H = c_.hidden_size, E = c_.n_routed_experts, I = c_.moe_intermediate_size;
    matrix(name(FfnRouter, l), E, H, Role::Router, fan(H));
    bias(name(FfnRouter, l, "bias"), {E});
    if (gguf()) {
      stacked(name(FfnGateExps, l), E, I, H, fan(H));
      bias(name(FfnGateExps, l, "bias"), {E, I});
      stacked(name(FfnUpExps, l), E, I, H, fan(H));
      bias(name(FfnUpExps, l, "bias"), {E, I});
      stacked(name(FfnDownExps, l), E, H, I, fan(I));
      bias(name(FfnDownExps, l, "bias"), {E, H});
      return;
    }
    const std::string gate_up = name(FfnGateUpExpsFused, l, ""), down = name(FfnDownExpsFused, l, "");
    if (q_.experts == DType::U8) {
      // OpenAI's MXFP4: [E, out, in/32, 16] codes and [E, out, in/32] E8M0 scales.
      if (H % 32 != 0 || I % 32 != 0)
        throw Error("gpt-oss MXFP4 experts need hidden_size and intermediate_size divisible by 32");
      emit(gate_up + "_blocks", DType::U8, {E, 2 * I, H / 32, 16}, Fill::Mxfp4Blocks, fan(H));
      emit(gate_up + "_scales", DType::U8, {E, 2 * I, H / 32}, Fill::Mxfp4Scales, fan(H));
      bias(gate_up + "_bias", {E, 2 * I});
      emit(down + "_blocks", DType::U8, {E, H, I / 32, 16}, Fill::Mxfp4Blocks, fan(I));
      emit(down + "_scales", DType::U8, {E, H, I / 32}, Fill::Mxfp4Scales, fan(I));
      bias(down + "_bias", {E, H});
      return;
    }
    // transformers' save_pretrained layout: [E, in, out], gate/up columns interleaved.
    emit(gate_up, q_.experts, {E, H, 2 * I}, Fill::Gaussian, fan(H));
    bias(gate_up + "_bias", {E, 2 * I});
    emit(down, q_.experts, {E, I, H}, Fill::Gaussian, fan(I));
    bias(down + "_bias", {E, H});
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
  Quant q;  // bf16 safetensors: one element per stored value
  uint64_t all = 0, experts = 0;
  for_each_tensor_once(c, Format::Safetensors, q, false, [&](const TensorSpec& t, uint64_t copies) {
    const uint64_t n = t.nbytes / 2 * copies;
    all += n;
    if (is_routed_expert_tensor(t.name) && t.name.find("bias") == std::string::npos) experts += n;
  });
  *total = all;
  const double share = static_cast<double>(c.num_experts_per_tok) / static_cast<double>(c.n_routed_experts);
  *active = all - experts + static_cast<uint64_t>(std::llround(static_cast<double>(experts) * share));
}

}  // namespace strata::synth
