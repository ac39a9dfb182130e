#pragma once
// The attention block of one layer: its projections, and the backend's
// attention op over the cache (backend.h: every row's key/value entry is
// written into its cache before any row attends, so rows of one sequence in
// the same step see each other causally exactly as they would one at a time).
#include <cstdint>
#include <memory>
#include <string>
#include <span>

#include "backend/backend.h"
#include "kernels/linear.h"
#include "model/model_config.h"
#include "model/step_state.h"

namespace strata {

class WeightBinder;
struct StepState;

class Attention {
 public:
  virtual ~Attention() = default;
  // x: normalised hidden states [rows × hidden]; out: [rows × hidden]. Its
  // projections and heads go through the step's attention tensors.
  virtual void forward(int64_t layer, Tensor x, std::span<const Row> rows, Tensor out, Backend& backend,
                       StepState& step) const = 0;
};

// Widths of one cache row for this architecture: {key, value}.
struct CacheWidths {
  int64_t key = 0;
  int64_t value = 0;
};
// Through the architecture's spec (ArchSpec::cache_widths).
CacheWidths cache_widths(const ModelConfig& config);

// Multi-head latent attention (DeepSeek-V3 family), in the absorbed form: the
// cache holds the compressed latent, and kv_b_proj is folded into the query
// and the output instead of expanding keys and values for every position.
// Binds layer `layer`'s tensors by their table names (model/tensor_names.h).
std::unique_ptr<Attention> make_mla_attention(WeightBinder& w, const ModelConfig& c, int64_t layer);
// The latent and the rotary key: {kv_lora_rank + qk_rope_head_dim, 0}.
CacheWidths mla_cache_widths(const ModelConfig& c);
AttentionWidths mla_attention_widths(const ModelConfig& c);
// 1/sqrt(qk head width), times DeepSeek YaRN's mscale² (softmax sharpening).
double mla_attention_scale(const ModelConfig& c);

// Kimi Delta Attention (Kimi K3): q/k/v, the decay's low-rank projection,
// beta and the full-rank output gate, then the backend's recurrence
// (KdaAttend) over the per-sequence state, then o_proj. Binds layer
// `layer`'s tensors by their table names.
std::unique_ptr<Attention> make_kda_attention(WeightBinder& w, const ModelConfig& c, int64_t layer);
AttentionWidths kda_attention_widths(const ModelConfig& c);

// Grouped-query attention: optionally with per-head q/k RMSNorm (Qwen3-MoE),
// attention sinks (config.attention_sinks) and per-layer sliding windows
// (config.layer_window; gpt-oss). Binds layer `layer`'s tensors by their
// table names.
struct GqaParts {
  bool qk_norm = false;  // self_attn.q_norm / k_norm before RoPE
};
std::unique_ptr<Attention> make_gqa_attention(WeightBinder& w, const ModelConfig& c, int64_t layer, GqaParts parts);
CacheWidths gqa_cache_widths(const ModelConfig& c);
AttentionWidths gqa_attention_widths(const ModelConfig& c);   // kv heads × head_dim, keys and values
double gqa_attention_scale(const ModelConfig& c);      // 1/sqrt(head_dim)

// The config checks every GQA architecture shares (ArchSpec::hf.validate).
class ConfigReader;
void validate_gqa_config(const ConfigReader& r, const ModelConfig& c);

}  // namespace strata
