// The Vulkan backend's attention against the CPU's: grouped-query, latent
// (MLA) and Kimi Delta attention through both backends' caches, a prompt's
// chunks on the tiled path and decode steps on the row path (with the prep
// inside the scores), and several sequences' rows in one step. The GPU's
// bits must be the same however the positions were cut into steps; the
// CPU's values within a relative bound (exp, sqrt and division may differ
// in the last places: vulkan_backend.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/rope.h"
#include "kernels_test_support.h"
#include "vulkan_test_support.h"
#include "weight_formats.h"

namespace strata {
namespace {

using kernel_tests::random_vector;
using namespace kernel_tests::formats;
using namespace vulkan_tests;

// ---- attention: the same steps through both backends' caches ----------------

// Runs `steps` (rows per step) of one sequence through `op(backend, rows,
// step)` on a fresh cache of `shape`; returns each step's output tensor values.
template <class Op>
std::vector<std::vector<float>> run_steps(Backend& b, const CacheShape& shape, const std::vector<size_t>& steps, Op op) {
  auto cache = b.new_cache(shape);
  std::vector<std::vector<float>> outs;
  int64_t pos = 0;
  for (size_t n : steps) {
    cache->ensure(pos + static_cast<int64_t>(n));
    std::vector<Row> rows(n);
    for (size_t i = 0; i < n; ++i) rows[i] = Row{1, pos + static_cast<int64_t>(i), cache.get(), true, false};
    outs.push_back(op(b, std::span<const Row>(rows), pos));
    pos += static_cast<int64_t>(n);
    cache->set_length(pos);
  }
  return outs;
}

std::vector<float> concat(const std::vector<std::vector<float>>& parts) {
  std::vector<float> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// Step limits for the attention tests' shapes.
StepLimits attention_limits(const CacheShape& shape, size_t rows) {
  // (MLA's latent and rope parts are each at most a cache row.)
  const size_t row = std::max<size_t>(64, static_cast<size_t>(shape.key_width));
  StepLimits l = limits(rows, row);
  l.context = shape.max_positions;
  l.heads = 8;
  l.latent = row;
  l.latent_rope = row;
  return l;
}

// A prefill chunk then decode steps: the CPU's values, and on the GPU the
// same bits whether the positions came as one chunk or one by one.
template <class Op>
void expect_attention_agrees(const CacheShape& shape, size_t rows, Op op, double rel, const char* what) {
  StepLimits l = attention_limits(shape, rows);
  l.kda_head_dim = 64;
  Pair p(l);
  // From 32 rows on, two chunks (the second from a position past 0) of 16
  // rows or more: the GPU's tiled path for prompts.
  const std::vector<size_t> chunked = rows >= 32 ? std::vector<size_t>{rows / 2 - 1, rows / 2 - 1, 1, 1}
                                                 : std::vector<size_t>{rows - 2, 1, 1};
  const std::vector<size_t> single(rows, 1);
  const auto want = concat(run_steps(*p.cpu, shape, chunked, op));
  const auto got = concat(run_steps(*p.vk, shape, chunked, op));
  expect_close(want, got, rel, what);
  expect_same_bits(got, concat(run_steps(*p.vk, shape, single, op)), std::string(what) + ": one row per step");
}

// The step's inputs for positions [pos, pos + n): values seeded by position,
// so a position's inputs do not depend on how the steps were cut.
std::vector<float> per_position(size_t n, int64_t pos, size_t width, uint64_t seed) {
  std::vector<float> v;
  for (size_t i = 0; i < n; ++i) {
    const auto r = random_vector(width, seed * 1000 + static_cast<uint64_t>(pos) + i);
    v.insert(v.end(), r.begin(), r.end());
  }
  return v;
}

TEST(VulkanAttention, GroupedQueryAttentionAgreesWithTheCpu) {
  const int64_t H = 4, KV = 2;
  RopeConfig rc;
  const Rope rope(rc, 32, false), rope_il(rc, 16, true);
  const std::vector<float> qn = random_vector(32, 40), kn = random_vector(32, 41), sinks = random_vector(H, 42);
  for (int variant = 0; variant < 7; ++variant) {
    // Heads of 32 channels; variant 4's of 160, past attend_row.comp's 128
    // (its WIDE build), partly rotated; variant 5's rows see past
    // attend_row.comp's 1024 staged positions (its scores read from the
    // buffer instead); variant 6's heads of 640, past the WIDE build's 512
    // (the softmax and the values apart).
    const int64_t d = variant == 4 ? 160 : variant == 6 ? 640 : 32;
    const size_t steps = variant == 5 ? 1040 : 40;
    CacheShape shape;
    shape.layers = 1;
    shape.key_width = shape.value_width = KV * d;
    shape.max_positions = static_cast<int64_t>(steps) + 8;
    shape.max_batch = 19;  // the largest step's rows
    if (variant == 2) shape.windows = {3};
    auto op = [&](Backend& b, std::span<const Row> rows, int64_t pos) {
      const size_t n = rows.size();
      Tensor q = put(b, per_position(n, pos, H * d, 1)), k = put(b, per_position(n, pos, KV * d, 2)),
             v = put(b, per_position(n, pos, KV * d, 3)), out = b.allocate(n * H * d);
      GqaAttend a;
      a.rows = rows;
      a.q = q, a.k = k, a.v = v, a.out = out;
      a.heads = H, a.kv_heads = KV, a.head_dim = d;
      a.rope = variant == 1 ? &rope_il : &rope;
      a.q_norm = variant == 1 ? qn.data() : nullptr;
      a.k_norm = variant == 1 ? kn.data() : nullptr;
      a.eps = 1e-6f;
      a.sinks = variant >= 2 ? sinks.data() : nullptr;
      a.window = variant == 2 ? 3 : 0;
      a.scale = 0.17f;
      const uint64_t before = b.expert_cache_stats().dispatches;
      b.gqa_attention(a);
      // On the GPU a one-row step is two dispatches: the scores, with the
      // prep (norms, rotation, the cache's rows) in them, then the softmax
      // and values as one (heads of 512 channels or fewer; wider ones four:
      // the prep, the scores, the softmax, the values).
      if (n == 1 && b.expert_cache_stats().dispatches > 0) {
        EXPECT_EQ(b.expert_cache_stats().dispatches - before, d <= 512 ? 2u : 4u);
      }
      return get(b, out);
    };
    // 40 rows: chunks on the tiled path (a window leaves it).
    const char* what[] = {"gqa",         "gqa + norms, interleaved", "gqa, window + sinks", "gqa + sinks",
                          "gqa, heads of 160", "gqa, 1040 positions", "gqa, heads of 640"};
    expect_attention_agrees(shape, steps, op, 1e-5, what[variant]);
  }
}

// Each row's inputs for a step of rows of several sequences: `width`
// values a row, seeded by its sequence (seeds[k]), the position and `tag`.
std::vector<float> per_row(std::span<const Row> rows, const std::vector<uint64_t>& seeds, size_t width, uint64_t tag) {
  std::vector<float> v;
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto r = per_position(1, rows[k].pos, width, seeds[k] + tag);
    v.insert(v.end(), r.begin(), r.end());
  }
  return v;
}

// Two sequences' rows in one step (a server's batch; each row then preps
// its heads in the scores' dispatch) give each sequence the bits it gets
// alone, from different positions, and the CPU's values. `op(b, rows,
// seeds)` runs the attention on a step's rows (inputs by per_row) and
// returns its output, `width` values a row.
template <class Op>
void expect_sequences_share_steps(const CacheShape& shape, const StepLimits& l, size_t width, Op op, double rel) {
  const int64_t first_b = 5, steps = 20;
  Pair p(l);
  auto step = [&](Backend& b, const std::vector<KvCache*>& caches, const std::vector<std::pair<int, int64_t>>& parts) {
    std::vector<Row> rows;
    std::vector<uint64_t> seeds;
    for (auto [seq, pos] : parts) {
      KvCache* c = caches[static_cast<size_t>(seq)];
      c->ensure(pos + 1);
      rows.push_back(Row{1, pos, c, true, false});
      seeds.push_back(100 * static_cast<uint64_t>(seq + 1));
    }
    const std::vector<float> out = op(b, std::span<const Row>(rows), seeds);
    for (auto [seq, pos] : parts) caches[static_cast<size_t>(seq)]->set_length(pos + 1);
    return out;
  };
  // Each sequence alone, a row a step; or together: sequence 0 alone for
  // its first positions, then a row of each a step, then 1 alone.
  auto run = [&](Backend& b, bool together) {
    auto c0 = b.new_cache(shape), c1 = b.new_cache(shape);
    const std::vector<KvCache*> caches = {c0.get(), c1.get()};
    std::vector<std::vector<float>> outs(2);
    auto keep = [&](int seq, const std::vector<float>& o, size_t at) {
      auto& dst = outs[static_cast<size_t>(seq)];
      dst.insert(dst.end(), o.begin() + static_cast<long>(at * width), o.begin() + static_cast<long>((at + 1) * width));
    };
    if (!together) {
      for (int seq : {0, 1})
        for (int64_t pos = 0; pos < steps; ++pos) keep(seq, step(b, caches, {{seq, pos}}), 0);
      return outs;
    }
    for (int64_t pos = 0; pos < first_b; ++pos) keep(0, step(b, caches, {{0, pos}}), 0);
    for (int64_t pos = first_b; pos < steps; ++pos) {
      const auto o = step(b, caches, {{0, pos}, {1, pos - first_b}});
      keep(0, o, 0);
      keep(1, o, 1);
    }
    for (int64_t pos = steps - first_b; pos < steps; ++pos) keep(1, step(b, caches, {{1, pos}}), 0);
    return outs;
  };
  // Together first: its caches must not find the rows a run before left in
  // the same memory.
  const auto together = run(*p.vk, true), alone = run(*p.vk, false), cpu = run(*p.cpu, true);
  for (size_t seq : {0u, 1u}) {
    expect_same_bits(alone[seq], together[seq], "sequence " + std::to_string(seq) + " beside the other");
    expect_close(cpu[seq], together[seq], rel, "sequence " + std::to_string(seq) + " against the CPU");
  }
}

TEST(VulkanAttention, GroupedQuerySequencesSharingAStepGiveTheBitsEachGivesAlone) {
  const int64_t H = 4, KV = 2, d = 32;
  RopeConfig rc;
  const Rope rope(rc, 32, true);
  const std::vector<float> qn = random_vector(d, 60), kn = random_vector(d, 61);
  CacheShape shape;
  shape.layers = 1;
  shape.key_width = shape.value_width = KV * d;
  shape.max_positions = 48;
  shape.max_batch = 2;
  auto op = [&](Backend& b, std::span<const Row> rows, const std::vector<uint64_t>& seeds) {
    GqaAttend a;
    a.rows = rows;
    a.q = put(b, per_row(rows, seeds, H * d, 1)), a.k = put(b, per_row(rows, seeds, KV * d, 2));
    a.v = put(b, per_row(rows, seeds, KV * d, 3)), a.out = b.allocate(rows.size() * H * d);
    a.heads = H, a.kv_heads = KV, a.head_dim = d;
    a.rope = &rope;
    a.q_norm = qn.data(), a.k_norm = kn.data();
    a.eps = 1e-6f;
    a.scale = 0.17f;
    b.gqa_attention(a);
    return get(b, a.out);
  };
  expect_sequences_share_steps(shape, attention_limits(shape, 2), H * d, op, 1e-5);
}

TEST(VulkanAttention, LatentSequencesSharingAStepGiveTheBitsEachGivesAlone) {
  const int64_t H = 3, nope = 16, rope_dim = 8, lora = 64, vdim = 16;
  RopeConfig rc;
  const Rope rope(rc, rope_dim, true);
  const std::vector<float> kv_norm = random_vector(lora, 70);
  Mat fused = random_matrix(Fmt::BF16, H * (nope + vdim), lora, 71);
  CacheShape shape;
  shape.layers = 1;
  shape.key_width = lora + rope_dim;
  shape.value_width = 0;
  shape.max_positions = 48;
  shape.max_batch = 2;
  auto op = [&](Backend& b, std::span<const Row> rows, const std::vector<uint64_t>& seeds) {
    MlaAttend a;
    a.rows = rows;
    a.q = put(b, per_row(rows, seeds, H * (nope + rope_dim), 4)), a.kv = put(b, per_row(rows, seeds, lora + rope_dim, 5));
    a.out = b.allocate(rows.size() * H * vdim);
    a.heads = H, a.nope = nope, a.rope_dim = rope_dim, a.latent = lora, a.v_dim = vdim;
    a.rope = &rope;
    a.kv_norm = kv_norm.data();
    a.eps = 1e-6f;
    a.scale = 0.2f;
    a.kv_b = &fused.w;
    b.mla_attention(a);
    return get(b, a.out);
  };
  expect_sequences_share_steps(shape, attention_limits(shape, 2), H * vdim, op, 2e-5);
}

TEST(VulkanAttention, LatentAttentionAgreesWithTheCpu) {
  RopeConfig rc;
  // Variants 0-2 a small latent: fused kv_b, split k_b/v_b, NoPE; variant 3
  // DeepSeek's and Kimi's latent of 512 with 64 rotated channels (the
  // decode step's prep in its scores at its widest, the softmax and the
  // latents' sums in attend_row.comp's WIDE build).
  for (int variant = 0; variant < 4; ++variant) {
    const bool wide = variant == 3;
    const int64_t H = wide ? 2 : 3, nope = wide ? 32 : 16, rope_dim = wide ? 64 : 8, lora = wide ? 512 : 64,
                  vdim = wide ? 32 : 16;
    const Rope rope(rc, rope_dim, true);
    const std::vector<float> kv_norm = random_vector(lora, 50);
    Mat fused = random_matrix(Fmt::BF16, H * (nope + vdim), lora, 51);
    // Split per-head matrices: k_b in one allocation (one matrix to the GPU),
    // v_b each its own.
    Mat k_all = random_matrix(Fmt::F32, H * lora, nope, 52);
    std::vector<Mat> v_each;
    for (int64_t h = 0; h < H; ++h) v_each.push_back(random_matrix(Fmt::Q8_0, vdim, lora, 53 + h));
    std::vector<kernels::WeightMatrix> k_b, v_b;
    for (int64_t h = 0; h < H; ++h) {
      k_b.push_back(k_all.w.row_slice(h * lora, lora));
      v_b.push_back(v_each[h].w);
    }
    CacheShape shape;
    shape.layers = 1;
    shape.key_width = lora + rope_dim;
    shape.value_width = 0;
    shape.max_positions = 48;
    shape.max_batch = 19;  // the largest step's rows
    auto op = [&](Backend& b, std::span<const Row> rows, int64_t pos) {
      const size_t n = rows.size();
      Tensor q = put(b, per_position(n, pos, H * (nope + rope_dim), 4)),
             kv = put(b, per_position(n, pos, lora + rope_dim, 5)), out = b.allocate(n * H * vdim);
      MlaAttend a;
      a.rows = rows;
      a.q = q, a.kv = kv, a.out = out;
      a.heads = H, a.nope = nope, a.rope_dim = rope_dim, a.latent = lora, a.v_dim = vdim;
      a.rope = variant == 2 ? nullptr : &rope;
      a.kv_norm = kv_norm.data();
      a.eps = 1e-6f;
      a.scale = 0.2f;
      if (variant == 1) {
        a.k_b = k_b;
        a.v_b = v_b;
      } else {
        a.kv_b = &fused.w;
      }
      b.mla_attention(a);
      return get(b, out);
    };
    const char* what[] = {"mla, fused kv_b", "mla, split k_b v_b", "mla, NoPE", "mla, latent of 512"};
    // 40 rows: chunks of 19 on the tiled path (mla_scores.comp), 57 (row,
    // head) pairs over two tiles, then single rows; 12 rows: a chunk of 10
    // rows of one sequence on the row path, its prep apart (mla_prep.comp).
    expect_attention_agrees(shape, 40, op, 2e-5, what[variant]);
    expect_attention_agrees(shape, 12, op, 2e-5, (std::string(what[variant]) + ", a short chunk").c_str());
  }
}

TEST(VulkanAttention, KimiDeltaAttentionAgreesWithTheCpu) {
  const int64_t H = 2, K = 32, W = 4, D = H * K;
  std::vector<std::vector<float>> conv;
  for (int i = 0; i < 3; ++i) conv.push_back(random_vector(D * W, 60 + i));
  const std::vector<float> a_log = random_vector(H, 63), dt_bias = random_vector(D, 64), o_norm = random_vector(K, 65);
  CacheShape shape;
  shape.layers = 1;
  shape.max_positions = 16;
  shape.max_batch = 8;
  shape.state_floats = {kda_state_floats(H, K, W)};
  auto op = [&](Backend& b, std::span<const Row> rows, int64_t pos) {
    const size_t n = rows.size();
    KdaAttend a;
    a.rows = rows;
    a.q = put(b, per_position(n, pos, D, 6));
    a.k = put(b, per_position(n, pos, D, 7));
    a.v = put(b, per_position(n, pos, D, 8));
    a.decay = put(b, per_position(n, pos, D, 9));
    a.beta = put(b, per_position(n, pos, H, 10));
    a.gate = put(b, per_position(n, pos, D, 11));
    a.out = b.allocate(n * D);
    a.heads = H, a.head_dim = K, a.conv_kernel = W;
    for (int i = 0; i < 3; ++i) a.conv[i] = conv[i].data();
    a.a_log = a_log.data(), a.dt_bias = dt_bias.data(), a.o_norm = o_norm.data();
    b.kda_attention(a);
    return get(b, a.out);
  };
  expect_attention_agrees(shape, 7, op, 2e-5, "kda");
}

}  // namespace
}  // namespace strata
