#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/tensor_names.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace strata {

namespace {


class MlaAttention : public Attention {
 public:
  MlaAttention(WeightBinder& w, const ModelConfig& c, int64_t l)
      : c_(c), rope_(c.rope, c.qk_rope_head_dim, c.rope_interleave), scale_(static_cast<float>(c.attention_scale())) {
    using enum TensorKind;
    const int64_t H = c.num_heads, qk = c.qk_head_dim();
    if (c.q_lora_rank) {
      q_a_ = w.resident(w.linear(hf_name(AttnQA, l), *c.q_lora_rank, c.hidden_size, c.attention_bias));
      q_a_norm_ = w.vector(tn(Naming::Hf, AttnQANorm, "weight", l), *c.q_lora_rank);
      q_b_ = w.resident(w.linear(hf_name(AttnQB, l), H * qk, *c.q_lora_rank));
    } else {
      q_ = w.resident(w.linear(hf_name(AttnQ, l), H * qk, c.hidden_size));
    }
    kv_a_ = w.resident(w.linear(hf_name(AttnKvAMqa, l), c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size, c.attention_bias));
    kv_a_norm_ = w.vector(tn(Naming::Hf, AttnKvANorm, "weight", l), c.kv_lora_rank);
    if (w.has(tn(Naming::Hf, AttnKvB, "weight", l))) {
      kv_b_ = w.linear(hf_name(AttnKvB, l), H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    } else {
      // llama.cpp's converter stores kv_b_proj already split per head for
      // absorbed attention: k_b[h] = W_UK[h]ᵀ [lora × nope], v_b[h] = W_UV[h]
      // [v × lora]. Then both absorptions are ordinary products.
      for (int64_t h = 0; h < H; ++h) {
        k_b_.push_back(w.stacked(tn(Naming::Hf, AttnKB, "weight", l), h, c.kv_lora_rank, c.qk_nope_head_dim));
        v_b_.push_back(w.stacked(tn(Naming::Hf, AttnVB, "weight", l), h, c.v_head_dim, c.kv_lora_rank));
      }
    }
    o_ = w.resident(w.linear(hf_name(AttnOut, l), c.hidden_size, H * c.v_head_dim, c.attention_bias));
  }

  void forward(int64_t layer, const float* x, std::span<const Row> rows, float* out, ThreadPool& pool) const override {
    const size_t n = rows.size();
    const int64_t H = c_.num_heads, nope = c_.qk_nope_head_dim, rope = c_.qk_rope_head_dim, qk = c_.qk_head_dim();
    const int64_t lora = c_.kv_lora_rank, vdim = c_.v_head_dim;

    std::vector<float> q(n * H * qk);
    if (c_.q_lora_rank) {
      const int64_t r = *c_.q_lora_rank;
      std::vector<float> qa(n * r);
      kernels::linear(q_a_, x, n, qa.data(), &pool);
      for (size_t i = 0; i < n; ++i)
        kernels::rms_norm(&qa[i * r], q_a_norm_, r, static_cast<float>(c_.rms_norm_eps), &qa[i * r]);
      kernels::linear(q_b_, qa.data(), n, q.data(), &pool);
    } else {
      kernels::linear(q_, x, n, q.data(), &pool);
    }

    // The cache row: the normalised latent, then the rotated shared key.
    std::vector<float> kv(n * (lora + rope));
    kernels::linear(kv_a_, x, n, kv.data(), &pool);
    for (size_t i = 0; i < n; ++i) {
      float* row = &kv[i * (lora + rope)];
      float* dst = rows[i].cache->key(layer, rows[i].pos);
      kernels::rms_norm(row, kv_a_norm_, lora, static_cast<float>(c_.rms_norm_eps), dst);
      std::copy_n(row + lora, rope, dst + lora);
      rope_.apply(dst + lora, rows[i].pos);
    }

    // Consecutive rows of one sequence attend in blocks: each cached key row
    // is then read once per block and head rather than once per row, while
    // every row still runs exactly the dots, softmax and axpys it would run
    // alone (same order, same bits).
    const std::vector<std::pair<size_t, size_t>> blocks = sequence_runs(rows, kRowsPerBlock);
    std::vector<float> heads(n * H * vdim);
    pool.parallel_for(blocks.size() * static_cast<size_t>(H), [&](size_t t0, size_t t1) {
      thread_local std::vector<float> q_abs, q_rot, scores, latent;
      thread_local std::vector<const float*> k_lat, k_rot;  // per cached position: latent, rotated key
      float d_lat[kKeysPerChunk], d_rot[kKeysPerChunk];
      for (size_t t = t0; t < t1; ++t) {
        const auto [b0, b1] = blocks[t / static_cast<size_t>(H)];
        const int64_t h = static_cast<int64_t>(t % static_cast<size_t>(H));
        const size_t m = b1 - b0;
        const KvCache& cache = *rows[b0].cache;
        int64_t longest = 0;
        for (size_t i = b0; i < b1; ++i) longest = std::max(longest, rows[i].pos + 1);
        q_abs.resize(m * lora);
        q_rot.resize(m * rope);
        latent.assign(m * lora, 0.0f);
        scores.resize(m * static_cast<size_t>(longest));
        for (size_t r = 0; r < m; ++r) {
          const float* qh = &q[((b0 + r) * H + h) * qk];
          // q_nope · W_UK[h]: the query in latent space.
          if (k_b_.empty())
            kernels::linear_transposed(kv_b_.row_slice(h * (nope + vdim), nope), qh, &q_abs[r * lora]);
          else
            kernels::linear(k_b_[h], qh, 1, &q_abs[r * lora], nullptr);
          std::copy_n(qh + nope, rope, &q_rot[r * rope]);
          rope_.apply(&q_rot[r * rope], rows[b0 + r].pos);
        }
        auto start = [](size_t) { return int64_t{0}; };
        auto len = [&](size_t r) { return rows[b0 + r].pos + 1; };
        k_lat.resize(static_cast<size_t>(longest));
        k_rot.resize(static_cast<size_t>(longest));
        for (int64_t s = 0; s < longest; ++s) {
          k_lat[s] = cache.key(layer, s);
          k_rot[s] = k_lat[s] + lora;
        }
        // Each row's dots against a chunk of keys run side by side
        // (kernels::dots), each with the bits of a lone dot.
        by_key_chunks(0, longest, m, start, len, [&](size_t r, int64_t from, size_t count) {
          kernels::dots(&q_abs[r * lora], &k_lat[from], count, static_cast<size_t>(lora), d_lat);
          kernels::dots(&q_rot[r * rope], &k_rot[from], count, static_cast<size_t>(rope), d_rot);
          for (size_t j = 0; j < count; ++j) scores[r * longest + from + static_cast<int64_t>(j)] = (d_lat[j] + d_rot[j]) * scale_;
        });
        for (size_t r = 0; r < m; ++r) kernels::softmax(&scores[r * longest], len(r));
        // The weighted sum, a chunk of keys per call (kernels::axpys: the
        // axpys of one key after another, with their bits).
        by_key_chunks(0, longest, m, start, len, [&](size_t r, int64_t from, size_t count) {
          kernels::axpys(&scores[r * longest + from], &k_lat[from], count, &latent[r * lora], static_cast<size_t>(lora));
        });
        // Expand the attended latent through W_UV[h].
        for (size_t r = 0; r < m; ++r)
          kernels::linear(v_b_.empty() ? kv_b_.row_slice(h * (nope + vdim) + nope, vdim) : v_b_[h], &latent[r * lora], 1,
                          &heads[((b0 + r) * H + h) * vdim], nullptr);
      }
    });
    kernels::linear(o_, heads.data(), n, out, &pool);
  }

 private:
  const ModelConfig& c_;
  Rope rope_;
  float scale_;
  kernels::WeightMatrix q_, q_a_, q_b_, kv_a_, kv_b_, o_;
  std::vector<kernels::WeightMatrix> k_b_, v_b_;  // per head, when stored split (GGUF)
  const float* q_a_norm_ = nullptr;
  const float* kv_a_norm_ = nullptr;
};

}  // namespace

CacheWidths mla_cache_widths(const ModelConfig& c) { return {c.kv_lora_rank + c.qk_rope_head_dim, 0}; }

double mla_attention_scale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  // DeepSeek's YaRN also sharpens the softmax: scale · mscale², with
  // mscale = 0.1 · mscale_all_dim · ln(factor) + 1.
  if (c.rope.type != "default" && c.rope.mscale_all_dim != 0.0 && c.rope.factor > 1.0) {
    double m = 0.1 * c.rope.mscale_all_dim * std::log(c.rope.factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

std::unique_ptr<Attention> make_mla_attention(WeightBinder& w, const ModelConfig& c, int64_t layer) {
  return std::make_unique<MlaAttention>(w, c, layer);
}

}  // namespace strata
