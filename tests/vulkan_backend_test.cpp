// The Vulkan backend op by op against the CPU's (ggml's test-backend-ops
// idea): each elementwise op, the norms, the depth mix, routing, the routed
// experts and their combine, attention, on the same inputs through both
// backends (every weight format's product and embedding:
// vulkan_products_test.cpp; attention: vulkan_attention_test.cpp). Runs on whatever Vulkan device
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
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "kernels/dispatch.h"
#include "kernels/interleave.h"
#include "kernels/linear.h"
#include "kernels_test_support.h"
#include "scoped_env.h"
#include "runtime/sampler.h"
#include "vulkan/vk_context.h"
#include "vulkan/vk_expert_cache.h"
#include "vulkan/vulkan_backend.h"
#include "vulkan_test_support.h"
#include "weight_formats.h"

namespace strata {
namespace {

using kernel_tests::random_vector;
using namespace kernel_tests::formats;
using namespace vulkan_tests;

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

// add_rms_norm is add() then rms_norm() in one dispatch: the stream and the
// norm get their bits, across more columns than rms_norm.comp's piece.
TEST(VulkanOps, AddRmsNormIsTheAddThenTheNorm) {
  const size_t rows = 3, width = 2100;
  Pair p(limits(rows, width));
  const std::vector<float> x = random_vector(rows * width, 5), d = random_vector(rows * width, 6),
                           w = random_vector(width, 7);
  auto [cx, vx] = p.put2(x);
  auto [cd, vd] = p.put2(d);
  Tensor vx2 = put(*p.vk, x), cy = p.cpu->allocate(rows * width), vy = p.vk->allocate(rows * width),
         vy2 = p.vk->allocate(rows * width);
  p.vk->add(vx2, vd);
  p.vk->rms_norm(vx2, w.data(), rows, width, 1e-6f, vy2);
  p.vk->add_rms_norm(vx, vd, w.data(), rows, width, 1e-6f, vy);
  expect_same_bits(get(*p.vk, vx2), get(*p.vk, vx), "the stream");
  expect_same_bits(get(*p.vk, vy2), get(*p.vk, vy), "the norm");
  p.cpu->add_rms_norm(cx, cd, w.data(), rows, width, 1e-6f, cy);
  expect_same_bits(get(*p.cpu, cx), get(*p.vk, vx), "the stream against the CPU");
  expect_close(get(*p.cpu, cy), get(*p.vk, vy), 2e-6, "the norm against the CPU");
}

// Each row's largest logit as the host finds it (largest_logit(): the first
// of equal largest values), and its count of NaN and ±Inf, across more
// values than a workgroup has invocations.
TEST(VulkanOps, PickLargestIsTheHostsPick) {
  const size_t rows = 5, vocab = 3001;
  Pair p(limits(rows, vocab));
  std::vector<float> x = random_vector(rows * vocab, 8);
  x[0 * vocab + 2999] = 9.0f;  // row 0: the largest twice, the later one at the end
  x[0 * vocab + 1234] = 9.0f;
  x[1 * vocab + 0] = 7.0f;     // row 1: the first value
  x[1 * vocab + 256] = 7.0f;   // and again, in the same invocation's stride
  x[2 * vocab + 17] = -0.0f;   // row 2: all equal, signed zeros among them
  for (size_t i = 0; i < vocab; ++i) x[2 * vocab + i] = i == 17 ? -0.0f : 0.0f;
  x[3 * vocab + 5] = std::numeric_limits<float>::quiet_NaN();  // row 3: not finite, three times
  x[3 * vocab + 700] = std::numeric_limits<float>::infinity();
  x[3 * vocab + 3000] = -std::numeric_limits<float>::infinity();
  Tensor v = put(*p.vk, x);
  std::vector<LogitPick> got(rows);
  p.vk->pick_largest(v, rows, vocab, got.data());
  for (size_t r = 0; r < rows; ++r) {
    const LogitPick want = largest_logit(std::span<const float>(x).subspan(r * vocab, vocab));
    EXPECT_EQ(want.non_finite, got[r].non_finite) << "row " << r;
    // The greedy sampler's own choice (runtime/sampler.h), what a pick stands for.
    if (want.non_finite == 0) {
      EXPECT_EQ(argmax(std::span<const float>(x).subspan(r * vocab, vocab)), got[r].id) << "row " << r;
    }
  }
  EXPECT_EQ(got[0].id, 1234);
  EXPECT_EQ(got[1].id, 0);
  EXPECT_EQ(got[2].id, 0);
  EXPECT_EQ(got[3].non_finite, 3u);
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
  StepLimits l = limits(n * k, hidden);
  l.experts_per_token = n * k;
  Pair p(l);
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
  // The same twelve slots as three rows of 4 and as one row of 12 (past the
  // shader's eight slots loaded at once).
  for (const size_t row_k : {k, n * k})
    for (bool shared : {false, true}) {
      const size_t rows_n = n * k / row_k;
      Tensor co = p.cpu->allocate(rows_n * hidden), vo = p.vk->allocate(rows_n * hidden);
      p.cpu->combine_experts(cg, hidden, rows, ids.data(), weights.data(), rows_n, row_k, shared ? csh : Tensor{}, co);
      p.vk->combine_experts(vg, hidden, rows, ids.data(), weights.data(), rows_n, row_k, shared ? vsh : Tensor{}, vo);
      expect_same_bits(get(*p.cpu, co), get(*p.vk, vo),
                       std::string(shared ? "combine + shared" : "combine") + ", k = " + std::to_string(row_k));
    }
}

// A combine followed by the add_rms_norm of its output is recorded as one
// dispatch (rms_norm.comp's COMBINE build) with the bits of the two recorded apart (here
// kept apart by a copy between them), and the CPU's: the delta, the stream
// and the norm, across more columns than the norm's piece.
TEST(VulkanOps, ACombineAndTheNormAfterItAreOneDispatchWithTheTwosBits) {
  // Rows wider than the norm's piece and narrower (a decode step's); the
  // twelve slots as three rows of 4 and as one of 12.
  for (const size_t hidden : {size_t{2100}, size_t{300}})
  for (const size_t k : {size_t{4}, size_t{12}})
  for (bool shared : {false, true}) {
    SCOPED_TRACE(std::string(shared ? "with a shared expert" : "routed experts alone") + ", hidden " +
                 std::to_string(hidden) + ", k = " + std::to_string(k));
    const size_t n = 12 / k;
    StepLimits l = limits(n * k, hidden);
    l.experts_per_token = k;
    Pair p(l);
    auto [cg, vg] = p.put2(random_vector(n * k * hidden, 11));
    const std::vector<uint32_t> rows = {11, 0, 3, 3, 7, 2, 9, 1, 4, 5, 6, 8};
    const std::vector<int32_t> ids = {9, 2, 14, 0, 5, 6, 1, 3, 15, 12, 13, 4};
    const std::vector<float> weights = random_vector(n * k, 12), x = random_vector(n * hidden, 13),
                             w = random_vector(hidden, 14);
    auto [csh, vsh] = p.put2(random_vector(n * hidden, 15));
    // Fused: the norm right after the combine.
    auto dispatches = [&] { return p.vk->expert_cache_stats().dispatches; };
    Tensor vx = put(*p.vk, x), vo = p.vk->allocate(n * hidden), vy = p.vk->allocate(n * hidden);
    // The norm's weight on the device first, as a model's are after its
    // first step (on a discrete GPU its upload is a copy, which would record
    // the held-back combine alone).
    p.vk->rms_norm(vx, w.data(), n, hidden, 1e-6f, vy);
    const uint64_t before = dispatches();
    p.vk->combine_experts(vg, hidden, rows, ids.data(), weights.data(), n, k, shared ? vsh : Tensor{}, vo);
    p.vk->add_rms_norm(vx, vo, w.data(), n, hidden, 1e-6f, vy);
    EXPECT_EQ(dispatches() - before, 1u) << "the combine and the norm fused";
    // Apart: a copy recorded between them.
    Tensor vx2 = put(*p.vk, x), vo2 = p.vk->allocate(n * hidden), vy2 = p.vk->allocate(n * hidden),
           spare = p.vk->allocate(n * hidden);
    const uint64_t apart = dispatches();
    p.vk->combine_experts(vg, hidden, rows, ids.data(), weights.data(), n, k, shared ? vsh : Tensor{}, vo2);
    p.vk->copy(spare, vx2);
    p.vk->add_rms_norm(vx2, vo2, w.data(), n, hidden, 1e-6f, vy2);
    EXPECT_EQ(dispatches() - apart, 3u) << "the combine, the copy (a dispatch too) and the norm apart";
    expect_same_bits(get(*p.vk, vo2), get(*p.vk, vo), "the delta");
    expect_same_bits(get(*p.vk, vx2), get(*p.vk, vx), "the stream");
    expect_same_bits(get(*p.vk, vy2), get(*p.vk, vy), "the norm");
    expect_same_bits(x, get(*p.vk, spare), "what the copy between them read");
    // The CPU's.
    Tensor cx = p.cpu->allocate(n * hidden), co = p.cpu->allocate(n * hidden), cy = p.cpu->allocate(n * hidden);
    p.cpu->upload(cx, x.data());
    p.cpu->combine_experts(cg, hidden, rows, ids.data(), weights.data(), n, k, shared ? csh : Tensor{}, co);
    p.cpu->add_rms_norm(cx, co, w.data(), n, hidden, 1e-6f, cy);
    expect_same_bits(get(*p.cpu, co), get(*p.vk, vo), "the delta against the CPU");
    expect_same_bits(get(*p.cpu, cx), get(*p.vk, vx), "the stream against the CPU");
    expect_close(get(*p.cpu, cy), get(*p.vk, vy), 2e-6, "the norm against the CPU");
  }
}

// Routing on the GPU (route.comp) chooses the CPU's experts from the same
// logits (random ones: no ties) and weighs them within the last places (the
// GPU's exp); a row's routing is the same bits alone and in a batch. A
// DeepSeek-sized router (256 experts in 8 groups) and a small one.
TEST(VulkanOps, RoutingChoosesTheCpusExperts) {
  const size_t n = 6;
  // Up to 256 experts route.comp chooses by rank, past that by rounds.
  for (const auto& [experts, k, groups] : {std::tuple{16, 4, 4}, std::tuple{256, 8, 8}, std::tuple{384, 8, 8}}) {
    StepLimits l = limits(n, 64);
    l.experts = static_cast<size_t>(experts);
    l.experts_per_token = static_cast<size_t>(k);
    Pair p(l);
    RouteSpec specs[5];
    specs[0].kind = RouteSpec::Kind::SigmoidGroup;
    specs[0].groups = groups;
    specs[0].topk_groups = groups / 2;
    specs[0].normalize = true;
    specs[0].scale = 2.5f;
    specs[1].kind = RouteSpec::Kind::Softmax;
    specs[1].normalize = true;
    specs[2].kind = RouteSpec::Kind::TopkSoftmax;
    specs[3] = specs[0];
    specs[3].normalize = false;
    specs[4] = specs[1];
    specs[4].normalize = false;
    std::vector<float> bias = random_vector(static_cast<size_t>(experts), 8);
    // Ties, exact on both sides: experts 2, 5 and 9 alike, the largest of row 0.
    bias[5] = bias[9] = bias[2];
    for (RouteSpec& s : specs) {
      s.experts = experts;
      s.k = k;
      s.bias = bias.data();
      const std::string what = "route kind " + std::to_string(static_cast<int>(s.kind)) + " over " +
                               std::to_string(experts);
      std::vector<float> logits = random_vector(n * static_cast<size_t>(experts), 11);
      logits[2] = logits[5] = logits[9] = 40.0f;
      auto [cl, vl] = p.put2(logits);
      std::vector<int32_t> cid(n * k), vid(n * k), one_id(k);
      std::vector<float> cw(n * k), vw(n * k), one_w(k);
      p.cpu->route(s, cl, n, cid.data(), cw.data());
      p.vk->route(s, vl, n, vid.data(), vw.data());
      EXPECT_EQ(cid, vid) << what;
      expect_close(cw, vw, 1e-6, what + " weights");
      p.vk->route(s, vl.rows(3, 1, static_cast<uint64_t>(experts)), 1, one_id.data(), one_w.data());
      EXPECT_EQ(std::vector<int32_t>(vid.begin() + 3 * k, vid.begin() + 4 * k), one_id) << what;
      expect_same_bits(std::vector<float>(vw.begin() + 3 * k, vw.begin() + 4 * k), one_w, what + " row 3 alone");
    }
  }
}

// Routed experts of several formats, separate and fused gate/up, each
// activation: the experts' outputs agree with the CPU's, and a job's rows
// are the same bits whatever other jobs run in the call and however many
// rows the job has (a job of 22 rows runs tiled, linear_mm.comp, after the
// split and the activation; one of one row activates as its down product
// loads).
TEST(VulkanOps, RoutedExpertsAgreeWithTheCpu) {
  const size_t hidden = 64, width = 96, rows = 24;
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
    const ExpertJob jobs[] = {{&split, 0, 2}, {&fused, 2, rows - 2}};
    auto [cx, vx] = p.put2(x);
    Tensor cy = p.cpu->allocate(rows * hidden), vy = p.vk->allocate(rows * hidden);
    p.cpu->run_experts(jobs, a, cx, cy, hidden, false);
    p.vk->run_experts(jobs, a, vx, vy, hidden, true);
    const std::vector<float> got = get(*p.vk, vy);
    expect_close(get(*p.cpu, cy), got, 2e-5, "experts");
    const ExpertJob alone[] = {{&fused, 2, rows - 2}};
    Tensor vy2 = p.vk->allocate(rows * hidden);
    p.vk->run_experts(alone, a, vx, vy2, hidden, false);
    const std::vector<float> again = get(*p.vk, vy2);
    expect_same_bits(std::vector<float>(got.begin() + 2 * hidden, got.end()),
                     std::vector<float>(again.begin() + 2 * hidden, again.end()), "a job alone");
    const ExpertJob one_row[] = {{&fused, 5, 1}};
    const uint64_t before = p.vk->expert_cache_stats().dispatches;
    p.vk->run_experts(one_row, a, vx, vy2, hidden, false);
    // A down product of one row activates its input as it loads it, from
    // gate_up's (gate, up) pairs unsplit (the tiled one of 22 rows above
    // has the split and the activation apart: the same bits).
    EXPECT_EQ(p.vk->expert_cache_stats().dispatches - before, 2u) << "gate_up and the down product";
    const std::vector<float> row = get(*p.vk, vy2);
    expect_same_bits(std::vector<float>(got.begin() + 5 * hidden, got.begin() + 6 * hidden),
                     std::vector<float>(row.begin() + 5 * hidden, row.begin() + 6 * hidden), "a row alone");
    // Separate gate and up: a row of a tiled job (the activation apart)
    // against the row alone (activated on load).
    const ExpertJob split_tiled[] = {{&split, 0, rows - 2}}, split_row[] = {{&split, 5, 1}};
    Tensor vy3 = p.vk->allocate(rows * hidden);
    p.vk->run_experts(split_tiled, a, vx, vy3, hidden, false);
    const std::vector<float> tiled = get(*p.vk, vy3);
    p.vk->run_experts(split_row, a, vx, vy3, hidden, false);
    const std::vector<float> split_alone = get(*p.vk, vy3);
    expect_same_bits(std::vector<float>(tiled.begin() + 5 * hidden, tiled.begin() + 6 * hidden),
                     std::vector<float>(split_alone.begin() + 5 * hidden, split_alone.begin() + 6 * hidden),
                     "separate gate and up: a row alone");
    p.vk->run_experts(jobs, a, vx, vx, hidden, false);  // in place
    expect_same_bits(got, get(*p.vk, vx), "in place");
  }
}

// Nine experts of about 0.7 MiB (BF16, 320 × 384), two rows each: a 2 MiB
// staging share holds two, not three.
struct NineExperts {
  static constexpr size_t hidden = 384, width = 320, experts = 9, rows = experts * 2;
  std::vector<Mat> mats;
  std::vector<ExpertWeights> weights = std::vector<ExpertWeights>(experts);
  std::vector<ExpertJob> jobs;
  std::vector<float> x = random_vector(rows * hidden, 13);
  NineExperts(const NineExperts&) = delete;  // jobs point into weights
  NineExperts() {
    mats.reserve(3 * experts);
    for (size_t e = 0; e < experts; ++e) {
      for (int m = 0; m < 3; ++m)
        mats.push_back(random_matrix(Fmt::BF16, m == 2 ? hidden : width, m == 2 ? width : hidden, 40 + 3 * e + m));
      weights[e].gate = mats[3 * e].w;
      weights[e].up = mats[3 * e + 1].w;
      weights[e].down = mats[3 * e + 2].w;
      jobs.push_back({&weights[e], 2 * e, 2, 0, static_cast<int32_t>(e)});  // layer 0, expert e
    }
  }
  std::vector<float> run(Backend& b) const {
    StepLimits l = limits(rows, std::max(hidden, width));
    l.expert_width = width;
    b.plan(l);
    const Tensor xs = put(b, x), ys = b.allocate(rows * hidden);
    b.run_experts(jobs, ExpertActivation{}, xs, ys, hidden, false);
    return get(b, ys);
  }
};

// Under limit_staging(), experts read from host memory (here no expert cache
// holds any) are staged a few at a time: the stream runs what it has before
// the staging would pass its share, the staging buffers never hold more than
// staging_bytes(), and the results are the bits of a backend without a limit.
TEST(VulkanOps, StagedExpertsStayWithinTheStagingLimit) {
  const NineExperts e;
  constexpr uint64_t MiB = 1 << 20;
  auto limited = make_vulkan_backend(-1, 0), unlimited = make_vulkan_backend(-1, 0), cpu = make_cpu_backend(2);
  limited->limit_staging(4 * MiB);
  EXPECT_EQ(limited->staging_bytes(), 4 * MiB);
  const std::vector<float> got = e.run(*limited);
  expect_same_bits(e.run(*unlimited), got, "without a limit");
  expect_close(e.run(*cpu), got, 2e-5, "the CPU's");
  const DeviceExpertStats s = limited->expert_cache_stats();
  EXPECT_EQ(s.staged, NineExperts::experts);
  EXPECT_GT(s.host_staging_bytes, 0u);
  EXPECT_LE(s.host_staging_bytes, limited->staging_bytes());
  EXPECT_EQ(make_cpu_backend(1)->staging_bytes(), 0u);
}

// As on a discrete GPU (STRATA_VK_DISCRETE=1 leaves lavapipe's device
// buffers unmapped), experts go up into the device's expert cache through
// the upload staging: under a 4 MiB staging limit (1 MiB of uploads, pieces
// of 256 KiB) the nine experts' 27 matrices fill it again and again, and the
// results are the bits of a backend that writes its memory in place, before
// and after the cache holds them.
TEST(VulkanOps, ExpertsUploadedThroughTheStagingGiveTheBitsOfMemoryWrittenInPlace) {
  const NineExperts e;
  constexpr uint64_t MiB = 1 << 20;
  // The setting is read when a backend is made; each backend is made under
  // its own, and the variable is put back as it was (the vulkan_as_discrete
  // run sets it for every test).
  auto make = [](const char* discrete) {
    testenv::ScopedEnv env("STRATA_VK_DISCRETE", std::string(discrete));
    auto b = make_vulkan_backend(-1, 64 * MiB);
    b->limit_staging(4 * MiB);
    return b;
  };
  auto discrete = make("1"), in_place = make("0");
  const std::vector<float> want = e.run(*in_place);
  expect_same_bits(want, e.run(*discrete), "uploaded");
  DeviceExpertStats s = discrete->expert_cache_stats();
  EXPECT_EQ(s.uploads, NineExperts::experts);
  EXPECT_EQ(s.staged, 0u);
  EXPECT_LE(s.host_staging_bytes, discrete->staging_bytes());
  // The uploads went through the staging (which the backend writing its
  // memory in place never takes): the setting was honoured.
  EXPECT_GT(s.host_staging_bytes, in_place->expert_cache_stats().host_staging_bytes);
  expect_same_bits(want, e.run(*discrete), "from the cache");
  s = discrete->expert_cache_stats();
  EXPECT_EQ(s.uploads, NineExperts::experts);
  EXPECT_EQ(s.hits, NineExperts::experts);
}

// The VRAM expert cache's rule: experts of each size get slots of that size
// while the budget lasts, then reuse their own least recently used one, but
// never one that ops of this submission (epoch) still read; a slot whose
// upload failed comes back empty.
TEST(VulkanExpertCache, EachSizeReusesItsOwnSlotsAndNeverOnesInUse) {
  vk::Context ctx(-1);
  constexpr uint64_t MiB = 1 << 20;
  vk::ExpertCache cache(ctx, 10 * MiB);
  auto put = [&](uint64_t key, uint64_t bytes, uint64_t epoch) {
    size_t slot = 0;
    if (!cache.reserve(key, bytes, epoch, &slot)) return false;
    vk::ExpertCache::Entry e;
    e.key = key;
    e.epoch = epoch;
    cache.commit(slot, e);
    return true;
  };
  EXPECT_TRUE(put(1, 4 * MiB, 1));  // the 4 MiB size takes two slots (8 of the 10 MiB)
  EXPECT_TRUE(put(2, 2 * MiB, 1));  // the 2 MiB size the one left
  EXPECT_TRUE(put(3, 4 * MiB, 1));
  EXPECT_EQ(cache.bytes(), 10 * MiB);
  EXPECT_FALSE(put(4, 4 * MiB, 1));   // both 4 MiB slots are read by this submission
  EXPECT_FALSE(put(5, 16 * MiB, 2));  // larger than the budget
  EXPECT_TRUE(put(4, 4 * MiB, 2));    // evicts 1, the least recently used of its size
  EXPECT_EQ(cache.find(1, 2), nullptr);
  EXPECT_NE(cache.find(2, 2), nullptr);
  EXPECT_NE(cache.find(3, 2), nullptr);
  EXPECT_NE(cache.find(4, 2), nullptr);
  EXPECT_FALSE(put(6, 2 * MiB, 2));  // 2 was just used in epoch 2
  EXPECT_FALSE(put(7, 1 * MiB, 3));  // a new size finds the budget spent
  // An upload that failed: its slot (3's, the least recently used) holds nothing after.
  size_t slot = 0;
  ASSERT_NE(cache.reserve(8, 4 * MiB, 3, &slot), nullptr);
  cache.abandon(slot);
  EXPECT_EQ(cache.find(3, 3), nullptr);
  EXPECT_EQ(cache.find(8, 3), nullptr);
  EXPECT_TRUE(put(9, 4 * MiB, 3));  // the abandoned slot, before evicting 4
  EXPECT_NE(cache.find(4, 3), nullptr);
  EXPECT_EQ(cache.bytes(), 10 * MiB);
}

}  // namespace
}  // namespace strata
