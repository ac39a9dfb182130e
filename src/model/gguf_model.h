#pragma once
// Turning a GGUF file (as llama.cpp's convert_hf_to_gguf.py writes it) into
// what strata's architectures expect: a ModelConfig equal to the one the
// original config.json gives, and a TensorSource that presents the GGUF
// tensors under the Hugging Face names the architectures bind.
//
// Supported general.architecture values: "deepseek2" (DeepSeek-V3, Kimi-K2
// and other DeepseekV3ForCausalLM checkpoints), "qwen3moe", and "gpt-oss"
// (config, and a view whose experts are per-expert GGUF-layout tensors, not
// HF's fused gate_up_proj; see below). docs/gguf.md has the full name and
// metadata maps.
//
// ---------------------------------------------------------------------------
// Tensor names (GGUF → HF, N = layer, E = expert; ".weight"/".bias" kept).
// Derived from the one name table (model/tensor_names.h: each kind's two
// spellings and Layout) restricted to the kinds the architecture's spec lists
// (ArchSpec::gguf_tensors); for reference:
//   token_embd               model.embed_tokens
//   output_norm              model.norm
//   output                   lm_head           (absent when tied: tie_word_embeddings)
//   blk.N.attn_norm          model.layers.N.input_layernorm
//   blk.N.ffn_norm           model.layers.N.post_attention_layernorm
//   blk.N.attn_output        model.layers.N.self_attn.o_proj
//   blk.N.ffn_gate_inp       model.layers.N.mlp.gate                  (router)
//   blk.N.ffn_{gate,up,down} model.layers.N.mlp.{gate,up,down}_proj   (dense layers)
//   blk.N.ffn_{gate,up,down}_exps   split into model.layers.N.mlp.experts.E.{gate,up,down}_proj
//   blk.N.ffn_gate_up_exps   (convert --fuse-gate-up-exps) split into experts.E.gate_proj and up_proj
// deepseek2 only:
//   blk.N.attn_q             self_attn.q_proj     (q_lora_rank absent, e.g. V2-Lite)
//   blk.N.attn_q_a           self_attn.q_a_proj
//   blk.N.attn_q_a_norm      self_attn.q_a_layernorm
//   blk.N.attn_q_b           self_attn.q_b_proj
//   blk.N.attn_kv_a_mqa      self_attn.kv_a_proj_with_mqa
//   blk.N.attn_kv_a_norm     self_attn.kv_a_layernorm
//   blk.N.attn_kv_b          self_attn.kv_b_proj  (older files only)
//   blk.N.attn_k_b           self_attn.k_b_proj   (newer files; see below, not an HF tensor)
//   blk.N.attn_v_b           self_attn.v_b_proj   (newer files; see below, not an HF tensor)
//   blk.N.ffn_{gate,up,down}_shexp  mlp.shared_experts.{gate,up,down}_proj
//   blk.N.exp_probs_b.bias   mlp.gate.e_score_correction_bias
// qwen3moe only:
//   blk.N.attn_{q,k,v}       self_attn.{q,k,v}_proj
//   blk.N.attn_qkv           (convert --fuse-qkv) split by rows into q_proj, k_proj, v_proj
//   blk.N.attn_{q,k}_norm    self_attn.{q,k}_norm
// gpt-oss only:
//   blk.N.attn_{q,k,v}       self_attn.{q,k,v}_proj (and .bias; or fused attn_qkv)
//   blk.N.attn_sinks.weight  self_attn.sinks
//   blk.N.post_attention_norm  post_attention_layernorm
//   blk.N.ffn_gate_inp       mlp.router (.weight, .bias)
//   blk.N.ffn_{gate,up,down}_exps (.weight {E,out,in} MXFP4, .bias {E,out})
//                            split into mlp.experts.E.{gate,up,down}_proj.{weight,bias}.
//     These per-expert names are strata's, not HF's: HF ships one fused,
//     row-interleaved gate_up_proj (_blocks/_scales) per layer. The converter
//     de-interleaves gate (even rows) and up (odd rows) and repacks MXFP4 into
//     ggml's block layout (DType::MXFP4), so a GGUF gpt-oss needs a binding
//     path for separate gate/up experts (docs/gguf.md).
// Other GGUF tensors (rope_freqs, nextn.*, ...) are not exposed; unmapped()
// lists them.
//
// ---------------------------------------------------------------------------
// Layouts. GGUF stores ne innermost first; TensorView shapes here are the HF
// (row-major, outermost first) order, so an nn.Linear weight [out, in] is
// {out, in} exactly as in the safetensors checkpoint. For deepseek2 and
// qwen3moe the converter changes no weight layout (no q/k permutation as it
// does for LLaMA: ggml's NORM rope rotates adjacent pairs exactly like
// DeepSeek's interleaved rope, and qwen3moe uses NEOX rope, same as HF), with
// these exceptions:
//   * Routed experts are stacked: ffn_gate_exps / ffn_up_exps are {E, I, H},
//     ffn_down_exps is {E, H, I} (torch.stack of the per-expert [out, in]
//     matrices along a new dim 0). Expert e is the contiguous slice at byte
//     offset e × nbytes / E, which is what this adapter exposes as
//     experts.E.*_proj, shape {I, H} / {H, I}.
//   * --fuse-gate-up-exps: ffn_gate_up_exps is {E, 2I, H}, torch.cat([gate,
//     up], dim=1): within each expert, the gate rows come first.
//   * --fuse-qkv: attn_qkv is torch.cat([q, k, v], dim=0), rows
//     [H·d | KV·d | KV·d].
//   * deepseek2 MLA, newer converters (llama.cpp "MLA with the absorption
//     optimization"): kv_b_proj [H·(nope+v), lora] is not stored. Instead
//         kv_b = kv_b_proj.view(H, nope + v, lora)
//         k_b, v_b = kv_b.split([nope, v], dim=1)
//         attn_k_b = k_b.transpose(1, 2)      # GGUF ne [nope, lora, H]
//         attn_v_b = v_b                      # GGUF ne [lora, v, H]
//     so, with nope = qk_nope_head_dim, v = v_head_dim, lora = kv_lora_rank:
//       self_attn.k_b_proj.weight  shape {H, lora, nope}
//           k_b_proj[h][j][i] = kv_b_proj[h·(nope+v) + i][j]
//           Per head a [lora × nope] matrix: W_UK[h]ᵀ. The absorbed query is
//           q_abs[h] = k_b_proj[h] · q_nope[h] (an ordinary out=lora, in=nope
//           linear on the head's slice, byte offset h × nbytes / H).
//       self_attn.v_b_proj.weight  shape {H, v, lora}
//           v_b_proj[h][o][j] = kv_b_proj[h·(nope+v) + nope + o][j]
//           Per head exactly W_UV[h] (out=v, in=lora): the value rows of
//           kv_b_proj, unchanged.
//     These files also write attention.key_length = lora + rope,
//     value_length = lora and head_count_kv = 1 (MLA run as MQA), with the
//     real head sizes in attention.key_length_mla (nope + rope) and
//     value_length_mla (v); config_from_gguf reads the latter. Older files
//     store attn_kv_b ({H·(nope+v), lora}, as HF) with key_length = nope +
//     rope, value_length = v, head_count_kv = H.
//   * 1-D tensors (norms, biases, exp_probs_b) are written as F32 whatever
//     the checkpoint's dtype; big tensors may be quantized (Q8_0, Q4_K, ...;
//     their TensorView dtype says so; rows are whole blocks along `in`).
//
// ---------------------------------------------------------------------------
// Metadata → ModelConfig (A = the architecture name). Each key's spelling is
// checked against gguf-py/gguf/constants.py and src/llama-model.cpp.
//   vocab_size               rows of token_embd (cross-checked with A.vocab_size
//                            when present), else A.vocab_size, else the length
//                            of tokenizer.ggml.tokens
//   hidden_size              A.embedding_length
//   num_hidden_layers        A.block_count
//   num_attention_heads      A.attention.head_count
//   num_key_value_heads      qwen3moe: A.attention.head_count_kv (default head_count);
//                            deepseek2: = head_count (the GGUF's 1 is MLA-as-MQA)
//   head_dim                 qwen3moe: A.attention.key_length (default hidden/heads)
//   intermediate_size        A.feed_forward_length (dense layers)
//   moe_intermediate_size    A.expert_feed_forward_length
//   max_position_embeddings  A.context_length
//   rms_norm_eps             A.attention.layer_norm_rms_epsilon
//   rope_theta               A.rope.freq_base (default 10000)
//   n_routed_experts/num_experts   A.expert_count
//   num_experts_per_tok      A.expert_used_count
//   n_shared_experts         A.expert_shared_count (default 0)
//   n_group / topk_group     A.expert_group_count / A.expert_group_used_count (default 1)
//   routed_scaling_factor    A.expert_weights_scale (default 1)
//   norm_topk_prob           A.expert_weights_norm; absent: false for deepseek2 (the
//                            converter writes it only when true), true for qwen3moe
//                            (llama.cpp hard-codes it; released Qwen3-MoE use true)
//   scoring_func             A.expert_gating_func: 1 softmax, 2 sigmoid; absent:
//                            softmax for deepseek2 (llama.cpp's DeepSeek-V2 default),
//                            softmax for qwen3moe
//   topk_method              "noaux_tc" for deepseek2 (not recorded in GGUF)
//   first_k_dense_replace    A.leading_dense_block_count (default 0)
//   q_lora_rank              A.attention.q_lora_rank (absent or 0: none)
//   kv_lora_rank             A.attention.kv_lora_rank
//   qk_rope_head_dim         A.rope.dimension_count
//   qk_nope_head_dim         A.attention.key_length_mla − rope (older files: key_length − rope)
//   v_head_dim               A.attention.value_length_mla (older files: value_length)
//   mlp_only_layers          qwen3moe: layers with blk.N.ffn_gate but no ffn_gate_inp
//   tie_word_embeddings      output.weight absent
//   attention_bias           blk.0.attn_q.bias (qwen3moe) / blk.0.attn_q_a.bias present
//   bos_token_id             tokenizer.ggml.bos_token_id
//   eos_token_id             tokenizer.ggml.eos_token_id, then eot_token_id and
//                            eom_token_id when present and different
// f32 values are read back as the shortest decimal that rounds to the stored
// f32 (1e-6f → 1e-6, 2.827f → 2.827): the converter wrote f32(x) for a
// decimal x from config.json, and this recovers x, so the double-precision
// config equals the HF one.
//
// RoPE / YaRN. A.rope.scaling.type "yarn" gives rope type yarn with
//   factor                          A.rope.scaling.factor
//   original_max_position_embeddings A.rope.scaling.original_context_length (default context_length)
//   beta_fast / beta_slow           A.rope.scaling.yarn_beta_fast / yarn_beta_slow (default 32 / 1)
//   attention_factor                A.rope.scaling.yarn_attn_factor when present
// deepseek2: the converter stores yarn_log_multiplier = 0.1 · mscale_all_dim
// (DeepSeek-V3 / Kimi-K2: mscale = mscale_all_dim = 1.0 → 0.1) and llama.cpp
// divides the 0.1 back out, assuming mscale == mscale_all_dim
// ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX] in src/models/deepseek2.cpp and
// llama-context.cpp). We set mscale = mscale_all_dim = yarn_log_multiplier /
// 0.1. Then, as in transformers:
//   Rope attention factor = get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) = 1
//   attention_scale()     = (0.1 · mscale_all_dim · ln f + 1)² / sqrt(nope + rope)
// which is also llama.cpp's kq_scale (mscale = 1 + 0.1 · rope_yarn_log_mul · ln f,
// kq_scale = mscale² / sqrt(n_embd_head_k_mla)), with its rope magnitude
// factor cancelling to 1. Without yarn_log_multiplier, mscale and
// mscale_all_dim stay unset (transformers: attention factor get_mscale(f) on
// cos/sin, no softmax sharpening; llama.cpp differs here, see docs/gguf.md).
// qwen3moe: the converter writes no log multiplier; YaRN then behaves as in
// transformers (attention factor 0.1 · ln f + 1 on cos/sin), as in llama.cpp.
// "none"/absent: default rope. Other types ("linear", "longrope") are rejected.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/gguf.h"
#include "formats/tensor.h"
#include "model/model_config.h"

