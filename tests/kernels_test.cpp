// Kernel properties: correct against a double-precision evaluation, and the
// same bits for a row whatever the batch size or thread count.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "formats/dtype.h"
#include "kernels/kernel_abi.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels_test_support.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

TEST(DType, HalfMatchesCompilerConversionExhaustively) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    _Float16 v;
    uint16_t bits = static_cast<uint16_t>(h);
    std::memcpy(&v, &bits, 2);
    float expect = static_cast<float>(v);
    float got = f16_to_f32(bits);
    if (std::isnan(expect))
      EXPECT_TRUE(std::isnan(got)) << h;
    else
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expect)) << h;
  }
}

TEST(DType, Fp8E4M3SpecValues) {
  // Values from the OCP 8-bit floating point specification (E4M3).
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
}

TEST(DType, Bf16RoundTrip) {
  for (float f : {1.0f, -2.5f, 3.140625f, 0x1p-100f, 65536.0f}) EXPECT_EQ(bf16_to_f32(f32_to_bf16_round(f)), f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16_round(1.00390625f)), 1.0f);  // ties to even
}

struct TestMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  std::vector<double> dense;  // the exact values the stored weights represent
  kernels::WeightMatrix w;
};

TestMatrix make_matrix(DType t, int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  TestMatrix m;
  m.bytes.resize(static_cast<size_t>(out * in) * dtype_size(t));
  m.dense.resize(static_cast<size_t>(out * in));
  const int64_t bo = 128, bi = 128;
  if (t == DType::F8_E4M3) {
    m.scales.resize(((out + bo - 1) / bo) * ((in + bi - 1) / bi));
    for (auto& s : m.scales) s = std::ldexp(1.0f, -8) * (1.0f + std::fabs(nd(rng)));
  }
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const size_t k = static_cast<size_t>(o * in + i);
      float v = nd(rng);
      switch (t) {
        case DType::F32: std::memcpy(&m.bytes[4 * k], &v, 4); m.dense[k] = v; break;
        case DType::BF16: {
          uint16_t b = f32_to_bf16_round(v);
          std::memcpy(&m.bytes[2 * k], &b, 2);
          m.dense[k] = bf16_to_f32(b);
          break;
        }
        case DType::F16: {
          _Float16 hv = static_cast<_Float16>(v);
          uint16_t b;
          std::memcpy(&b, &hv, 2);
          std::memcpy(&m.bytes[2 * k], &b, 2);
          m.dense[k] = f16_to_f32(b);
          break;
        }
        default: {
          uint8_t b = static_cast<uint8_t>(rng() & 0xff);
          if ((b & 0x7f) == 0x7f) b = 0x3f;  // avoid NaN encodings
          m.bytes[k] = b;
          const float s = m.scales[(o / bo) * ((in + bi - 1) / bi) + i / bi];
          m.dense[k] = static_cast<double>(fp8_e4m3_to_f32(b)) * s;
        }
      }
    }
  m.w.dtype = t;
  m.w.out = out;
  m.w.in = in;
  m.w.data = m.bytes.data();
  if (t == DType::F8_E4M3) {
    m.w.block_scale = m.scales.data();
    m.w.block_out = bo;
    m.w.block_in = bi;
  }
  return m;
}

class LinearByType : public ::testing::TestWithParam<DType> {};

TEST_P(LinearByType, MatchesDoublePrecisionReference) {
  const int64_t out = 150, in = 300;  // partial scale blocks on both axes
  TestMatrix m = make_matrix(GetParam(), out, in, 7);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(3 * in), y(3 * out);
  for (auto& v : x) v = nd(rng);
  kernels::linear(m.w, x.data(), 3, y.data(), nullptr);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double ref = 0.0, mag = 0.0;
      for (int64_t i = 0; i < in; ++i) {
        ref += m.dense[o * in + i] * x[r * in + i];
        mag += std::fabs(m.dense[o * in + i] * x[r * in + i]);
      }
      EXPECT_NEAR(y[r * out + o], ref, 1e-5 * mag + 1e-6) << "row " << r << " out " << o;
    }
}

