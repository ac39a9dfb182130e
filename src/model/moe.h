#pragma once
// Feed-forward blocks: the dense SwiGLU MLP, the routers of both families and
// the mixture-of-experts block that groups rows by expert so that each
// selected expert's weights are fetched once per batch.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/linear.h"
#include "model/expert_provider.h"
#include "model/model_config.h"
#include "model/tensor_names.h"

namespace strata {

class ThreadPool;
class WeightBinder;

struct SwiGlu {
  kernels::WeightMatrix gate, up, down;
  // out = down(silu(gate(x)) · up(x)) for n rows.
  void forward(const float* x, size_t n, float* out, ThreadPool& pool) const;
  // The three projections of layer `layer` named by the table kinds
  // `gate`, `up`, `down` (the dense MLP's, or the shared experts').
  static SwiGlu bind(WeightBinder& w, TensorKind gate, TensorKind up, TensorKind down, int64_t layer, int64_t hidden,
                     int64_t width);
};

// How an expert turns gate and up projections into the down projection's input.
struct ExpertActivation {
  enum class Kind { SiluGlu, ClampedSwiGlu } kind = Kind::SiluGlu;
  // ClampedSwiGlu (gpt-oss): gate ≤ limit, |up| ≤ limit,
  // h = (up + 1) · gate · sigmoid(alpha · gate).
  float limit = 7.0f;
  float alpha = 1.702f;
};

// out = down(act(gate(x), up(x))) for n rows of one expert; `pool` null
// computes it on the calling thread (same bits either way).
void expert_forward(const ExpertWeights& e, const ExpertActivation& act, const float* x, size_t n, float* out,
                    ThreadPool* pool);

// Chooses, for each row, k experts and their weights.
class Router {
 public:
  virtual ~Router() = default;
  // ids and weights are [n × k]; slot order within a row is unspecified.
  virtual void route(const float* x, size_t n, int32_t* ids, float* weights, ThreadPool& pool) const = 0;
};

// `weight` is the router's linear (HF base name, "<weight>.weight").
// DeepSeek-V3: sigmoid scores; the correction bias (`bias`, a tensor name)
// steers selection only; group-limited top-k; optional renormalisation;
// routed_scaling_factor.
std::unique_ptr<Router> make_sigmoid_group_router(WeightBinder& w, const ModelConfig& c, const std::string& weight,
                                                  const std::string& bias);
// Qwen3-MoE: softmax over all experts, top-k, optional renormalisation.
std::unique_ptr<Router> make_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& prefix);
// gpt-oss: linear with bias, top-k of the logits, softmax over the k chosen.
std::unique_ptr<Router> make_topk_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& prefix);

class MoeBlock {
 public:
  MoeBlock(int64_t layer, const ModelConfig& c, std::unique_ptr<Router> router, std::optional<SwiGlu> shared,
           ExpertProvider& experts, ExpertActivation activation = {});
  // `while_reading` runs once the reads of missing experts are submitted
  // (the model starts next-layer prefetch there, as background reads).
  void forward(const float* x, size_t n, float* out, ThreadPool& pool,
               const std::function<void()>& while_reading = {}) const;
  // The experts this block's router picks for `x` (distinct, the likeliest
  // first): run on the previous layer's residual, a guess at what forward()
  // will need.
  std::vector<int32_t> predict(const float* x, size_t n, ThreadPool& pool) const;
  int64_t layer() const { return layer_; }

 private:
  int64_t layer_;
  const ModelConfig& c_;
  std::unique_ptr<Router> router_;
  std::optional<SwiGlu> shared_;
  ExpertProvider& experts_;
  ExpertActivation activation_;
};

}  // namespace strata
