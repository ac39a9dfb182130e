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

double gumbel_noise(uint64_t seed, uint64_t index, int32_t token) {
  // splitmix64's finaliser over the three words in turn.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
  h = mix(h ^ (index + 0x632BE59BD9B4E019ull));
  h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x8CB92BA72F3D8DD7ull));
  // Uniform in (0, 1): 53 bits, centred in their interval (never 0 or 1).
  const double u = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
  return -std::log(-std::log(u));
}

int32_t pick_token(std::span<const float> logits, const SamplingParams& params, uint64_t index) {
  if (params.temperature <= 0.0f || params.top_k == 1) return argmax(logits);
  const float m = logits[argmax(logits)];
  const size_t V = logits.size();
  const double T = params.temperature;
  // The kept tokens, by probability (descending, ties by id) when a filter needs the order.
  std::vector<int32_t> kept;
  const bool filter = params.top_k > 0 || params.top_p < 1.0f || params.min_p > 0.0f;
  if (filter) {
    std::vector<double> p(V);
    for (size_t i = 0; i < V; ++i) p[i] = std::exp(static_cast<double>(logits[i] - m) / T);
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    size_t keep = V;
    if (params.top_k > 0) keep = std::min(keep, static_cast<size_t>(params.top_k));
    std::partial_sort(order.begin(), order.begin() + static_cast<long>(keep), order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[order[i]];
    if (params.top_p < 1.0f) {
      double mass = 0;
      size_t n = 0;
      while (n < keep) {
        mass += p[order[n++]] / total;
        if (mass >= params.top_p) break;
      }
      keep = std::max<size_t>(n, 1);
    }
    if (params.min_p > 0.0f) {
      const double floor = params.min_p * p[order[0]];
      size_t n = 1;
      while (n < keep && p[order[n]] >= floor) ++n;
      keep = n;
    }
    order.resize(keep);
    kept = std::move(order);
  }
  // Gumbel-max: argmax of log p_i + g_i is a draw from p (the normalising
  // constant does not move the argmax). Ties go to the lowest id.
  int32_t best = -1;
  double best_key = 0;
  auto consider = [&](int32_t i) {
    const double key = static_cast<double>(logits[static_cast<size_t>(i)] - m) / T + gumbel_noise(params.seed, index, i);
    if (best < 0 || key > best_key || (key == best_key && i < best)) {
      best = i;
      best_key = key;
    }
  };
  if (filter) {
    for (int32_t i : kept) consider(i);
  } else {
    for (size_t i = 0; i < V; ++i)
      if (std::isfinite(logits[i])) consider(static_cast<int32_t>(i));
  }
  return best < 0 ? argmax(logits) : best;
}

int32_t Sampler::next(std::span<const float> raw) {
  // Copy the row only when a bias or penalty will change it (a vocabulary-sized copy per token otherwise).
  const bool adjust = !params_.logit_bias.empty() || params_.repetition_penalty != 1.0f ||
                      params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  std::vector<float> row;
  if (adjust) row = adjusted(raw);
  const std::span<const float> logits = adjust ? std::span<const float>(row) : raw;
  const int32_t token = pick_token(logits, params_, drawn_++);
  ++output_counts_[token];
  return token;
}

}  // namespace strata
