#pragma once
// The attention block of one layer. Implementations first write every row's
// key/value entry into its cache, then let each row attend to positions
// [0, pos] of its own sequence, so rows of one sequence in the same batch see
// each other causally exactly as they would one at a time.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "kernels/linear.h"
#include "model/batch.h"
#include "model/model_config.h"

namespace strata {

class ThreadPool;
class WeightBinder;

class Attention {
 public:
  virtual ~Attention() = default;
  // x: normalised hidden states [rows × hidden]; out: [rows × hidden].
  virtual void forward(int64_t layer, const float* x, std::span<const Row> rows, float* out,
                       ThreadPool& pool) const = 0;
};

// The rows split into runs of consecutive rows of one sequence (same cache),
// each at most `max_rows` long, as [begin, end) pairs: attention takes such
// a run together so that each cached row it reads serves all of them.
std::vector<std::pair<size_t, size_t>> sequence_runs(std::span<const Row> rows, size_t max_rows);

// Rows of one sequence that attend together, and cached keys scored per call
// of kernels::dots (a chunk's keys stay in L1 while each row of the run
// scores them).
inline constexpr size_t kRowsPerBlock = 32;
inline constexpr int64_t kKeysPerChunk = 16;

// Walks cached positions [lo, hi) a chunk of kKeysPerChunk at a time; for each
// chunk, each row r < rows of a run, which sees positions [first(r), end(r)),
// gets visit(r, from, count) for the part of the chunk it sees. A row meets
// its positions in ascending order, so its dots and axpys keep their order.
template <class First, class End, class Visit>
void by_key_chunks(int64_t lo, int64_t hi, size_t rows, First first, End end, Visit visit) {
  for (int64_t s0 = lo; s0 < hi; s0 += kKeysPerChunk) {
    const int64_t s1 = std::min(hi, s0 + kKeysPerChunk);
    for (size_t r = 0; r < rows; ++r) {
      const int64_t from = std::max(s0, first(r)), upto = std::min(s1, end(r));
      if (upto > from) visit(r, from, static_cast<size_t>(upto - from));
    }
  }
}

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
// 1/sqrt(qk head width), times DeepSeek YaRN's mscale² (softmax sharpening).
double mla_attention_scale(const ModelConfig& c);

// Grouped-query attention: optionally with per-head q/k RMSNorm (Qwen3-MoE),
// attention sinks (config.attention_sinks) and per-layer sliding windows
// (config.layer_window; gpt-oss). Binds layer `layer`'s tensors by their
// table names.
struct GqaParts {
  bool qk_norm = false;  // self_attn.q_norm / k_norm before RoPE
};
std::unique_ptr<Attention> make_gqa_attention(WeightBinder& w, const ModelConfig& c, int64_t layer, GqaParts parts);
CacheWidths gqa_cache_widths(const ModelConfig& c);   // kv heads × head_dim, keys and values
double gqa_attention_scale(const ModelConfig& c);      // 1/sqrt(head_dim)

// The config checks every GQA architecture shares (ArchSpec::hf.validate).
class ConfigReader;
void validate_gqa_config(const ConfigReader& r, const ModelConfig& c);

}  // namespace strata