TEST_P(LinearByType, RowResultIndependentOfBatchAndThreads) {
  const int64_t out = 97, in = 260;
  TestMatrix m = make_matrix(GetParam(), out, in, 3);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t n = 9;
  std::vector<float> x(n * in);
  for (auto& v : x) v = nd(rng);
  std::vector<float> batched(n * out);
  ThreadPool pool3(3);
  kernels::linear(m.w, x.data(), n, batched.data(), &pool3);
  ThreadPool pool1(1);
  for (size_t r = 0; r < n; ++r) {
    std::vector<float> alone(out);
    kernels::linear(m.w, &x[r * in], 1, alone.data(), r % 2 ? &pool1 : nullptr);
    EXPECT_EQ(0, std::memcmp(alone.data(), &batched[r * out], out * sizeof(float))) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearByType,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16, DType::F8_E4M3),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Linear, TransposedProductMatchesReference) {
  TestMatrix m = make_matrix(DType::BF16, 40, 70, 9);
  std::vector<float> x(40), y(70);
  for (int i = 0; i < 40; ++i) x[i] = std::sin(static_cast<float>(i));
  kernels::linear_transposed(m.w, x.data(), y.data());
  for (int i = 0; i < 70; ++i) {
    double ref = 0.0;
    for (int o = 0; o < 40; ++o) ref += m.dense[o * 70 + i] * x[o];
    EXPECT_NEAR(y[i], ref, 1e-4);
  }
}

// Scores as attention and routers give them: a spread of magnitudes, some far
// below the max (exp underflows, or lands just above kExpLow), masked ones
// (-inf); `shift` moves them all (all-negative rows), and `tail_max` puts
// the max in the last, partial group of sixteen.
std::vector<float> softmax_input(size_t n, uint32_t seed, float shift = 0.0f, bool tail_max = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-30.0f, 12.0f), edge(-88.0f, -85.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = i % 37 == 5   ? -std::numeric_limits<float>::infinity()
           : i % 11 == 3 ? -150.0f
           : i % 13 == 7 ? 12.0f + edge(rng)
                         : u(rng) + shift;
  if (n > 0) v[0] = 12.0f + shift;
  if (tail_max && n % 16 != 0) v[n - 1] = 20.0f + shift;
  return v;
}

// softmax(x, n) on every ISA against the scalar one, bit for bit, at pointers
// 0-15 floats into a buffer, and nothing written outside [x, x + n).
void expect_softmax_bits(const std::vector<float>& x, const char* what) {
  kernel_tests::IsaGuard guard;
  const size_t n = x.size();
  kernels::set_isa(kernels::Isa::Scalar);
  std::vector<float> ref = x;
  kernels::softmax(ref.data(), n);
  for (kernels::Isa isa : kernel_tests::supported_isas()) {
    kernels::set_isa(isa);
    for (size_t offset : {0, 3, 15}) {
      std::vector<float> buf(offset + n + 16, 7.0f);
      std::copy(x.begin(), x.end(), buf.begin() + static_cast<std::ptrdiff_t>(offset));
      kernels::softmax(buf.data() + offset, n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(buf[offset + i]), std::bit_cast<uint32_t>(ref[i]))
            << what << " " << kernels::isa_name(isa) << " n=" << n << " offset " << offset << " i=" << i;
      for (size_t i = 0; i < buf.size(); ++i)
        if (i < offset || i >= offset + n) ASSERT_EQ(buf[i], 7.0f) << what << " wrote outside at " << i;
    }
  }
}

TEST(Ops, SoftmaxGivesTheScalarBitsOnEveryIsa) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (size_t n : {0, 1, 2, 7, 15, 16, 17, 31, 33, 100, 1000, 4097}) {
    const uint32_t seed = static_cast<uint32_t>(n);
    expect_softmax_bits(softmax_input(n, seed), "scores");
    expect_softmax_bits(softmax_input(n, seed, -60.0f), "all negative");
    expect_softmax_bits(softmax_input(n, seed, 0.0f, true), "max in the tail");
    if (n == 0) continue;
    std::vector<float> zeros(n, 0.0f);
    for (size_t i = 0; i < n; i += 2) zeros[i] = -0.0f;
    expect_softmax_bits(zeros, "signed zeros");
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      std::vector<float> x = softmax_input(n, seed);
      x[at] = nan;  // every output NaN, with one NaN's bits
      expect_softmax_bits(x, "a NaN");
      x[at] = inf;
      expect_softmax_bits(x, "+inf");
    }
    expect_softmax_bits(std::vector<float>(n, -inf), "all -inf");
  }
}

