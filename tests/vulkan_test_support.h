#pragma once
// What the Vulkan backend's op tests share: a backend of their own, its
// step limits, tensors put and got, a CPU and a GPU backend side by side,
// and the comparisons (bits, or within a relative bound of the largest
// value; a product's magnitudes for its rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "kernels/linear.h"
#include "vulkan/vulkan_backend.h"

namespace strata::vulkan_tests {

// A backend per test: it keeps device copies of weights by host address,
// and another test's matrices may reuse the addresses.
inline std::unique_ptr<Backend> gpu() { return make_vulkan_backend(-1); }

inline StepLimits limits(size_t rows, size_t widest) {
  StepLimits l;
  l.rows = rows;
  l.context = 64;
  l.widest_in = widest;
  l.hidden = widest;
  l.experts = 16;
  l.experts_per_token = 4;
  l.expert_width = widest;
  l.fused_gate_up = true;
  l.depth_values = 8;
  return l;
}

// A tensor of `b` holding v.
inline Tensor put(Backend& b, const std::vector<float>& v) {
  Tensor t = b.allocate(v.size());
  b.upload(t, v.data());
  return t;
}

inline std::vector<float> get(Backend& b, Tensor t) {
  std::vector<float> v(t.size);
  b.download(t, v.data());
  return v;
}

// Both backends, planned alike, fed the same inputs.
struct Pair {
  std::unique_ptr<Backend> cpu = make_cpu_backend(2), vk = gpu();
  explicit Pair(const StepLimits& l) {
    cpu->plan(l);
    vk->plan(l);
  }
  std::pair<Tensor, Tensor> put2(const std::vector<float>& v) { return {put(*cpu, v), put(*vk, v)}; }
};

inline void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
        << what << " value " << i << ": " << want[i] << " vs " << got[i];
}

inline void expect_close(const std::vector<float>& want, const std::vector<float>& got, double rel, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(want[i], got[i], rel * scale + 1e-30) << what << " value " << i;
}

// Σ |W[o][i] · x[r][i]| per output: the scale a product's rounding errors are relative to.
inline std::vector<float> magnitudes(const kernels::WeightMatrix& w, const std::vector<float>& x, size_t n) {
  const size_t in = static_cast<size_t>(w.in), out = static_cast<size_t>(w.out);
  std::vector<float> mag(n * out), row(in);
  for (size_t o = 0; o < out; ++o) {
    kernels::dequantize_row(w, static_cast<int64_t>(o), row.data());
    for (size_t r = 0; r < n; ++r) {
      double s = 0;
      for (size_t i = 0; i < in; ++i) s += std::fabs(static_cast<double>(row[i]) * x[r * in + i]);
      mag[r * out + o] = static_cast<float>(s);
    }
  }
  return mag;
}

}  // namespace strata::vulkan_tests
