#include "kernels/ops.h"

#include <cmath>

#include "kernels/dispatch_internal.h"
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

void softmax(float* x, size_t n) { detail::active_table().softmax(x, n); }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace strata::kernels
