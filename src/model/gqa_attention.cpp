#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/ops.h"
#include "model/attention.h"
#include "model/config_reader.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/tensor_names.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace strata {

namespace {


class GqaAttention : public Attention {
 public:
  GqaAttention(WeightBinder& w, const ModelConfig& c, int64_t layer, GqaParts parts)
      : c_(c),
        rope_(c.rope, c.head_dim, false),
        scale_(static_cast<float>(c.attention_scale())),
        window_(c.layer_window(layer)) {
    const int64_t H = c.num_heads, KV = c.num_kv_heads, d = c.head_dim;
    using enum TensorKind;
    q_ = w.resident(w.linear(hf_name(AttnQ, layer), H * d, c.hidden_size, c.attention_bias));
    k_ = w.resident(w.linear(hf_name(AttnK, layer), KV * d, c.hidden_size, c.attention_bias));
    v_ = w.resident(w.linear(hf_name(AttnV, layer), KV * d, c.hidden_size, c.attention_bias));
    o_ = w.resident(w.linear(hf_name(AttnOut, layer), c.hidden_size, H * d, c.attention_bias));
    if (parts.qk_norm) {
      q_norm_ = w.vector(tn(Naming::Hf, AttnQNorm, "weight", layer), d);
      k_norm_ = w.vector(tn(Naming::Hf, AttnKNorm, "weight", layer), d);
    }
    if (c.attention_sinks) sinks_ = w.vector(hf_name(AttnSinks, layer), H);
  }

  void forward(int64_t layer, const float* x, std::span<const Row> rows, float* out, ThreadPool& pool) const override {
    const size_t n = rows.size();
    const int64_t H = c_.num_heads, KV = c_.num_kv_heads, d = c_.head_dim;
    const float eps = static_cast<float>(c_.rms_norm_eps);
    std::vector<float> q(n * H * d), k(n * KV * d), v(n * KV * d);
    kernels::linear(q_, x, n, q.data(), &pool);
    kernels::linear(k_, x, n, k.data(), &pool);
    kernels::linear(v_, x, n, v.data(), &pool);
    for (size_t i = 0; i < n; ++i) {
      const int64_t pos = rows[i].pos;
      for (int64_t h = 0; h < H; ++h) {
        float* qh = &q[(i * H + h) * d];
        if (q_norm_) kernels::rms_norm(qh, q_norm_, d, eps, qh);
        rope_.apply(qh, pos);
      }
      float* kc = rows[i].cache->key(layer, pos);
      for (int64_t h = 0; h < KV; ++h) {
        float* kh = &k[(i * KV + h) * d];
        if (k_norm_) kernels::rms_norm(kh, k_norm_, d, eps, kh);
        rope_.apply(kh, pos);
      }
      std::copy_n(&k[i * KV * d], KV * d, kc);
      std::copy_n(&v[i * KV * d], KV * d, rows[i].cache->value(layer, pos));
    }

    // Consecutive rows of one sequence attend in blocks: each cached key and
    // value row is read once per block and head rather than once per row,
    // while every row runs exactly the dots, softmax and axpys it would run
    // alone (same order, same bits).
    const std::vector<std::pair<size_t, size_t>> blocks = sequence_runs(rows, kRowsPerBlock);
    std::vector<float> heads(n * H * d);
    const int64_t group = H / KV;
    pool.parallel_for(blocks.size() * static_cast<size_t>(H), [&](size_t t0, size_t t1) {
      thread_local std::vector<float> scores;
      thread_local std::vector<int64_t> first, len;
      thread_local std::vector<const float*> keys, values;  // per position from lo
      float dotted[kKeysPerChunk];
      for (size_t t = t0; t < t1; ++t) {
        const auto [b0, b1] = blocks[t / static_cast<size_t>(H)];
        const int64_t h = static_cast<int64_t>(t % static_cast<size_t>(H)), kvh = h / group;
        const size_t m = b1 - b0;
        const KvCache& cache = *rows[b0].cache;
        first.resize(m);
        len.resize(m);
        int64_t lo = rows[b0].pos, hi = 0, widest = 0;
        for (size_t r = 0; r < m; ++r) {
          const int64_t pos = rows[b0 + r].pos;
          // A sliding-window layer sees only the last `window` positions.
          first[r] = window_ ? std::max<int64_t>(0, pos - *window_ + 1) : 0;
          len[r] = pos + 1 - first[r];
          lo = std::min(lo, first[r]);
          hi = std::max(hi, pos + 1);
          widest = std::max(widest, len[r] + 1);
        }
        scores.resize(m * static_cast<size_t>(widest));
        keys.resize(static_cast<size_t>(hi - lo));
        values.resize(static_cast<size_t>(hi - lo));
        for (int64_t s = lo; s < hi; ++s) {
          keys[s - lo] = cache.key(layer, s) + kvh * d;
          values[s - lo] = cache.value(layer, s) + kvh * d;
        }
        auto start = [&](size_t r) { return first[r]; };
        auto end = [&](size_t r) { return first[r] + len[r]; };
        // Each row's dots against a chunk of keys run side by side
        // (kernels::dots), each with the bits of a lone dot.
        by_key_chunks(lo, hi, m, start, end, [&](size_t r, int64_t from, size_t count) {
          kernels::dots(&q[((b0 + r) * H + h) * d], &keys[from - lo], count, static_cast<size_t>(d), dotted);
          for (size_t j = 0; j < count; ++j)
            scores[r * widest + (from - first[r]) + static_cast<int64_t>(j)] = dotted[j] * scale_;
        });
        for (size_t r = 0; r < m; ++r) {
          float* sr = &scores[r * widest];
          // A sink is one more logit in the softmax's denominator with no value.
          if (sinks_) {
            sr[len[r]] = sinks_[h];
            kernels::softmax(sr, len[r] + 1);
          } else {
            kernels::softmax(sr, len[r]);
          }
          std::fill_n(&heads[((b0 + r) * H + h) * d], d, 0.0f);
        }
        // The weighted sum of values, a chunk per call (kernels::axpys: the
        // axpys of one position after another, with their bits).
        by_key_chunks(lo, hi, m, start, end, [&](size_t r, int64_t from, size_t count) {
          kernels::axpys(&scores[r * widest + (from - first[r])], &values[from - lo], count,
                         &heads[((b0 + r) * H + h) * d], static_cast<size_t>(d));
        });
      }
    });
    kernels::linear(o_, heads.data(), n, out, &pool);
  }

