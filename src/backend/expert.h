#pragma once
// A routed expert as the backend computes it: its weights (wherever the
// expert provider put them) and its activation.
#include <array>
#include <cstddef>

#include "kernels/linear.h"

namespace strata {

// One routed expert's feed-forward weights: separate gate and up
// projections, or (gpt-oss) one fused gate_up whose rows alternate gate,
// up, gate, up... Biases, where the format has them, ride in the matrices.
struct ExpertWeights {
  kernels::WeightMatrix gate, up, down;
  kernels::WeightMatrix gate_up;
  // All four, for code that treats each matrix alike (unused ones invalid).
  std::array<kernels::WeightMatrix*, 4> matrices() { return {&gate, &up, &down, &gate_up}; }
  std::array<const kernels::WeightMatrix*, 4> matrices() const { return {&gate, &up, &down, &gate_up}; }
};

// How an expert turns gate and up projections into the down projection's input.
struct ExpertActivation {
  enum class Kind { SiluGlu, ClampedSwiGlu, Situ } kind = Kind::SiluGlu;
  // ClampedSwiGlu (gpt-oss): g = min(gate, limit), u = clamp(up, ±limit),
  // h = (u + 1) · (g · sigmoid(g · alpha)). SiluGlu: h = gate / (1 + e^-gate) · up.
  float limit = 7.0f;
  float alpha = 1.702f;
  // Situ (Kimi K3): h = (beta · tanh(gate / beta) · sigmoid(gate)) ·
  // (linear_beta · tanh(up / linear_beta)).
  float beta = 4.0f;
  float linear_beta = 25.0f;
};

// h[i] = act(gate[i], up[i]) written over gate, for n values.
void apply_activation(const ExpertActivation& act, float* gate, const float* up, size_t n);

}  // namespace strata
