#pragma once
// Small f32 vector operations used between the matrix products.
#include <cstddef>

namespace strata::kernels {

// y = x / sqrt(mean(x²) + eps) * weight, as transformers' RMSNorm computes it.
void rms_norm(const float* x, const float* weight, size_t n, float eps, float* y);

// In place: x = silu(x) * up.
void silu_mul(float* x, const float* up, size_t n);

// In place numerically stable softmax: the same bits on every ISA and for
// any caller (kernel_abi.h: KernelTable::softmax, its exp and its order).
void softmax(float* x, size_t n);

float sigmoid(float x);

}  // namespace strata::kernels
