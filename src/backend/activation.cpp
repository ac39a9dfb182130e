#include <algorithm>
#include <cmath>

#include "backend/expert.h"
#include "kernels/ops.h"

namespace strata {

void apply_activation(const ExpertActivation& act, float* gate, const float* up, size_t n) {
  switch (act.kind) {
    case ExpertActivation::Kind::ClampedSwiGlu:
      for (size_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], act.limit);
        const float u = std::clamp(up[i], -act.limit, act.limit);
        gate[i] = (u + 1.0f) * (g * kernels::sigmoid(g * act.alpha));
      }
      return;
    case ExpertActivation::Kind::Situ:
      for (size_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float a = act.beta * std::tanh(g / act.beta) * kernels::sigmoid(g);
        gate[i] = a * (act.linear_beta * std::tanh(up[i] / act.linear_beta));
      }
      return;
    case ExpertActivation::Kind::SiluGlu:
      kernels::silu_mul(gate, up, n);
      return;
  }
}

}  // namespace strata
