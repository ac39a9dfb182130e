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

#include "synth/shape.h"
#include "synth/synth.h"
#include "util/error.h"

namespace strata::synth {

namespace {

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
    if (gguf()) {
      matrix("token_embd.weight", V, H, Role::Trunk, 1.0f);
    } else {
      matrix("model.embed_tokens.weight", V, H, Role::Embedding, 1.0f);
    }
    for (int64_t l = 0; l < c_.num_layers; ++l) layer(l);
    if (gguf()) {
      norm("output_norm.weight", H);
      if (!c_.tie_word_embeddings) matrix("output.weight", V, H, Role::Trunk, 3.0f / std::sqrt(float(H)));
    } else {
      norm("model.norm.weight", H);
      if (!c_.tie_word_embeddings) matrix("lm_head.weight", V, H, Role::Embedding, 3.0f / std::sqrt(float(H)));
    }
    if (notes_)
      for (const auto& [what, n] : fallbacks_)
        notes_->push_back(std::to_string(n.first) + " tensor(s) stored as " + what + " (rows not whole blocks; e.g. " +
                          n.second + ")");
    return std::move(out_);
  }

 private:
  enum class Role { Trunk, Expert, Embedding, Router };

  bool gguf() const { return f_ == Format::Gguf; }
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
    const std::string ls = std::to_string(l);
    const std::string p = gguf() ? "blk." + ls + "." : "model.layers." + ls + ".";
    if (gguf())
      norm(p + "attn_norm.weight", H);
    else
      norm(p + "input_layernorm.weight", H);
    switch (c_.arch) {
      case Arch::DeepseekV3: mla(p); break;
      case Arch::Qwen3Moe:
      case Arch::GptOss: gqa(p); break;
    }
    if (gguf())
      norm(p + (c_.arch == Arch::GptOss ? "post_attention_norm.weight" : "ffn_norm.weight"), H);
    else
      norm(p + "post_attention_layernorm.weight", H);
    if (!c_.layer_is_moe(l)) {
      dense(p, c_.intermediate_size);
      return;
    }
    switch (c_.arch) {
      case Arch::DeepseekV3:
      case Arch::Qwen3Moe: moe(p); break;
      case Arch::GptOss: gpt_oss_moe(p); break;
    }
  }

  void mla(const std::string& p) {
    const int64_t H = c_.hidden_size, nH = c_.num_heads, qk = c_.qk_head_dim(), lora = c_.kv_lora_rank;
    const int64_t rope = c_.qk_rope_head_dim, nope = c_.qk_nope_head_dim, v = c_.v_head_dim;
    const bool b = c_.attention_bias;
    if (gguf()) {
      if (c_.q_lora_rank) {
        const int64_t ql = *c_.q_lora_rank;
        matrix(p + "attn_q_a.weight", ql, H, Role::Trunk, fan(H));
        if (b) bias(p + "attn_q_a.bias", {ql});
        norm(p + "attn_q_a_norm.weight", ql);
        matrix(p + "attn_q_b.weight", nH * qk, ql, Role::Trunk, fan(ql));
      } else {
        matrix(p + "attn_q.weight", nH * qk, H, Role::Trunk, fan(H));
      }
      matrix(p + "attn_kv_a_mqa.weight", lora + rope, H, Role::Trunk, fan(H));
      if (b) bias(p + "attn_kv_a_mqa.bias", {lora + rope});
      norm(p + "attn_kv_a_norm.weight", lora);
      if (legacy_mla_) {
        matrix(p + "attn_kv_b.weight", nH * (nope + v), lora, Role::Trunk, fan(lora));
      } else {
        // kv_b split per head: k_b transposed ({H, lora, nope}), v_b as is ({H, v, lora}).
        emit(p + "attn_k_b.weight", pick(q_.trunk, nope, p + "attn_k_b.weight"), {nH, lora, nope}, Fill::Gaussian,
             fan(lora));
        emit(p + "attn_v_b.weight", pick(q_.trunk, lora, p + "attn_v_b.weight"), {nH, v, lora}, Fill::Gaussian,
             fan(lora));
      }
      matrix(p + "attn_output.weight", H, nH * v, Role::Trunk, fan(nH * v));
      if (b) bias(p + "attn_output.bias", {H});
      return;
    }
    const std::string a = p + "self_attn.";
    if (c_.q_lora_rank) {
      const int64_t ql = *c_.q_lora_rank;
      matrix(a + "q_a_proj.weight", ql, H, Role::Trunk, fan(H));
      if (b) bias(a + "q_a_proj.bias", {ql});
      norm(a + "q_a_layernorm.weight", ql);
      matrix(a + "q_b_proj.weight", nH * qk, ql, Role::Trunk, fan(ql));
    } else {
      matrix(a + "q_proj.weight", nH * qk, H, Role::Trunk, fan(H));
    }
    matrix(a + "kv_a_proj_with_mqa.weight", lora + rope, H, Role::Trunk, fan(H));
    if (b) bias(a + "kv_a_proj_with_mqa.bias", {lora + rope});
    norm(a + "kv_a_layernorm.weight", lora);
    matrix(a + "kv_b_proj.weight", nH * (nope + v), lora, Role::Trunk, fan(lora));
    matrix(a + "o_proj.weight", H, nH * v, Role::Trunk, fan(nH * v));
    if (b) bias(a + "o_proj.bias", {H});
  }

  void gqa(const std::string& p) {
    const int64_t H = c_.hidden_size, nH = c_.num_heads, nKV = c_.num_kv_heads, d = c_.head_dim;
    const bool b = c_.attention_bias;
    const bool qwen = c_.arch == Arch::Qwen3Moe;
    const std::string a = gguf() ? p + "attn_" : p + "self_attn.";
    auto proj = [&](const char* gguf_name, const char* hf_name, int64_t out, int64_t in, float scale) {
      const std::string n = a + (gguf() ? gguf_name : hf_name);
      matrix(n + ".weight", out, in, Role::Trunk, scale);
      if (b) bias(n + ".bias", {out});
    };
    proj("q", "q_proj", nH * d, H, fan(H));
    proj("k", "k_proj", nKV * d, H, fan(H));
    proj("v", "v_proj", nKV * d, H, fan(H));
    proj("output", "o_proj", H, nH * d, fan(nH * d));
    if (qwen) {
      norm(a + (gguf() ? "q_norm.weight" : "q_norm.weight"), d);
      norm(a + (gguf() ? "k_norm.weight" : "k_norm.weight"), d);
    }
    if (c_.attention_sinks) {
      // A sink is one more logit in each head's softmax; O(1) values.
      emit(gguf() ? a + "sinks.weight" : a + "sinks", vector_type(), {nH}, Fill::Gaussian, 0.5f);
    }
  }

  void dense(const std::string& p, int64_t I) {
    const int64_t H = c_.hidden_size;
    if (gguf()) {
      matrix(p + "ffn_gate.weight", I, H, Role::Trunk, fan(H));
      matrix(p + "ffn_up.weight", I, H, Role::Trunk, fan(H));
      matrix(p + "ffn_down.weight", H, I, Role::Trunk, fan(I));
    } else {
      matrix(p + "mlp.gate_proj.weight", I, H, Role::Trunk, fan(H));
      matrix(p + "mlp.up_proj.weight", I, H, Role::Trunk, fan(H));
      matrix(p + "mlp.down_proj.weight", H, I, Role::Trunk, fan(I));
    }
  }

  // DeepSeek-V3 and Qwen3-MoE routed experts (+ DeepSeek's shared experts).
  void moe(const std::string& p) {
    const int64_t H = c_.hidden_size, E = c_.n_routed_experts, I = c_.moe_intermediate_size;
    const bool ds = c_.arch == Arch::DeepseekV3;
    if (gguf()) {
      matrix(p + "ffn_gate_inp.weight", E, H, Role::Router, fan(H));
      if (ds) emit(p + "exp_probs_b.bias", DType::F32, {E}, Fill::Gaussian, 0.01f);
      stacked(p + "ffn_gate_exps.weight", E, I, H, fan(H));
      stacked(p + "ffn_up_exps.weight", E, I, H, fan(H));
      stacked(p + "ffn_down_exps.weight", E, H, I, fan(I));
      if (ds && c_.n_shared_experts > 0) {
        const int64_t S = I * c_.n_shared_experts;
        matrix(p + "ffn_gate_shexp.weight", S, H, Role::Trunk, fan(H));
        matrix(p + "ffn_up_shexp.weight", S, H, Role::Trunk, fan(H));
        matrix(p + "ffn_down_shexp.weight", H, S, Role::Trunk, fan(S));
      }
      return;
    }
    matrix(p + "mlp.gate.weight", E, H, Role::Router, fan(H));
    if (ds) emit(p + "mlp.gate.e_score_correction_bias", DType::F32, {E}, Fill::Gaussian, 0.01f);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      matrix(x + "gate_proj.weight", I, H, Role::Expert, fan(H));
      matrix(x + "up_proj.weight", I, H, Role::Expert, fan(H));
      matrix(x + "down_proj.weight", H, I, Role::Expert, fan(I));
    }
    if (ds && c_.n_shared_experts > 0) {
      const int64_t S = I * c_.n_shared_experts;
      matrix(p + "mlp.shared_experts.gate_proj.weight", S, H, Role::Trunk, fan(H));
      matrix(p + "mlp.shared_experts.up_proj.weight", S, H, Role::Trunk, fan(H));
      matrix(p + "mlp.shared_experts.down_proj.weight", H, S, Role::Trunk, fan(S));
    }
  }

  void gpt_oss_moe(const std::string& p) {
    const int64_t H = c_.hidden_size, E = c_.n_routed_experts, I = c_.moe_intermediate_size;
    if (gguf()) {
      matrix(p + "ffn_gate_inp.weight", E, H, Role::Router, fan(H));
      bias(p + "ffn_gate_inp.bias", {E});
      stacked(p + "ffn_gate_exps.weight", E, I, H, fan(H));
      bias(p + "ffn_gate_exps.bias", {E, I});
      stacked(p + "ffn_up_exps.weight", E, I, H, fan(H));
      bias(p + "ffn_up_exps.bias", {E, I});
      stacked(p + "ffn_down_exps.weight", E, H, I, fan(I));
      bias(p + "ffn_down_exps.bias", {E, H});
      return;
    }
    matrix(p + "mlp.router.weight", E, H, Role::Router, fan(H));
    bias(p + "mlp.router.bias", {E});
    const std::string x = p + "mlp.experts.";
    if (q_.experts == DType::U8) {
      // OpenAI's MXFP4: [E, out, in/32, 16] codes and [E, out, in/32] E8M0 scales.
      if (H % 32 != 0 || I % 32 != 0)
        throw Error("gpt-oss MXFP4 experts need hidden_size and intermediate_size divisible by 32");
      emit(x + "gate_up_proj_blocks", DType::U8, {E, 2 * I, H / 32, 16}, Fill::Mxfp4Blocks, fan(H));
      emit(x + "gate_up_proj_scales", DType::U8, {E, 2 * I, H / 32}, Fill::Mxfp4Scales, fan(H));
      bias(x + "gate_up_proj_bias", {E, 2 * I});
      emit(x + "down_proj_blocks", DType::U8, {E, H, I / 32, 16}, Fill::Mxfp4Blocks, fan(I));
      emit(x + "down_proj_scales", DType::U8, {E, H, I / 32}, Fill::Mxfp4Scales, fan(I));
      bias(x + "down_proj_bias", {E, H});
      return;
    }
    // transformers' save_pretrained layout: [E, in, out], gate/up columns interleaved.
    emit(x + "gate_up_proj", q_.experts, {E, H, 2 * I}, Fill::Gaussian, fan(H));
    bias(x + "gate_up_proj_bias", {E, 2 * I});
    emit(x + "down_proj", q_.experts, {E, I, H}, Fill::Gaussian, fan(I));
    bias(x + "down_proj_bias", {E, H});
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
    if (t.name.find(".mlp.experts.") != std::string::npos && t.name.find("bias") == std::string::npos) experts += n;
  });
  *total = all;
  const double share = static_cast<double>(c.num_experts_per_tok) / static_cast<double>(c.n_routed_experts);
  *active = all - experts + static_cast<uint64_t>(std::llround(static_cast<double>(experts) * share));
}

}  // namespace strata::synth
