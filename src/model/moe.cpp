#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "kernels/ops.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace strata {

void SwiGlu::forward(const float* x, size_t n, float* out, ThreadPool& pool) const {
  const size_t width = static_cast<size_t>(gate.out);
  std::vector<float> g(n * width), u(n * width);
  kernels::linear(gate, x, n, g.data(), &pool);
  kernels::linear(up, x, n, u.data(), &pool);
  kernels::silu_mul(g.data(), u.data(), g.size());
  kernels::linear(down, g.data(), n, out, &pool);
}

SwiGlu SwiGlu::bind(WeightBinder& w, TensorKind gate, TensorKind up, TensorKind down, int64_t layer, int64_t hidden,
                    int64_t width) {
  return {w.resident(w.linear(hf_name(gate, layer), width, hidden)),
          w.resident(w.linear(hf_name(up, layer), width, hidden)),
          w.resident(w.linear(hf_name(down, layer), hidden, width))};
}

void expert_forward(const ExpertWeights& e, const ExpertActivation& act, const float* x, size_t n, float* out,
                    ThreadPool* pool) {
  // gate and up for every row: from one fused matrix whose rows alternate
  // gate/up (gpt-oss as HF ships it), or from two matrices.
  const bool fused = e.gate_up.valid();
  const size_t width = static_cast<size_t>(fused ? e.gate_up.out / 2 : e.gate.out);
  std::vector<float> a(n * 2 * width), h(n * width);
  float* gate = a.data();
  float* up = a.data() + n * width;
  if (fused) {
    std::vector<float> gu(n * 2 * width);
    kernels::linear(e.gate_up, x, n, gu.data(), pool);
    for (size_t i = 0; i < n * width; ++i) {
      gate[i] = gu[2 * i];
      up[i] = gu[2 * i + 1];
    }
  } else {
    kernels::linear(e.gate, x, n, gate, pool);
    kernels::linear(e.up, x, n, up, pool);
  }
  if (act.kind == ExpertActivation::Kind::ClampedSwiGlu) {
    for (size_t i = 0; i < n * width; ++i) {
      const float g = std::min(gate[i], act.limit);
      const float u = std::clamp(up[i], -act.limit, act.limit);
      h[i] = (u + 1.0f) * (g * kernels::sigmoid(g * act.alpha));
    }
  } else {
    for (size_t i = 0; i < n * width; ++i) h[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
  kernels::linear(e.down, h.data(), n, out, pool);
}

namespace {

// Indices of the k largest values, ties to the lower index, so the choice is
// deterministic.
void top_k(const float* v, int64_t n, int64_t k, int32_t* out) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy_n(idx.begin(), k, out);
}

class SigmoidGroupRouter : public Router {
 public:
  SigmoidGroupRouter(WeightBinder& w, const ModelConfig& c, const std::string& p, const std::string& bias) : c_(c) {
    gate_ = w.linear(p, c.n_routed_experts, c.hidden_size);
    bias_ = w.vector(bias, c.n_routed_experts);
  }

  void route(const float* x, size_t n, int32_t* ids, float* weights, ThreadPool& pool) const override {
    const int64_t E = c_.n_routed_experts, K = c_.num_experts_per_tok, G = c_.n_group, per = E / G;
    std::vector<float> logits(n * E);
    kernels::linear(gate_, x, n, logits.data(), &pool);
    std::vector<float> scores(E), choice(E), group_scores(G);
    std::vector<int32_t> groups(c_.topk_group);
    for (size_t r = 0; r < n; ++r) {
      for (int64_t e = 0; e < E; ++e) {
        scores[e] = kernels::sigmoid(logits[r * E + e]);
        choice[e] = scores[e] + bias_[e];
      }
      if (G > 1) {
        // A group's score is the sum of its two best biased scores.
        for (int64_t g = 0; g < G; ++g) {
          int32_t best[2];
          top_k(&choice[g * per], per, 2, best);
          group_scores[g] = choice[g * per + best[0]] + choice[g * per + best[1]];
        }
        top_k(group_scores.data(), G, c_.topk_group, groups.data());
        std::vector<bool> keep(G, false);
        for (int32_t g : groups) keep[g] = true;
        for (int64_t e = 0; e < E; ++e)
          if (!keep[e / per]) choice[e] = -std::numeric_limits<float>::infinity();
      }
      int32_t* row_ids = ids + r * K;
      float* row_w = weights + r * K;
      top_k(choice.data(), E, K, row_ids);
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        row_w[k] = scores[row_ids[k]];
        sum += row_w[k];
      }
      const float denom = sum + 1e-20f;
      for (int64_t k = 0; k < K; ++k) {
        if (c_.norm_topk_prob) row_w[k] /= denom;
        row_w[k] *= static_cast<float>(c_.routed_scaling_factor);
      }
    }
  }

 private:
  const ModelConfig& c_;
  kernels::WeightMatrix gate_;
  const float* bias_ = nullptr;
};

class SoftmaxRouter : public Router {
 public:
  SoftmaxRouter(WeightBinder& w, const ModelConfig& c, const std::string& p) : c_(c) {
    gate_ = w.linear(p, c.n_routed_experts, c.hidden_size);
  }

  void route(const float* x, size_t n, int32_t* ids, float* weights, ThreadPool& pool) const override {
    const int64_t E = c_.n_routed_experts, K = c_.num_experts_per_tok;
    std::vector<float> logits(n * E);
    kernels::linear(gate_, x, n, logits.data(), &pool);
    for (size_t r = 0; r < n; ++r) {
      float* p = &logits[r * E];
      kernels::softmax(p, E);
      int32_t* row_ids = ids + r * K;
      float* row_w = weights + r * K;
      top_k(p, E, K, row_ids);
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        row_w[k] = p[row_ids[k]];
        sum += row_w[k];
      }
      if (c_.norm_topk_prob)
        for (int64_t k = 0; k < K; ++k) row_w[k] /= sum;
    }
  }

 private:
  const ModelConfig& c_;
  kernels::WeightMatrix gate_;
};