// softmax's exp against the C library's exp in double: every 61st float of
// [kExpLow, 0], and the worst one of an exhaustive check, within 1.011 units
// in the last place of the float nearest the true value; 0 below kExpLow and
// for -inf, NaN for NaN.
TEST(Ops, SoftmaxExpIsWithinOneUlp) {
  using kernels::detail::exp_shifted;
  auto ulps = [](float d) {
    const double want = std::exp(static_cast<double>(d));
    const float near = static_cast<float>(want);
    const double ulp = static_cast<double>(std::nextafter(near, INFINITY)) - near;
    return std::fabs(static_cast<double>(exp_shifted(d)) - want) / ulp;
  };
  double worst = 0;
  const uint32_t last = std::bit_cast<uint32_t>(kernels::detail::kExpLow);
  for (uint32_t b = std::bit_cast<uint32_t>(-0.0f); b <= last; b += 61) worst = std::max(worst, ulps(std::bit_cast<float>(b)));
  EXPECT_LE(worst, 1.011);
  EXPECT_GT(ulps(-0x1.782f42p+2f), 1.0);  // the exhaustive check's worst: 1.0104
  EXPECT_LE(ulps(-0x1.782f42p+2f), 1.011);
  EXPECT_EQ(exp_shifted(0.0f), 1.0f);
  EXPECT_GT(exp_shifted(kernels::detail::kExpLow), 0.0f);
  EXPECT_EQ(exp_shifted(std::nextafter(kernels::detail::kExpLow, -INFINITY)), 0.0f);
  EXPECT_EQ(exp_shifted(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_shifted(std::numeric_limits<float>::quiet_NaN())));
}

// Each output against the C library's exp in double, taken of the same float
// difference x − max and divided by the max's output (exp(0) times the same
// reciprocal): within a few units in the last place where the output is a
// normal float, exactly 0 where the difference is below kExpLow (masked
// scores included); the outputs sum to 1; a NaN score makes every output NaN.
TEST(Ops, SoftmaxIsWithinAFewUlpOfExpInDouble) {
  kernel_tests::IsaGuard guard;
  for (kernels::Isa isa : kernel_tests::supported_isas()) {
    kernels::set_isa(isa);
    for (size_t n : {1, 3, 16, 17, 100, 1000, 4097}) {
      const std::vector<float> x = softmax_input(n, static_cast<uint32_t>(7 * n + 1));
      size_t top = 0;
      for (size_t i = 1; i < n; ++i) top = x[i] > x[top] ? i : top;
      std::vector<float> y = x;
      kernels::softmax(y.data(), n);
      double sum = 0;
      for (size_t i = 0; i < n; ++i) {
        sum += y[i];
        const float d = x[i] - x[top];
        if (d < kernels::detail::kExpLow) {
          EXPECT_EQ(y[i], 0.0f) << kernels::isa_name(isa) << " n=" << n << " i=" << i;
          continue;
        }
        if (y[i] < std::numeric_limits<float>::min()) continue;  // subnormal: its own rounding
        const double want = std::exp(static_cast<double>(d));
        const double got = static_cast<double>(y[i]) / static_cast<double>(y[top]);
        EXPECT_NEAR(got, want, 5e-7 * want) << kernels::isa_name(isa) << " n=" << n << " i=" << i;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << kernels::isa_name(isa) << " n=" << n;
    }
    std::vector<float> bad{1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
    kernels::softmax(bad.data(), bad.size());
    for (float v : bad) EXPECT_TRUE(std::isnan(v)) << kernels::isa_name(isa);
    std::vector<float> one{-3.0f};
    kernels::softmax(one.data(), 1);
    EXPECT_EQ(one[0], 1.0f);
  }
}

TEST(Ops, SoftmaxAndNorm) {
  std::vector<float> v{1.0f, 2.0f, 3.0f};
  kernels::softmax(v.data(), 3);
  EXPECT_NEAR(v[0] + v[1] + v[2], 1.0f, 1e-6);
  EXPECT_NEAR(v[2] / v[1], std::exp(1.0f), 1e-5);
  std::vector<float> x{3.0f, 4.0f}, w{1.0f, 2.0f}, y(2);
  kernels::rms_norm(x.data(), w.data(), 2, 0.0f, y.data());
  const float inv = 1.0f / std::sqrt(12.5f);
  EXPECT_NEAR(y[0], 3.0f * inv, 1e-6);
  EXPECT_NEAR(y[1], 8.0f * inv, 1e-6);
}

}  // namespace
}  // namespace strata
