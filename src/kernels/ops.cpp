#include "kernels/ops.h"

#include <cmath>

#include "kernels/linear.h"

namespace strata::kernels {

void rms_norm(const float* x, const float* weight, size_t n, float eps, float* y) {
  const float ss = dot(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * inv);
}

void silu_mul(float* x, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = x[i];
    x[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(float* x, size_t n) {
  if (n == 0) return;
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace strata::kernels
