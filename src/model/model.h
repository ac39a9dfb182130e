#pragma once
// A loaded model: configuration, resident trunk weights, an expert provider,
// and the forward pass over a batch of rows, layer by layer:
// norm → attention (KV) → norm → dense MLP or router + experts.
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "formats/tensor.h"
#include "kernels/linear.h"
#include "model/attention.h"
#include "model/expert_provider.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace strata {

struct LoadOptions {
  int threads = 0;  // 0: all hardware threads
};

struct Layer {
  const float* attn_norm = nullptr;
  const float* mlp_norm = nullptr;
  std::unique_ptr<Attention> attention;
  std::optional<SwiGlu> dense;    // dense layers
  std::unique_ptr<MoeBlock> moe;  // routed layers
};

class Model {
 public:
  // Reads config.json and the safetensors of a Hugging Face model directory.
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const LoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::unique_ptr<KvCache> new_cache() const;

  // Runs one step over `rows`; writes vocab_size logits for each row with
  // want_logits, in row order, into `logits`. Advances each cache's length.
  void forward(std::span<const Row> rows, float* logits);

 private:
  Model(std::filesystem::path dir, ModelConfig config, std::unique_ptr<TensorSource> source, int threads);
  void bind_weights();

  std::filesystem::path dir_;
  ModelConfig config_;
  std::unique_ptr<TensorSource> source_;
  WeightBinder binder_;
  ThreadPool pool_;
  kernels::WeightMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  std::unique_ptr<ExpertProvider> experts_;
  std::vector<Layer> layers_;
};

// Per-architecture binding of one decoder layer (deepseek_v3.cpp, qwen3_moe.cpp).
Layer bind_deepseek_v3_layer(WeightBinder& w, const ModelConfig& c, int64_t layer, ExpertProvider& experts);
Layer bind_qwen3_moe_layer(WeightBinder& w, const ModelConfig& c, int64_t layer, ExpertProvider& experts);
Layer bind_gpt_oss_layer(WeightBinder& w, const ModelConfig& c, int64_t layer, ExpertProvider& experts);
// gpt-oss keeps its experts in fused 3-D tensors rather than one tensor each.
ExpertBindFn gpt_oss_experts(const TensorSource& source, const ModelConfig& c);

}  // namespace strata
