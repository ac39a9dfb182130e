#pragma once
// Rotary position embedding: the frequencies (plain or YaRN-scaled, computed
// in f32 the way transformers does) and their application in the two layouts
// checkpoints use.
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace strata {

class Rope {
 public:
  // `dim` is the rotated width (DeepSeek: qk_rope_head_dim; Qwen3: head_dim).
  Rope(const RopeConfig& config, int64_t dim, bool interleaved);

  // Rotates x[0..dim) in place for position `pos`. Interleaved layout rotates
  // pairs (x0,x1),(x2,x3)... and leaves the result de-interleaved (all first
  // elements, then all second ones) as transformers does; since queries and
  // keys get the same permutation, their dot products are unchanged.
  void apply(float* x, int64_t pos) const;

  int64_t dim() const { return dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float attention_factor() const { return attention_factor_; }

 private:
  int64_t dim_;
  bool interleaved_;
  std::vector<float> inv_freq_;
  float attention_factor_ = 1.0f;
};

}  // namespace strata
