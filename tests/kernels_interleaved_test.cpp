// The interleaved layout (Packing::Interleaved16) of Q8_0, MXFP4 and Q4_K:
// interleaving keeps every weight's value; the product follows linear.h's
// interleaved order, checked against that order computed here straight from
// ggml's block layout; every ISA gives the scalar bits; a row's result does
// not depend on batch size, thread count or slicing.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/dtype.h"
#include "kernels/dispatch.h"
#include "kernels/interleave.h"
#include "kernels/linear.h"
#include "kernels_test_support.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

using kernels::Isa;
using kernel_tests::IsaGuard;
using kernel_tests::random_vector;
using kernel_tests::supported_isas;

float f16_value(const uint8_t* p) {
  _Float16 h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(h);
}

struct Source {
  std::vector<uint8_t> bytes;
  kernels::WeightMatrix w;
};

// Random blocks with sane f16 scales, in ggml's layout (ggml-common.h).
Source random_source(DType t, int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  Source s;
  s.w.dtype = t;
  s.w.out = out;
  s.w.in = in;
  const size_t be = dtype_block_elems(t), bb = dtype_block_bytes(t), blocks = static_cast<size_t>(out * in) / be;
  s.bytes.resize(blocks * bb);
  for (auto& b : s.bytes) b = static_cast<uint8_t>(rng());
  for (size_t k = 0; k < blocks; ++k) {
    uint8_t* blk = &s.bytes[k * bb];
    const uint16_t d = kernel_tests::to_f16((rng() & 1 ? -0.01f : 0.01f) * ud(rng));
    if (t == DType::Q8_0) std::memcpy(blk, &d, 2);
    if (t == DType::MXFP4) blk[0] = static_cast<uint8_t>(110 + rng() % 30);
    if (t == DType::Q4_K) {
      const uint16_t d4 = kernel_tests::to_f16(0.001f * ud(rng)), m4 = kernel_tests::to_f16(0.001f * ud(rng));
      std::memcpy(blk, &d4, 2);
      std::memcpy(blk + 2, &m4, 2);
    }
  }
  s.w.data = s.bytes.data();
  return s;
}

