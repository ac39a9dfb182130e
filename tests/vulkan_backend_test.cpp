// The Vulkan backend op by op against the CPU's (ggml's test-backend-ops
// idea): every weight format's product and embedding, each elementwise op,
// the norms, the depth mix, routing, the routed experts and their combine,
// on the same inputs through both backends. Runs on whatever Vulkan device
// the machine has; CI installs Mesa's CPU driver (lavapipe) for it.
//
// What is compared: products and dequantization follow the CPU's formulas
// and order exactly, so they must give the CPU's bits wherever the driver
// fuses fma (lavapipe and NVIDIA do); ops with exp, tanh, sqrt or a division
// may differ in the last places (vulkan_backend.h) and are held to 2e-6
// relative. Every op must also give the same bits for a row alone as inside
// a batch.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "kernels_test_support.h"
#include "vulkan/vulkan_backend.h"
#include "weight_formats.h"

namespace strata {
namespace {

using kernel_tests::random_vector;
using namespace kernel_tests::formats;

// A backend per test: it keeps device copies of weights by host address,
// and another test's matrices may reuse the addresses.
std::unique_ptr<Backend> gpu() { return make_vulkan_backend(-1); }

StepLimits limits(size_t rows, size_t widest) {
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
Tensor put(Backend& b, const std::vector<float>& v) {
  Tensor t = b.allocate(v.size());
  b.upload(t, v.data());
  return t;
}

std::vector<float> get(Backend& b, Tensor t) {
  std::vector<float> v(t.size);
  b.download(t, v.data());
  return v;
}

void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
        << what << " value " << i << ": " << want[i] << " vs " << got[i];
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got, double rel, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(want[i], got[i], rel * scale + 1e-30) << what << " value " << i;
}

// Σ |W[o][i] · x[r][i]| per output: the scale a product's rounding errors are relative to.
std::vector<float> magnitudes(const kernels::WeightMatrix& w, const std::vector<float>& x, size_t n) {
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

INSTANTIATE_TEST_SUITE_P(All, VulkanFormats, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });


// Both backends, planned alike, fed the same inputs.
struct Pair {
  std::unique_ptr<Backend> cpu = make_cpu_backend(2), vk = gpu();
  explicit Pair(const StepLimits& l) {
    cpu->plan(l);
    vk->plan(l);
  }
  std::pair<Tensor, Tensor> put2(const std::vector<float>& v) { return {put(*cpu, v), put(*vk, v)}; }
};

TEST(VulkanOps, ElementwiseOpsAgreeWithTheCpu) {
  Pair p(limits(4, 64));
  const size_t n = 1000;
  const std::vector<float> a = random_vector(n, 1), b = random_vector(n, 2);
  struct Case {
    const char* name;
    std::function<void(Backend&, Tensor, Tensor)> op;
    double rel;
  };
  ExpertActivation silu, swiglu, situ;
  swiglu.kind = ExpertActivation::Kind::ClampedSwiGlu;
  situ.kind = ExpertActivation::Kind::Situ;
  std::vector<float> big = a;
  for (auto& v : big) v *= 60.0f;  // past any tanh or exp overflow
  const Case cases[] = {
      {"add", [](Backend& k, Tensor y, Tensor x) { k.add(y, x); }, 0},
      {"copy", [](Backend& k, Tensor y, Tensor x) { k.copy(y, x); }, 0},
      {"sigmoid_mul", [](Backend& k, Tensor y, Tensor x) { k.sigmoid_mul(y, x); }, 2e-6},
      {"silu_glu", [&](Backend& k, Tensor y, Tensor x) { k.glu(silu, y, x); }, 2e-6},
      {"clamped_swiglu", [&](Backend& k, Tensor y, Tensor x) { k.glu(swiglu, y, x); }, 2e-6},
      {"situ", [&](Backend& k, Tensor y, Tensor x) { k.glu(situ, y, x); }, 2e-6},
  };
  for (const Case& c : cases)
    for (const std::vector<float>* in : std::initializer_list<const std::vector<float>*>{&a, &big}) {
      auto [cy, vy] = p.put2(*in);
      auto [cx, vx] = p.put2(b);
      c.op(*p.cpu, cy, cx);
      c.op(*p.vk, vy, vx);
      const std::vector<float> want = get(*p.cpu, cy), got = get(*p.vk, vy);
      for (float v : got) ASSERT_TRUE(std::isfinite(v)) << c.name;
      if (c.rel == 0)
        expect_same_bits(want, got, c.name);
      else
        expect_close(want, got, c.rel, c.name);
    }
}

TEST(VulkanOps, RmsNormAgreesWithTheCpuAndIgnoresTheBatch) {
  const size_t rows = 5, width = 300;
  Pair p(limits(rows, width));
  const std::vector<float> x = random_vector(rows * width, 3), w = random_vector(width, 4);
  auto [cx, vx] = p.put2(x);
  Tensor cy = p.cpu->allocate(rows * width), vy = p.vk->allocate(rows * width), v1 = p.vk->allocate(width);
  p.cpu->rms_norm(cx, w.data(), rows, width, 1e-6f, cy);
  p.vk->rms_norm(vx, w.data(), rows, width, 1e-6f, vy);
  const std::vector<float> got = get(*p.vk, vy);
  expect_close(get(*p.cpu, cy), got, 2e-6, "rms_norm");
  p.vk->rms_norm(vx.rows(3, 1, width), w.data(), 1, width, 1e-6f, v1);
  expect_same_bits(std::vector<float>(got.begin() + 3 * width, got.begin() + 4 * width), get(*p.vk, v1), "row 3 alone");
  p.vk->rms_norm(vx, w.data(), rows, width, 1e-6f, vx);  // in place
  expect_same_bits(got, get(*p.vk, vx), "in place");
}

TEST(VulkanOps, DepthMixAgreesWithTheCpu) {
  const size_t rows = 3, width = 200;
  Pair p(limits(rows, width));
  const std::vector<float> q = random_vector(width, 9);
  std::vector<Tensor> cb, vb;
  for (int i = 0; i < 4; ++i) {
    auto [c, v] = p.put2(random_vector(rows * width, 20 + i));
    cb.push_back(c);
    vb.push_back(v);
  }
  auto [cpart, vpart] = p.put2(random_vector(rows * width, 30));
  Tensor co = p.cpu->allocate(rows * width), vo = p.vk->allocate(rows * width);
  p.cpu->depth_mix(cb, cpart, q.data(), rows, width, 1e-6f, co);
  p.vk->depth_mix(vb, vpart, q.data(), rows, width, 1e-6f, vo);
  expect_close(get(*p.cpu, co), get(*p.vk, vo), 5e-6, "depth_mix");
}

TEST(VulkanOps, GatherAndCombineGiveTheCpusBits) {
  const size_t hidden = 70, n = 3, k = 4;
  Pair p(limits(n * k, hidden));
  auto [cs, vs] = p.put2(random_vector(n * k * hidden, 5));
  const std::vector<uint32_t> rows = {11, 0, 3, 3, 7, 2, 9, 1, 4, 5, 6, 8};
  Tensor cg = p.cpu->allocate(rows.size() * hidden), vg = p.vk->allocate(rows.size() * hidden);
  p.cpu->gather_rows(cs, hidden, rows, cg);
  p.vk->gather_rows(vs, hidden, rows, vg);
  expect_same_bits(get(*p.cpu, cg), get(*p.vk, vg), "gather_rows");
  // Expert ids out of order within a row: the sum runs in increasing id.
  const std::vector<int32_t> ids = {9, 2, 14, 0, 5, 6, 1, 3, 15, 12, 13, 4};
  const std::vector<float> weights = random_vector(n * k, 6);
  auto [csh, vsh] = p.put2(random_vector(n * hidden, 7));
  for (bool shared : {false, true}) {
    Tensor co = p.cpu->allocate(n * hidden), vo = p.vk->allocate(n * hidden);
    p.cpu->combine_experts(cg, hidden, rows, ids.data(), weights.data(), n, k, shared ? csh : Tensor{}, co);
    p.vk->combine_experts(vg, hidden, rows, ids.data(), weights.data(), n, k, shared ? vsh : Tensor{}, vo);
    expect_same_bits(get(*p.cpu, co), get(*p.vk, vo), shared ? "combine + shared" : "combine");
  }
}

TEST(VulkanOps, RoutingChoosesTheCpusExperts) {
  const size_t n = 6;
  Pair p(limits(n, 64));
  RouteSpec specs[3];
  specs[0].kind = RouteSpec::Kind::SigmoidGroup;
  specs[0].groups = 4;
  specs[0].topk_groups = 2;
  specs[0].normalize = true;
  specs[0].scale = 2.5f;
  specs[1].kind = RouteSpec::Kind::Softmax;
  specs[1].normalize = true;
  specs[2].kind = RouteSpec::Kind::TopkSoftmax;
  const std::vector<float> bias = random_vector(16, 8);
  for (RouteSpec& s : specs) {
    s.experts = 16;
    s.k = 4;
    s.bias = bias.data();
    auto [cl, vl] = p.put2(random_vector(n * 16, 11));
    std::vector<int32_t> cid(n * 4), vid(n * 4);
    std::vector<float> cw(n * 4), vw(n * 4);
    p.cpu->route(s, cl, n, cid.data(), cw.data());
    p.vk->route(s, vl, n, vid.data(), vw.data());
    EXPECT_EQ(cid, vid);
    expect_same_bits(cw, vw, "route weights");
  }
}

// Routed experts of several formats, separate and fused gate/up, each
// activation: the experts' outputs agree with the CPU's, and a job's rows
// are the same bits whatever other jobs run in the call.
TEST(VulkanOps, RoutedExpertsAgreeWithTheCpu) {
  const size_t hidden = 64, width = 96, rows = 5;
  StepLimits l = limits(rows, std::max(hidden, width));
  l.expert_width = width;
  Pair p(l);
  std::vector<Mat> mats;
  auto make = [&](Fmt f, int64_t out, int64_t in, uint64_t seed) {
    mats.push_back(random_matrix(f, out, in, seed));
    return mats.back().w;
  };
  mats.reserve(16);
  ExpertWeights split, fused;
  split.gate = make(Fmt::Q8_0, width, hidden, 1);
  split.up = make(Fmt::Q4_0, width, hidden, 2);
  split.down = make(Fmt::BF16, hidden, width, 3);
  fused.gate_up = make(Fmt::Mxfp4Split, 2 * width, hidden, 4);
  fused.down = make(Fmt::Mxfp4Split, hidden, width, 5);
  ExpertActivation act[3];
  act[1].kind = ExpertActivation::Kind::ClampedSwiGlu;
  act[2].kind = ExpertActivation::Kind::Situ;
  const std::vector<float> x = random_vector(rows * hidden, 12);
  for (const ExpertActivation& a : act) {
    const ExpertJob jobs[] = {{&split, 0, 2}, {&fused, 2, 3}};
    auto [cx, vx] = p.put2(x);
    Tensor cy = p.cpu->allocate(rows * hidden), vy = p.vk->allocate(rows * hidden);
    p.cpu->run_experts(jobs, a, cx, cy, hidden, false);
    p.vk->run_experts(jobs, a, vx, vy, hidden, true);
    const std::vector<float> got = get(*p.vk, vy);
    expect_close(get(*p.cpu, cy), got, 2e-5, "experts");
    const ExpertJob alone[] = {{&fused, 2, 3}};
    Tensor vy2 = p.vk->allocate(rows * hidden);
    p.vk->run_experts(alone, a, vx, vy2, hidden, false);
    const std::vector<float> again = get(*p.vk, vy2);
    expect_same_bits(std::vector<float>(got.begin() + 2 * hidden, got.end()),
                     std::vector<float>(again.begin() + 2 * hidden, again.end()), "a job alone");
    p.vk->run_experts(jobs, a, vx, vx, hidden, false);  // in place
    expect_same_bits(got, get(*p.vk, vx), "in place");
  }
}

}  // namespace
}  // namespace strata