 private:
  const ModelConfig& c_;
  Rope rope_;
  float scale_;
  kernels::WeightMatrix q_, k_, v_, o_;
  std::optional<int64_t> window_;
  const float* q_norm_ = nullptr;  // per-head q/k RMSNorm (Qwen3)
  const float* k_norm_ = nullptr;
  const float* sinks_ = nullptr;   // per-head sink logits (gpt-oss)
};

}  // namespace

std::unique_ptr<Attention> make_gqa_attention(WeightBinder& w, const ModelConfig& c, int64_t layer, GqaParts parts) {
  return std::make_unique<GqaAttention>(w, c, layer, parts);
}

void validate_gqa_config(const ConfigReader& r, const ModelConfig& c) {
  require_positive(c.head_dim, r, "head_dim");
  require(c.sliding_layers.empty() || static_cast<int64_t>(c.sliding_layers.size()) == c.num_layers, r,
          "layer_types must list one entry per layer");
  require(!c.sliding_window || *c.sliding_window > 0, r, "sliding_window must be positive");
  require(c.head_dim % 2 == 0, r, "head_dim must be even");
  require_positive(c.decoder_sparse_step, r, "decoder_sparse_step");
}

std::vector<std::pair<size_t, size_t>> sequence_runs(std::span<const Row> rows, size_t max_rows) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && j - i < max_rows && rows[j].cache == rows[i].cache) ++j;
    runs.emplace_back(i, j);
    i = j;
  }
  return runs;
}

CacheWidths gqa_cache_widths(const ModelConfig& c) {
  return {c.num_kv_heads * c.head_dim, c.num_kv_heads * c.head_dim};
}

double gqa_attention_scale(const ModelConfig& c) { return 1.0 / std::sqrt(static_cast<double>(c.head_dim)); }

}  // namespace strata
