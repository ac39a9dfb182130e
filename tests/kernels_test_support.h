#pragma once
// Helpers shared by the kernel tests: restoring the ISA, the ISAs this
// machine runs, f16 bits and random activations.
#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "util/thread_pool.h"

namespace strata::kernel_tests {

// Restores the process-wide ISA when a test is done with it.
struct IsaGuard {
  kernels::Isa saved = kernels::active_isa();
  ~IsaGuard() { kernels::set_isa(saved); }
};

inline std::vector<kernels::Isa> supported_isas() {
  std::vector<kernels::Isa> v;
  for (kernels::Isa i : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512})
    if (kernels::isa_supported(i)) v.push_back(i);
  return v;
}

inline uint16_t to_f16(float v) {
  _Float16 h = static_cast<_Float16>(v);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

inline std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// n random rows (seeded) multiplied on every ISA this machine runs, over
// `pool`, give the scalar reference's bits, every output written.
inline void expect_scalar_bits_on_every_isa(const kernels::WeightMatrix& w, size_t n, uint64_t seed, ThreadPool* pool) {
  IsaGuard guard;
  const size_t out = static_cast<size_t>(w.out), in = static_cast<size_t>(w.in);
  std::vector<float> x = random_vector(n * in, seed);
  kernels::set_isa(kernels::Isa::Scalar);
  std::vector<float> ref(n * out);
  kernels::linear(w, x.data(), n, ref.data(), nullptr);
  for (kernels::Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    std::vector<float> y(n * out, -1.0f);
    kernels::linear(w, x.data(), n, y.data(), pool);
    for (size_t k = 0; k < y.size(); ++k)
      ASSERT_EQ(std::bit_cast<uint32_t>(y[k]), std::bit_cast<uint32_t>(ref[k]))
          << kernels::isa_name(isa) << " n=" << n << " row " << k / out << " out " << k % out;
  }
}

// On every ISA: each of n random rows multiplied alone gives its bits inside
// the batch, at 1, 2 and 3 threads and without a pool; and the slice of
// `rows` rows from `row0` gives the parent's bits for them (attention
// multiplies head slices).
inline void expect_rows_independent(const kernels::WeightMatrix& w, size_t n, int64_t row0, int64_t rows) {
  IsaGuard guard;
  const size_t out = static_cast<size_t>(w.out), in = static_cast<size_t>(w.in), k = static_cast<size_t>(rows);
  std::vector<float> x = random_vector(n * in, 6);
  ThreadPool p1(1), p2(2), p3(3);
  for (kernels::Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    std::vector<float> batched(n * out);
    kernels::linear(w, x.data(), n, batched.data(), &p3);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p1, &p2, &p3}) {
      std::vector<float> again(n * out);
      kernels::linear(w, x.data(), n, again.data(), pool);
      ASSERT_EQ(0, std::memcmp(again.data(), batched.data(), again.size() * sizeof(float))) << kernels::isa_name(isa);
      for (size_t r = 0; r < n; ++r) {
        std::vector<float> alone(out);
        kernels::linear(w, &x[r * in], 1, alone.data(), pool);
        ASSERT_EQ(0, std::memcmp(alone.data(), &batched[r * out], out * sizeof(float)))
            << kernels::isa_name(isa) << " row " << r;
      }
    }
    const kernels::WeightMatrix s = w.row_slice(row0, rows);
    std::vector<float> sliced(n * k);
    kernels::linear(s, x.data(), n, sliced.data(), &p2);
    for (size_t r = 0; r < n; ++r)
      ASSERT_EQ(0, std::memcmp(&sliced[r * k], &batched[r * out + static_cast<size_t>(row0)], k * sizeof(float)))
          << kernels::isa_name(isa);
  }
}

}  // namespace strata::kernel_tests
