#pragma once
// Where routed experts' weights come from. The model asks for the experts a
// batch selected in a layer and never opens a file itself: the in-memory
// provider below serves them from the mapped checkpoint; streaming providers
// (cache + drives, HTTP) implement the same interface.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/linear.h"
#include "model/model_config.h"

namespace strata {

class WeightBinder;

struct ExpertWeights {
  kernels::WeightMatrix gate, up, down;
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  // Weights for `experts` of `layer`, in the same order; valid until release.
  virtual std::vector<const ExpertWeights*> acquire(int64_t layer, std::span<const int32_t> experts) = 0;
  virtual void release(int64_t layer, std::span<const int32_t> experts) {}
};

// Serves every routed expert straight from the checkpoint's tensors.
class InMemoryExpertProvider : public ExpertProvider {
 public:
  InMemoryExpertProvider(WeightBinder& w, const ModelConfig& c);
  std::vector<const ExpertWeights*> acquire(int64_t layer, std::span<const int32_t> experts) override;

 private:
  std::vector<std::vector<ExpertWeights>> experts_;  // [layer][expert]; empty for dense layers
};

}  // namespace strata