namespace strata {

// Throws strata::Error "<file>: ..." for an unsupported architecture, a
// missing or mistyped key, or a config that ModelConfig's own validation
// rejects. `tensors` is where the weights are looked up (the file itself by
// default; a multi-file source for split models).
ModelConfig config_from_gguf(const GgufFile& file);
ModelConfig config_from_gguf(const GgufFile& metadata, const TensorSource& tensors);

// The HF-named view. The non-owning forms need `file` (or `tensors`) to
// outlive the view; the owning form keeps the file alive itself.
std::unique_ptr<TensorSource> hf_view_of_gguf(const GgufFile& file, const ModelConfig& config);
std::unique_ptr<TensorSource> hf_view_of_gguf(std::unique_ptr<GgufFile> file, const ModelConfig& config);

class GgufHfView : public TensorSource {
 public:
  // `tensors` holds GGUF-named tensors (a GgufFile, or several); `arch` is
  // the GGUF architecture; `describe` names the source in errors.
  GgufHfView(const TensorSource& tensors, const std::string& arch, const ModelConfig& config, std::string describe);

  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;  // sorted
  std::string describe() const override { return describe_; }

  // The GGUF tensor an HF name was cut from ("" if the name is unknown).
  std::string gguf_name(const std::string& hf_name) const;
  // GGUF tensors with no HF counterpart, sorted.
  const std::vector<std::string>& unmapped() const { return unmapped_; }

  // Keeps `file` alive as long as the view (for the owning factory).
  void own(std::unique_ptr<GgufFile> file) { owned_ = std::move(file); }

 private:
  void add(const std::string& hf_name, TensorView view, const std::string& gguf_name);

  std::string describe_;
  std::vector<TensorView> views_;
  std::vector<std::string> sources_;  // GGUF name per view
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::string> unmapped_;
  std::unique_ptr<GgufFile> owned_;
};

}  // namespace strata
