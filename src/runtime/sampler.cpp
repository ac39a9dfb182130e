#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.h"

namespace strata {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

void validate(const SamplingParams& p) {
  auto bad = [](const std::string& what) { throw Error(what); };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) bad("temperature must be a number >= 0");
  if (p.top_k < 0) bad("top_k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) bad("repetition_penalty must be > 0");
  if (!(std::fabs(p.presence_penalty) <= 2.0f)) bad("presence_penalty must be in [-2, 2]");
  if (!(std::fabs(p.frequency_penalty) <= 2.0f)) bad("frequency_penalty must be in [-2, 2]");
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto [id, bias] = p.logit_bias[i];
    if (id < 0 || (i > 0 && id <= p.logit_bias[i - 1].first))
      bad("logit_bias token ids must be non-negative, ascending and distinct");
    if (!(std::fabs(bias) <= 100.0f)) bad("logit_bias values must be in [-100, 100]");
  }
}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  for (int32_t t : prompt) {
    if (t < 0) continue;
    if (static_cast<size_t>(t) >= in_prompt_.size()) in_prompt_.resize(static_cast<size_t>(t) + 1, 0);
    in_prompt_[static_cast<size_t>(t)] = 1;
  }
}

std::vector<float> Sampler::adjusted(std::span<const float> logits) const {
  std::vector<float> l(logits.begin(), logits.end());
  for (const auto& [t, bias] : params_.logit_bias)
    if (static_cast<size_t>(t) < l.size()) l[static_cast<size_t>(t)] += bias;
  const float rp = params_.repetition_penalty;
  if (rp != 1.0f) {
    auto apply = [&](size_t t) {
      if (t < l.size()) l[t] = l[t] > 0 ? l[t] / rp : l[t] * rp;
    };
    std::vector<uint8_t> done(l.size(), 0);
    for (size_t t = 0; t < in_prompt_.size() && t < l.size(); ++t)
      if (in_prompt_[t]) {
        apply(t);
        done[t] = 1;
      }
    for (const auto& [t, n] : output_counts_)
      if (static_cast<size_t>(t) < l.size() && !done[t]) apply(static_cast<size_t>(t));
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    for (const auto& [t, n] : output_counts_)
      if (static_cast<size_t>(t) < l.size())
        l[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(n);
  return l;
}

int32_t Sampler::next(std::span<const float> raw) {
  // Copy the row only when a bias or penalty will change it (a vocabulary-sized copy per token otherwise).
  const bool adjust = !params_.logit_bias.empty() || params_.repetition_penalty != 1.0f ||
                      params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  std::vector<float> row;
  if (adjust) row = adjusted(raw);
  const std::span<const float> logits = adjust ? std::span<const float>(row) : raw;
  int32_t token;
  if (params_.temperature <= 0.0f || params_.top_k == 1) {
    token = argmax(logits);
  } else {
    const float m = logits[argmax(logits)];
    const size_t V = logits.size();
    std::vector<double> p(V);
    for (size_t i = 0; i < V; ++i) p[i] = std::exp(static_cast<double>(logits[i] - m) / params_.temperature);
    // Candidates by probability (descending, ties by id) when a filter needs the order.
    const bool filter = params_.top_k > 0 || params_.top_p < 1.0f || params_.min_p > 0.0f;
    if (filter) {
      std::vector<int32_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      size_t keep = V;
      if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
      std::partial_sort(order.begin(), order.begin() + static_cast<long>(keep), order.end(),
                        [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      double total = 0;
      for (size_t i = 0; i < keep; ++i) total += p[order[i]];
      if (params_.top_p < 1.0f) {
        double mass = 0;
        size_t n = 0;
        while (n < keep) {
          mass += p[order[n++]] / total;
          if (mass >= params_.top_p) break;
        }
        keep = std::max<size_t>(n, 1);
      }
      if (params_.min_p > 0.0f) {
        const double floor = params_.min_p * p[order[0]];
        size_t n = 1;
        while (n < keep && p[order[n]] >= floor) ++n;
        keep = n;
      }
      std::vector<double> q(V, 0.0);
      for (size_t i = 0; i < keep; ++i) q[order[i]] = p[order[i]];
      p.swap(q);
    }
    const double sum = std::accumulate(p.begin(), p.end(), 0.0);
    // Inverse-CDF draw in id order: reproducible for a given seed.
    double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
    token = static_cast<int32_t>(V - 1);
    for (size_t i = 0; i < V; ++i) {
      if (p[i] == 0.0) continue;
      u -= p[i];
      if (u < 0.0) {
        token = static_cast<int32_t>(i);
        break;
      }
    }
    while (p[token] == 0.0 && token > 0) --token;  // rounding at the very end lands on a kept token
  }
  ++output_counts_[token];
  return token;
}

}  // namespace strata
