// The Vulkan backend's matrix products and embeddings against the CPU
// kernels, format by format (vulkan_backend_test.cpp has the other ops and
// what is compared): the CPU's bits where the driver fuses fma, and a row's
// bits alone as inside a batch, for every kernel a product may take (tiled,
// staged one-row, spread, the interleaved layouts) and for stacked matrices.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/rope.h"
#include "kernels/dispatch.h"
#include "kernels/interleave.h"
#include "kernels/linear.h"
#include "kernels_test_support.h"
#include "scoped_env.h"
#include "runtime/sampler.h"
#include "vulkan/vk_context.h"
#include "vulkan/vk_expert_cache.h"
#include "vulkan/vulkan_backend.h"
#include "weight_formats.h"
#include "vulkan_test_support.h"

namespace strata {
namespace {

using kernel_tests::random_vector;
using namespace kernel_tests::formats;
using namespace vulkan_tests;

class VulkanFormats : public ::testing::TestWithParam<FmtCase> {};

// y = x · Wᵀ for several batch sizes agrees with the CPU kernels (the same
// dequantization, the same 16-lane order: the CPU's bits where the driver
// fuses fma), and each row alone gives its bits inside the batch.
TEST_P(VulkanFormats, ProductsAgreeWithTheCpuKernelsAndIgnoreTheBatch) {
  kernel_tests::IsaGuard guard;
  kernels::set_isa(kernels::Isa::Scalar);
  const int64_t out = 37, in = GetParam().in;
  Mat m = random_matrix(GetParam().fmt, out, in, 3);
  auto gp = gpu();
  Backend& g = *gp;
  g.plan(limits(67, static_cast<size_t>(in)));
  std::vector<float> x = random_vector(67 * in, 10), want(67 * out);
  kernels::linear(m.w, x.data(), 67, want.data(), nullptr);
  const std::vector<float> mag = magnitudes(m.w, x, 67);
  std::vector<float> batched;
  for (size_t n : {67, 1, 4, 5}) {
    Tensor tx = put(g, std::vector<float>(x.begin(), x.begin() + n * in)), ty = g.allocate(n * out);
    g.linear(m.w, tx, n, ty);
    const std::vector<float> y = get(g, ty);
    const std::string what = std::string(GetParam().name) + " n=" + std::to_string(n);
    if (n == 67) {
      batched = y;
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(want[i], y[i], 1e-6 * mag[i] + 1e-30) << what << " value " << i;
    } else {
      expect_same_bits(std::vector<float>(batched.begin(), batched.begin() + n * out), y, what);
    }
  }
}

// One row gives the bits that row has in a batch (linear.comp): through
// linear_row.comp (which stages each row's bytes a window of columns at a
// time from the word below the window's first byte; both its builds, SPREAD
// up to 512 outputs) for rows wider than a window, some of whose byte
// lengths are not a multiple of 4, and through linear.comp built for one row
// for matrices taller than linear_row.comp takes.
TEST(VulkanFormatsWide, OneRowProductsAcrossWindowsGiveTheBatchsBits) {
  const struct {
    const char* name;
    Fmt fmt;
    int64_t in, out;
  } cases[] = {{"Q8_0", Fmt::Q8_0, 1056, 37},   {"Q4_0", Fmt::Q4_0, 1056, 37}, {"MXFP4_gguf", Fmt::Mxfp4, 1056, 37},
               {"F16", Fmt::F16, 1058, 37},     {"F32", Fmt::F32, 1030, 37},   {"Q6_K", Fmt::Q6_K, 1280, 37},
               {"Q4_K", Fmt::Q4_K, 1280, 37},   {"I4_group32", Fmt::I4, 1056, 37},
               {"F8_E4M3_block100", Fmt::F8Odd, 1101, 37}, {"Q5_0", Fmt::Q5_0, 1056, 37},
               {"Q4_1", Fmt::Q4_1, 1056, 37},   {"Q5_1", Fmt::Q5_1, 1056, 37}, {"Q2_K", Fmt::Q2_K, 1280, 37},
               {"Q3_K", Fmt::Q3_K, 1280, 37},   {"Q5_K", Fmt::Q5_K, 1280, 37}, {"BF16", Fmt::BF16, 1025, 37},
               {"I8_row", Fmt::I8, 1027, 37},   {"MXFP4_hf", Fmt::Mxfp4Split, 1088, 37},
               {"Q8_0 tall", Fmt::Q8_0, 96, 16391}, {"F32 tall", Fmt::F32, 40, 16391},
               // Past linear_row.comp's SPREAD build (up to 512 outputs): its default build.
               {"Q8_0 wide", Fmt::Q8_0, 1056, 600}, {"Q4_K wide", Fmt::Q4_K, 1280, 600},
               {"BF16 wide", Fmt::BF16, 1025, 600}, {"MXFP4_gguf wide", Fmt::Mxfp4, 1056, 600},
               {"I8_row wide", Fmt::I8, 1027, 600}, {"F8_E4M3_block100 wide", Fmt::F8Odd, 1101, 600}};
  for (const auto& c : cases) {
    const int64_t out = c.out, in = c.in;
    Mat m = random_matrix(c.fmt, out, in, 5);
    auto gp = gpu();
    Backend& g = *gp;
    g.plan(limits(5, static_cast<size_t>(in)));
    const std::vector<float> x = random_vector(5 * in, 11);
    Tensor tx = put(g, x), ty = g.allocate(5 * out);
    g.linear(m.w, tx, 5, ty);
    const std::vector<float> batched = get(g, ty);
    std::vector<float> want(5 * out);
    kernels::linear(m.w, x.data(), 5, want.data(), nullptr);
    const std::vector<float> mag = magnitudes(m.w, x, 5);
    for (size_t r = 0; r < 5; ++r) {
      Tensor one = put(g, std::vector<float>(x.begin() + r * in, x.begin() + (r + 1) * in)), y1 = g.allocate(out);
      g.linear(m.w, one, 1, y1);
      const std::string what = std::string(c.name) + " in=" + std::to_string(in) + " row " + std::to_string(r);
      const std::vector<float> y = get(g, y1);
      expect_same_bits(std::vector<float>(batched.begin() + r * out, batched.begin() + (r + 1) * out), y, what);
      for (size_t o = 0; o < static_cast<size_t>(out); ++o)
        ASSERT_NEAR(want[r * out + o], y[o], 1e-6 * mag[r * out + o] + 1e-30) << what << " output " << o;
    }
  }
}

// Several matrices of one x stacked (q, k and v): each matrix's rows of
// outputs after the previous one's, with the bits of a product each, for
// one row (one product over the stack), a few rows and a tiled batch (a
// product each, the matrices read from the stack), and for matrices the
// stack cannot hold (separate scales, block scales): a product each.
TEST(VulkanFormatsWide, StackedProductsGiveEachMatrixsBits) {
  const struct {
    const char* name;
    Fmt fmt;
    int64_t in;
  } cases[] = {{"Q8_0 (rows of 1122 bytes)", Fmt::Q8_0, 1056}, {"BF16", Fmt::BF16, 1025}, {"Q4_K", Fmt::Q4_K, 1280},
               {"MXFP4_gguf", Fmt::Mxfp4, 1056},           {"I4_group32 (scales)", Fmt::I4, 1056},
               {"F8_E4M3_block100 (block scales)", Fmt::F8Odd, 1101}};
  for (const auto& c : cases) {
    // Odd heights: the second and third matrices start off a word boundary
    // in the stack where a row's bytes are not a multiple of 4.
    const int64_t outs[] = {601, 41, 41};
    std::vector<Mat> mats;
    mats.reserve(3);
    for (int64_t i = 0; i < 3; ++i) mats.push_back(random_matrix(c.fmt, outs[i], c.in, 20 + static_cast<uint64_t>(i)));
    const kernels::WeightMatrix* ws[] = {&mats[0].w, &mats[1].w, &mats[2].w};
    for (size_t n : {1, 3, 70}) {
      auto gp = gpu();
      Backend& g = *gp;
      g.plan(limits(n, static_cast<size_t>(c.in)));
      const std::vector<float> x = random_vector(n * c.in, 12);
      Tensor tx = put(g, x), stack = g.allocate(n * 683);
      g.linear_stacked(ws, tx, n, stack);
      const std::vector<float> got = get(g, stack);
      size_t at = 0;
      for (int64_t i = 0; i < 3; ++i) {
        Tensor y = g.allocate(n * outs[i]);
        g.linear(mats[i].w, tx, n, y);
        const size_t count = n * static_cast<size_t>(outs[i]);
        expect_same_bits(get(g, y), std::vector<float>(got.begin() + at, got.begin() + at + count),
                         std::string(c.name) + " n=" + std::to_string(n) + " matrix " + std::to_string(i));
        at += count;
      }
    }
  }
}

// Each token's embedding is the row dequantized, bit for bit.
TEST_P(VulkanFormats, EmbeddingIsTheDequantizedRow) {
  const int64_t out = 11, in = GetParam().in;
  Mat m = random_matrix(GetParam().fmt, out, in, 4);
  auto gp = gpu();
  Backend& g = *gp;
  g.plan(limits(8, static_cast<size_t>(in)));
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7};
  Tensor t = g.allocate(tokens.size() * in);
  g.embed(m.w, tokens, t);
  std::vector<float> want(tokens.size() * in);
  for (size_t i = 0; i < tokens.size(); ++i) kernels::dequantize_row(m.w, tokens[i], &want[i * in]);
  expect_same_bits(want, get(g, t), GetParam().name);
}

// The CPU kernels' interleaved layouts (packs store Q8_0, MXFP4 and Q4_K
// experts so): the same order as the CPU's interleaved kernels, and a row's
// bits alone (linear_il.comp), in a small batch (the same) and in a large
// one (linear_il_mm.comp's tiles of 64 rows × 64 outputs) are the same.
TEST(VulkanInterleaved, ProductsAgreeWithTheCpuKernelsAndIgnoreTheBatch) {
  kernel_tests::IsaGuard guard;
  kernels::set_isa(kernels::Isa::Scalar);
  // 80 outputs: a tile and a part; 70 rows: likewise; 544 columns: 17
  // blocks, a partial window (of 16 blocks) and a partial pass (of 2).
  const size_t n = 70;
  for (Fmt f : {Fmt::Q8_0, Fmt::Mxfp4, Fmt::Q4_K}) {
    const int64_t out = 80, in = f == Fmt::Q4_K ? 768 : 544;
    Mat m = random_matrix(f, out, in, 7);
    std::vector<uint8_t> il(m.data.size());
    const kernels::WeightMatrix w = kernels::interleave(m.w, il.data());
    auto gp = gpu();
    Backend& g = *gp;
    g.plan(limits(n, static_cast<size_t>(in)));
    std::vector<float> x = random_vector(n * in, 8), want(n * out);
    kernels::linear(w, x.data(), n, want.data(), nullptr);
    const std::vector<float> mag = magnitudes(m.w, x, n);
    Tensor tx = put(g, x), ty = g.allocate(n * out), t1 = g.allocate(out), t5 = g.allocate(5 * out);
    g.linear(w, tx, n, ty);
    const std::vector<float> y = get(g, ty);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(want[i], y[i], 1e-6 * mag[i] + 1e-30) << dtype_name(w.dtype) << " " << i;
    for (size_t r : {4, 67}) {
      g.linear(w, tx.rows(r, 1, in), 1, t1);
      expect_same_bits(std::vector<float>(y.begin() + r * out, y.begin() + (r + 1) * out), get(g, t1),
                       "row " + std::to_string(r) + " alone");
    }
    g.linear(w, tx.rows(64, 5, in), 5, t5);
    expect_same_bits(std::vector<float>(y.begin() + 64 * out, y.begin() + 69 * out), get(g, t5), "rows 64-68");
  }
}

INSTANTIATE_TEST_SUITE_P(All, VulkanFormats, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace strata