class TopkSoftmaxRouter : public Router {
 public:
  TopkSoftmaxRouter(WeightBinder& w, const ModelConfig& c, const std::string& p) : c_(c) {
    gate_ = w.linear(p, c.n_routed_experts, c.hidden_size, /*bias=*/true);
  }

  void route(const float* x, size_t n, int32_t* ids, float* weights, ThreadPool& pool) const override {
    const int64_t E = c_.n_routed_experts, K = c_.num_experts_per_tok;
    std::vector<float> logits(n * E);
    kernels::linear(gate_, x, n, logits.data(), &pool);
    for (size_t r = 0; r < n; ++r) {
      const float* p = &logits[r * E];
      int32_t* row_ids = ids + r * K;
      float* row_w = weights + r * K;
      top_k(p, E, K, row_ids);
      for (int64_t k = 0; k < K; ++k) row_w[k] = p[row_ids[k]];
      kernels::softmax(row_w, K);
    }
  }

 private:
  const ModelConfig& c_;
  kernels::WeightMatrix gate_;
};

}  // namespace

std::unique_ptr<Router> make_topk_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& p) {
  return std::make_unique<TopkSoftmaxRouter>(w, c, p);
}

std::unique_ptr<Router> make_sigmoid_group_router(WeightBinder& w, const ModelConfig& c, const std::string& p,
                                                  const std::string& bias) {
  return std::make_unique<SigmoidGroupRouter>(w, c, p, bias);
}

std::unique_ptr<Router> make_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& p) {
  return std::make_unique<SoftmaxRouter>(w, c, p);
}

MoeBlock::MoeBlock(int64_t layer, const ModelConfig& c, std::unique_ptr<Router> router, std::optional<SwiGlu> shared,
                   ExpertProvider& experts, ExpertActivation activation)
    : layer_(layer),
      c_(c),
      router_(std::move(router)),
      shared_(std::move(shared)),
      experts_(experts),
      activation_(activation) {}