// linear.h's interleaved order for output (o) of one x row, from ggml's own
// block layout: per 32-column block, a fused chain of level·x, then one fused
// multiply by the block scale (Q4_K: and one by -dmin·m with the block's sum).
float contract(const Source& s, int64_t o, const float* x) {
  static const int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const size_t row_bytes = s.w.row_bytes();
  const uint8_t* row = s.bytes.data() + static_cast<size_t>(o) * row_bytes;
  float acc = 0.0f;
  for (int64_t b = 0; b < s.w.in / 32; ++b) {
    float q[32], scale = 0.0f, mn = 0.0f;
    if (s.w.dtype == DType::Q8_0) {
      const uint8_t* blk = row + 34 * b;
      scale = f16_value(blk);
      for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(blk[2 + i]);
    } else if (s.w.dtype == DType::MXFP4) {
      const uint8_t* blk = row + 17 * b;
      scale = std::ldexp(1.0f, blk[0] - 128);
      for (int i = 0; i < 32; ++i) q[i] = kE2M1x2[i < 16 ? blk[1 + i] & 0xF : blk[1 + i - 16] >> 4];
    } else {
      const uint8_t* blk = row + 144 * (b / 8);
      const int j = static_cast<int>(b % 8);
      const uint8_t* sc = blk + 4;
      int scv, mv;
      if (j < 4) {
        scv = sc[j] & 63;
        mv = sc[j + 4] & 63;
      } else {
        scv = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        mv = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      scale = f16_value(blk) * static_cast<float>(scv);
      mn = f16_value(blk + 2) * static_cast<float>(mv);
      const uint8_t* qs = blk + 16 + 32 * (j / 2);
      for (int i = 0; i < 32; ++i) q[i] = j % 2 ? qs[i] >> 4 : qs[i] & 0xF;
    }
    const float* xb = x + 32 * b;
    float sum = 0.0f;
    for (int i = 0; i < 32; ++i) sum = std::fma(q[i], xb[i], sum);
    acc = std::fma(sum, scale, acc);
    if (s.w.dtype == DType::Q4_K) {
      float xs = 0.0f;
      for (int i = 0; i < 32; ++i) xs += xb[i];
      acc = std::fma(-mn, xs, acc);
    }
  }
  return acc;
}

struct Case {
  const char* name;
  DType dtype;
  int64_t in;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
const Case kCases[] = {{"Q8_0", DType::Q8_0, 320}, {"MXFP4", DType::MXFP4, 320}, {"Q4_K", DType::Q4_K, 768}};

class Interleaved : public ::testing::TestWithParam<Case> {};

TEST_P(Interleaved, KeepsEveryWeightAndFollowsTheContract) {
  IsaGuard guard;
  const int64_t out = 48, in = GetParam().in;
  Source s = random_source(GetParam().dtype, out, in, 1);
  ASSERT_TRUE(kernels::interleavable(s.w));
  std::vector<uint8_t> buf(s.bytes.size());
  const kernels::WeightMatrix il = kernels::interleave(s.w, buf.data());
  EXPECT_EQ(il.packing, kernels::Packing::Interleaved16);
  // In place gives the same bytes.
  std::vector<uint8_t> copy = s.bytes;
  kernels::WeightMatrix cw = s.w;
  cw.data = copy.data();
  kernels::interleave_in_place(cw);
  EXPECT_EQ(copy, buf);
  // So do its groups rewritten one by one in any order (the expert cache's
  // threads take them as they come), each with its own scratch.
  std::vector<uint8_t> pieces = s.bytes;
  kernels::WeightMatrix pw = s.w;
  pw.data = pieces.data();
  ASSERT_EQ(kernels::interleave_groups(pw), out / 16);
  for (int64_t g = kernels::interleave_groups(pw) - 1; g >= 0; --g) {
    std::vector<uint8_t> scratch;
    kernels::interleave_group_in_place(pw, g, scratch);
  }
  EXPECT_EQ(pieces, buf);
  EXPECT_EQ(kernels::interleaved_in_place(pw).packing, kernels::Packing::Interleaved16);
  EXPECT_EQ(kernels::interleaved_in_place(pw).data, pieces.data());
  std::vector<uint8_t> scratch;
  EXPECT_THROW(kernels::interleave_group_in_place(pw, out / 16, scratch), Error);

  std::vector<float> x = random_vector(static_cast<size_t>(in), 2), a(in), b(in);
  for (Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    for (int64_t o = 0; o < out; ++o) {
      kernels::dequantize_row(s.w, o, a.data());
      kernels::dequantize_row(il, o, b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << kernels::isa_name(isa) << " row " << o;
    }
    std::vector<float> y(out);
    kernels::linear(il, x.data(), 1, y.data(), nullptr);
    for (int64_t o = 0; o < out; ++o) {
      EXPECT_EQ(std::bit_cast<uint32_t>(y[o]), std::bit_cast<uint32_t>(contract(s, o, x.data())))
          << kernels::isa_name(isa) << " row " << o;
      kernels::dequantize_row(s.w, o, a.data());
      double ref = 0.0, mag = 0.0;
      for (int64_t i = 0; i < in; ++i) {
        ref += static_cast<double>(a[i]) * x[i];
        mag += std::fabs(static_cast<double>(a[i]) * x[i]);
      }
      EXPECT_NEAR(y[o], ref, 1e-5 * mag + 1e-7);
    }
  }
}

// Every ISA gives the scalar bits for the n = 1 tiles and their remainder
// (5 groups), the few-row path in one group of rows and in two, the batched
// path and its remainders (AVX2's; AVX-512 takes groups at every count), with
// a bias.
TEST_P(Interleaved, EveryIsaGivesScalarBits) {
  IsaGuard guard;
  const int64_t out = 80, in = GetParam().in;
  Source s = random_source(GetParam().dtype, out, in, 3);
  std::vector<float> bias = random_vector(out, 4);
  kernels::WeightMatrix il = kernels::interleave_in_place(s.w);
  ThreadPool pool(2);
  for (bool with_bias : {false, true}) {
    il.bias = with_bias ? bias.data() : nullptr;
    for (size_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 67}) kernel_tests::expect_scalar_bits_on_every_isa(il, n, 10 + n, &pool);
  }
}

TEST_P(Interleaved, RowIndependentOfBatchThreadsAndSlices) {
  Source s = random_source(GetParam().dtype, 96, GetParam().in, 5);
  kernel_tests::expect_rows_independent(kernels::interleave_in_place(s.w), 11, 32, 48);
  kernel_tests::expect_rows_independent(kernels::interleave_in_place(s.w), 6, 32, 48);
}

// Rows wide enough that the few-row path walks the output groups in several
// slices (its groups of batch rows take turns on each slice): still the
// scalar bits, and each row's bits alone.
TEST(InterleavedWide, FewRowsOverSeveralSlicesGiveScalarBits) {
  IsaGuard guard;
  // 7 groups of 16 rows; a slice of 2 groups (AVX-512) or 1 (AVX2). Q4_K:
  // each batch row's block sums follow its rows through the slices.
  const int64_t out = 112, in = 4096;
  for (DType dtype : {DType::Q8_0, DType::Q4_K}) {
    Source s = random_source(dtype, out, in, 8);
    kernels::WeightMatrix il = kernels::interleave_in_place(s.w);
    ThreadPool pool(2);
    for (size_t n : {3, 5, 8}) kernel_tests::expect_scalar_bits_on_every_isa(il, n, 20 + n, &pool);
    kernel_tests::expect_rows_independent(il, 7, 16, 64);
  }
}

// A batch of products over one pool (a step's experts, kernels::linear_batch)
// gives each product linear()'s bits: jobs of every interleaved format and a
// plain one, of different widths and row counts, one of them empty, gate and
// up sharing one x and its block sums, on pools of 1, 3 and 8 threads.
TEST(LinearBatch, EachJobGetsItsOwnProductsBits) {
  Source q8 = random_source(DType::Q8_0, 96, 320, 11), q8b = random_source(DType::Q8_0, 48, 320, 12);
  Source mx = random_source(DType::MXFP4, 80, 640, 13), q4 = random_source(DType::Q4_K, 64, 768, 14),
         q4b = random_source(DType::Q4_K, 32, 768, 15);
  const kernels::WeightMatrix w[] = {kernels::interleave_in_place(q8.w), kernels::interleave_in_place(q8b.w),
                                     kernels::interleave_in_place(mx.w), kernels::interleave_in_place(q4.w),
                                     kernels::interleave_in_place(q4b.w)};
  Source plain = random_source(DType::Q8_0, 40, 320, 16);  // 40 rows: not interleavable, the plain kernels
  const kernels::WeightMatrix plain_w = plain.w;
  const size_t rows[] = {7, 1, 0, 5, 5, 33};  // the empty one amid the others: a chunk of groups spans it
  const std::vector<float> x320 = random_vector(33 * 320, 1), x640 = random_vector(33 * 640, 2),
                           x768 = random_vector(33 * 768, 3);
  // q4 and q4b read the same x (gate and up of one expert) and share sums.
  const float* xs[] = {x320.data(), x320.data() + 320, x640.data(), x768.data(), x768.data(), x320.data()};
  std::vector<std::vector<float>> sums(6);
  for (size_t j = 0; j < 6; ++j) sums[j].resize(kernels::linear_sum_floats(j == 5 ? plain_w : w[j], 33));
  for (int threads : {1, 3, 8}) {
    ThreadPool pool(threads);
    std::vector<std::vector<float>> want(6), got(6);
    std::vector<kernels::LinearJob> jobs;
    for (size_t j = 0; j < 6; ++j) {
      const kernels::WeightMatrix& m = j == 5 ? plain_w : w[j];
      want[j].assign(rows[j] * static_cast<size_t>(m.out), 0.0f);
      got[j].assign(want[j].size(), -1.0f);
      kernels::linear(m, xs[j], rows[j], want[j].data(), &pool);
      jobs.push_back({&m, xs[j], rows[j], got[j].data(), j == 4 ? std::span<float>(sums[3]) : std::span<float>(sums[j])});
    }
    std::vector<float> row_scratch(static_cast<size_t>(threads) * 768);
    kernels::linear_batch(jobs, &pool, row_scratch);
    for (size_t j = 0; j < 6; ++j)
      if (!want[j].empty())  // (the empty job's vectors have no data to compare)
        EXPECT_EQ(0, std::memcmp(want[j].data(), got[j].data(), want[j].size() * sizeof(float)))
            << "job " << j << " on " << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(All, Interleaved, ::testing::ValuesIn(kCases), [](const auto& info) { return info.param.name; });

TEST(Interleave, OnlyWholeGroupsOfKnownTypes) {
  Source q8 = random_source(DType::Q8_0, 40, 64, 1);  // 40 rows: not whole groups of 16
  EXPECT_FALSE(kernels::interleavable(q8.w));
  Source q8b = random_source(DType::Q8_0, 32, 64, 1);
  EXPECT_TRUE(kernels::interleavable(q8b.w));
  kernels::WeightMatrix f32;
  std::vector<float> data(16 * 32);
  f32.dtype = DType::F32;
  f32.out = 16;
  f32.in = 32;
  f32.data = reinterpret_cast<const uint8_t*>(data.data());
  EXPECT_FALSE(kernels::interleavable(f32));
  const kernels::WeightMatrix il = kernels::interleave_in_place(q8b.w);
  EXPECT_THROW(il.row_slice(8, 16), Error);
}

}  // namespace
}  // namespace strata
