#include "backend/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "util/error.h"

namespace strata {

namespace {

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// The dimension index at which a frequency completes `rotations` turns over
// the original context (YaRN's correction range).
double correction_dim(double rotations, double dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
}

}  // namespace

Rope::Rope(const RopeConfig& c, int64_t dim, bool interleaved) : dim_(dim), interleaved_(interleaved) {
  if (dim < 0 || dim > kMaxDim)
    throw Error("a rotary width of " + std::to_string(dim) + " is not supported (at most " + std::to_string(kMaxDim) + ")");
  const int64_t half = dim / 2;
  const float base = static_cast<float>(c.theta);
  // base ** (arange(0, dim, 2) / dim), all in f32 like torch.
  std::vector<float> pos_freqs(half);
  for (int64_t i = 0; i < half; ++i)
    pos_freqs[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  inv_freq_.resize(half);
  if (c.type != "yarn") {
    for (int64_t i = 0; i < half; ++i) inv_freq_[i] = 1.0f / pos_freqs[i];
    return;
  }
  const double factor = c.factor;
  if (c.attention_factor) {
    attention_factor_ = static_cast<float>(*c.attention_factor);
  } else if (c.mscale != 0.0 && c.mscale_all_dim != 0.0) {
    attention_factor_ =
        static_cast<float>(yarn_get_mscale(factor, c.mscale) / yarn_get_mscale(factor, c.mscale_all_dim));
  } else {
    attention_factor_ = static_cast<float>(yarn_get_mscale(factor, 1.0));
  }
  const double orig = static_cast<double>(c.original_max_position_embeddings);
  double low = correction_dim(c.beta_fast, static_cast<double>(dim), c.theta, orig);
  double high = correction_dim(c.beta_slow, static_cast<double>(dim), c.theta, orig);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  const float lowf = static_cast<float>(low), spanf = static_cast<float>(high - low);
  const float factorf = static_cast<float>(factor);
  for (int64_t i = 0; i < half; ++i) {
    float ramp = std::clamp((static_cast<float>(i) - lowf) / spanf, 0.0f, 1.0f);
    float extrapolation_weight = 1.0f - ramp;
    float extrapolated = 1.0f / pos_freqs[i];
    float interpolated = 1.0f / (factorf * pos_freqs[i]);
    inv_freq_[i] = interpolated * (1.0f - extrapolation_weight) + extrapolated * extrapolation_weight;
  }
}

void Rope::rotation(int64_t pos, float* cos, float* sin) const {
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < dim_ / 2; ++i) {
    const float angle = inv_freq_[i] * p;
    cos[i] = std::cos(angle) * attention_factor_;
    sin[i] = std::sin(angle) * attention_factor_;
  }
}

void Rope::apply(float* x, int64_t pos) const {
  const int64_t half = dim_ / 2;
  float buf[kMaxDim], c[kMaxDim / 2], s[kMaxDim / 2];
  rotation(pos, c, s);
  for (int64_t i = 0; i < half; ++i) {
    const float a = interleaved_ ? x[2 * i] : x[i];
    const float b = interleaved_ ? x[2 * i + 1] : x[i + half];
    buf[i] = a * c[i] - b * s[i];
    buf[i + half] = b * c[i] + a * s[i];
  }
  std::copy_n(buf, dim_, x);
}

}  // namespace strata