std::vector<int32_t> MoeBlock::predict(const float* x, size_t n, ThreadPool& pool) const {
  const int64_t K = c_.num_experts_per_tok;
  std::vector<int32_t> ids(n * K);
  std::vector<float> weights(n * K);
  router_->route(x, n, ids.data(), weights.data(), pool);
  // Most likely first: picked by more rows, then by a larger routing weight
  // (ties: the lower id, as the map orders them).
  std::map<int32_t, std::pair<int, float>> votes;  // expert -> (rows, best weight)
  for (size_t s = 0; s < ids.size(); ++s) {
    auto& v = votes[ids[s]];
    ++v.first;
    v.second = std::max(v.second, weights[s]);
  }
  std::vector<std::pair<int32_t, std::pair<int, float>>> ranked(votes.begin(), votes.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<int32_t> out;
  for (const auto& [e, v] : ranked) out.push_back(e);
  return out;
}

// Token groups up to this size are computed an expert per thread.
constexpr size_t kExpertsInParallelRows = 4;

void MoeBlock::forward(const float* x, size_t n, float* out, ThreadPool& pool,
                       const std::function<void()>& while_reading) const {
  const int64_t K = c_.num_experts_per_tok;
  const size_t hidden = static_cast<size_t>(c_.hidden_size);
  std::vector<int32_t> ids(n * K);
  std::vector<float> weights(n * K);
  router_->route(x, n, ids.data(), weights.data(), pool);

  // Rows grouped by expert, experts in ascending id: one fetch per expert.
  std::map<int32_t, std::vector<size_t>> by_expert;  // expert -> slots (row * K + k)
  for (size_t s = 0; s < n * K; ++s) by_expert[ids[s]].push_back(s);
  // Largest token groups first: their reads are submitted first and they
  // are computed first, which keeps the cores busiest while the rest land.
  // (The combine below does not depend on this order.)
  std::vector<int32_t> unique;
  for (const auto& [e, slots] : by_expert) unique.push_back(e);
  std::stable_sort(unique.begin(), unique.end(),
                   [&](int32_t a, int32_t b) { return by_expert[a].size() > by_expert[b].size(); });
  auto fetch = experts_.fetch(layer_, unique);
  // The next layer's prefetch: its reads go out as background reads, which a
  // drive takes only once this layer's own reads are done, so they fill the
  // time of the last expert, the combine and the next attention.
  if (while_reading) while_reading();

  // The shared expert needs no reads: compute it while the drives work.
  std::vector<float> shared_out;
  if (shared_) {
    shared_out.resize(n * hidden);
    shared_->forward(x, n, shared_out.data(), pool);
  }

  std::vector<float> slot_out(n * K * hidden);
  // One expert's token group through the expert, results to slot_out.
  auto run = [&](int u, const ExpertWeights& w, ThreadPool* p, std::vector<float>& xs, std::vector<float>& ys) {
    const auto& slots = std::as_const(by_expert).at(unique[u]);  // read-only: runs on several threads
    xs.resize(slots.size() * hidden);
    ys.resize(slots.size() * hidden);
    for (size_t j = 0; j < slots.size(); ++j) std::copy_n(x + (slots[j] / K) * hidden, hidden, &xs[j * hidden]);
    expert_forward(w, activation_, xs.data(), slots.size(), ys.data(), p);
    for (size_t j = 0; j < slots.size(); ++j) std::copy_n(&ys[j * hidden], hidden, &slot_out[slots[j] * hidden]);
  };
  size_t largest = 0;
  for (const auto& [e, slots] : by_expert) largest = std::max(largest, slots.size());
  // Experts with small token groups (decode, and prefill over many experts)
  // run one per thread, each on its own: no barrier per product. Otherwise
  // each product is split over the threads.
  const size_t threads = static_cast<size_t>(pool.size());
  const bool per_thread = threads > 1 && (largest <= kExpertsInParallelRows || unique.size() >= 4 * threads);
  std::vector<std::pair<int, const ExpertWeights*>> batch;
  std::vector<float> xs, ys;
  const size_t most = !per_thread ? 1 : fetch->all_ready() ? unique.size() : 4 * threads;
  while (fetch->next_batch(batch, most) > 0) {
    if (batch.size() == 1) {
      run(batch[0].first, *batch[0].second, &pool, xs, ys);
      continue;
    }
    pool.parallel_for(batch.size(), [&](size_t i0, size_t i1) {
      thread_local std::vector<float> txs, tys;
      for (size_t i = i0; i < i1; ++i) run(batch[i].first, *batch[i].second, nullptr, txs, tys);
    });
  }
  fetch.reset();

  // Combine in ascending expert order per row (as transformers does), never
  // in arrival order, so the sum is the same however experts were fetched.
  std::vector<int32_t> order(K);
  for (size_t r = 0; r < n; ++r) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ids[r * K + a] < ids[r * K + b]; });
    float* o = out + r * hidden;
    std::fill_n(o, hidden, 0.0f);
    for (int32_t k : order) {
      const float w = weights[r * K + k];
      const float* y = &slot_out[(r * K + k) * hidden];
      for (size_t i = 0; i < hidden; ++i) o[i] += y[i] * w;
    }
  }
  if (shared_)
    for (size_t i = 0; i < n * hidden; ++i) out[i] += shared_out[i];
}

}  // namespace strata
