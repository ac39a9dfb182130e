#pragma once
// Where routed experts' weights come from. The model asks for the experts a
// batch selected in a layer and never opens a file itself: the in-memory
// provider below serves them from the mapped checkpoint; streaming providers
// (cache + drives, HTTP) implement the same interface.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/linear.h"
#include "model/model_config.h"

namespace strata {

class WeightBinder;

// One routed expert's feed-forward weights: separate gate and up
// projections, or (gpt-oss) one fused gate_up whose rows alternate gate,
// up, gate, up... Biases, where the format has them, ride in the matrices.
struct ExpertWeights {
  kernels::WeightMatrix gate, up, down;
  kernels::WeightMatrix gate_up;
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  // Weights for `experts` of `layer`, in the same order; valid until release.
  virtual std::vector<const ExpertWeights*> acquire(int64_t layer, std::span<const int32_t> experts) = 0;
  virtual void release(int64_t layer, std::span<const int32_t> experts) {}
};

// Binds one expert's weights from the checkpoint; each architecture knows
// its own tensor layout.
using ExpertBindFn = std::function<ExpertWeights(int64_t layer, int64_t expert)>;

// The per-expert tensor names of DeepSeek-V3 and Qwen3-MoE checkpoints
// (model.layers.L.mlp.experts.E.{gate,up,down}_proj).
ExpertBindFn per_expert_tensors(WeightBinder& w, const ModelConfig& c);

// Serves every routed expert straight from the checkpoint's tensors.
class InMemoryExpertProvider : public ExpertProvider {
 public:
  InMemoryExpertProvider(const ModelConfig& c, const ExpertBindFn& bind);
  // Per-expert tensor names (DeepSeek-V3, Qwen3-MoE, GGUF through its HF view).
  InMemoryExpertProvider(WeightBinder& w, const ModelConfig& c) : InMemoryExpertProvider(c, per_expert_tensors(w, c)) {}
  std::vector<const ExpertWeights*> acquire(int64_t layer, std::span<const int32_t> experts) override;

 private:
  ExpertBindFn bind_;  // kept: it may own converted weights the handles point into
  std::vector<std::vector<ExpertWeights>> experts_;  // [layer][expert]; empty for dense layers
};

}  // namespace strata
