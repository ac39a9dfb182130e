#pragma once
// Binding checkpoint tensors to the shapes an architecture expects. Large
// weights stay where the reader mapped them; only small vectors (norms,
// biases, scales stored in a narrow type) are converted to f32 and owned here.
#include <deque>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "kernels/linear.h"
#include "model/model_config.h"

namespace strata {

class WeightBinder {
 public:
  WeightBinder(const TensorSource& source, const ModelConfig& config) : source_(source), config_(config) {}

  // "<prefix>.weight" of shape [out, in] (+ "<prefix>.weight_scale_inv" for
  // FP8, + "<prefix>.bias" when `bias` is true).
  kernels::WeightMatrix linear(const std::string& prefix, int64_t out, int64_t in, bool bias = false);
  // A 2-D table such as the token embedding, read row by row.
  kernels::WeightMatrix table(const std::string& name, int64_t rows, int64_t cols);
  // A 1-D tensor of `n` elements as f32 (norm weights, biases).
  const float* vector(const std::string& name, int64_t n);
  bool has(const std::string& name) const { return source_.find(name) != nullptr; }

 private:
  const TensorView& expect(const std::string& name, const std::vector<int64_t>& shape);
  const float* to_f32(const TensorView& t);

  const TensorSource& source_;
  const ModelConfig& config_;
  std::deque<std::vector<float>> owned_;
};

}  // namespace strata
