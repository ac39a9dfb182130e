#pragma once
// Rotary position embedding: the frequencies (plain or YaRN-scaled, computed
// in f32 the way transformers does) and their application in the two layouts
// checkpoints use.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata {

// The rotary settings a checkpoint's config gives (config.json's
// rope_theta and rope_scaling; GGUF's rope keys).
struct RopeConfig {
  std::string type = "default";  // "default" or "yarn"
  double theta = 10000.0;
  double factor = 1.0;
  std::optional<double> attention_factor;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position_embeddings = 0;
  bool truncate = true;
  double partial_rotary_factor = 1.0;
};

class Rope {
 public:
  static constexpr int64_t kMaxDim = 1024;  // the widest rotation apply() takes (on the stack)
  // `dim` is the rotated width (DeepSeek: qk_rope_head_dim; Qwen3: head_dim),
  // at most kMaxDim (strata::Error otherwise).
  Rope(const RopeConfig& config, int64_t dim, bool interleaved);

  // Rotates x[0..dim) in place for position `pos`. Interleaved layout rotates
  // pairs (x0,x1),(x2,x3)... and leaves the result de-interleaved (all first
  // elements, then all second ones) as transformers does; since queries and
  // keys get the same permutation, their dot products are unchanged.
  void apply(float* x, int64_t pos) const;
  // The factors apply() rotates pair i by at `pos`: cos[i] and sin[i] for
  // i < dim/2, already times attention_factor() (a device backend rotates
  // with these host values: its own cos and sin would differ in the last bits).
  void rotation(int64_t pos, float* cos, float* sin) const;
  bool interleaved() const { return interleaved_; }

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
