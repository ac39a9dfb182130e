// Routing on the host (RouteSpec in backend.h, backend/host_routing.h).
#include <algorithm>
#include <limits>
#include <numeric>

#include "backend/cpu_backend.h"
#include "backend/cpu_rows.h"
#include "backend/host_routing.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace strata {

namespace {

// Indices of the k largest of v[0..n), ties to the lower index, so the choice
// is deterministic. `idx` holds n values (scratch).
void top_k(const float* v, int64_t n, int64_t k, int32_t* out, int32_t* idx) {
  std::iota(idx, idx + n, 0);
  std::partial_sort(idx, idx + k, idx + n,
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy_n(idx, k, out);
}

// weights[k] = from[ids[k]] for k < K; returns their sum, added in order.
float take_weights(const float* from, const int32_t* ids, int64_t K, float* weights) {
  float sum = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    weights[k] = from[ids[k]];
    sum += weights[k];
  }
  return sum;
}

}  // namespace

size_t route_scratch_floats(int64_t experts) { return 3 * static_cast<size_t>(experts); }
size_t route_scratch_ints(int64_t experts) { return 3 * static_cast<size_t>(experts); }

void route_on_host(const RouteSpec& spec, float* all, size_t n, int32_t* ids, float* weights, float* floats,
                   int32_t* ints) {
  const int64_t E = spec.experts, K = spec.k;
  int32_t* idx = ints;
  switch (spec.kind) {
    case RouteSpec::Kind::SigmoidGroup: {
      const int64_t G = spec.groups, per = E / G;
      float* scores = floats;
      float* choice = scores + E;
      float* group_scores = choice + E;
      int32_t* groups = idx + E;  // topk_groups of them; "keep" reuses the rest
      for (size_t r = 0; r < n; ++r) {
        const float* logit = all + r * E;
        for (int64_t e = 0; e < E; ++e) {
          scores[e] = kernels::sigmoid(logit[e]);
          choice[e] = scores[e] + spec.bias[e];
        }
        if (G > 1) {
          // A group's score is the sum of its two best biased scores.
          for (int64_t g = 0; g < G; ++g) {
            int32_t best[2];
            top_k(&choice[g * per], per, 2, best, idx);
            group_scores[g] = choice[g * per + best[0]] + choice[g * per + best[1]];
          }
          top_k(group_scores, G, spec.topk_groups, groups, idx);
          int32_t* keep = groups + spec.topk_groups;
          std::fill_n(keep, G, 0);
          for (int64_t j = 0; j < spec.topk_groups; ++j) keep[groups[j]] = 1;
          for (int64_t e = 0; e < E; ++e)
            if (!keep[e / per]) choice[e] = -std::numeric_limits<float>::infinity();
        }
        int32_t* row_ids = ids + r * K;
        float* row_w = weights + r * K;
        top_k(choice, E, K, row_ids, idx);
        const float denom = take_weights(scores, row_ids, K, row_w) + 1e-20f;
        for (int64_t k = 0; k < K; ++k) {
          if (spec.normalize) row_w[k] /= denom;
          row_w[k] *= spec.scale;
        }
      }
      break;
    }
    case RouteSpec::Kind::Softmax:
      for (size_t r = 0; r < n; ++r) {
        float* p = all + r * E;
        kernels::softmax(p, E);
        int32_t* row_ids = ids + r * K;
        float* row_w = weights + r * K;
        top_k(p, E, K, row_ids, idx);
        const float sum = take_weights(p, row_ids, K, row_w);
        if (spec.normalize)
          for (int64_t k = 0; k < K; ++k) row_w[k] /= sum;
      }
      break;
    case RouteSpec::Kind::TopkSoftmax:
      for (size_t r = 0; r < n; ++r) {
        const float* p = all + r * E;
        int32_t* row_ids = ids + r * K;
        float* row_w = weights + r * K;
        top_k(p, E, K, row_ids, idx);
        take_weights(p, row_ids, K, row_w);
        kernels::softmax(row_w, K);
      }
      break;
  }
}

void CpuBackend::route(const RouteSpec& spec, Tensor logits, size_t n, int32_t* ids, float* weights) {
  if (static_cast<size_t>(spec.experts) > limits_.experts || spec.k > spec.experts || spec.k < 1)
    throw Error("internal: routing over more experts than planned");
  float* all = host(logits.slice(0, n * static_cast<uint64_t>(spec.experts)));
  const size_t E = static_cast<size_t>(spec.experts), K = static_cast<size_t>(spec.k);
  // Rows route independently: each thread a range, with its own scratch.
  cpu_rows::for_rows(pool_, n, 2 * E, [&](int worker, size_t r0, size_t r1) {
    const size_t w = static_cast<size_t>(worker);
    route_on_host(spec, all + r0 * E, r1 - r0, ids + r0 * K, weights + r0 * K,
                  route_floats_.data() + w * planned_.route_floats, route_ints_.data() + w * planned_.route_ints);
  });
}

}  // namespace strata
