#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend/batch.h"
#include "util/error.h"

namespace strata {

int32_t argmax(std::span<const float> logits) { return largest_logit(logits).id; }

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

namespace {

// splitmix64's finaliser over (seed, index, token) in turn: 64 bits that
// look independent across all three. The (seed, index) part is the same
// for a whole row of logits, so a pick mixes it once (noise_prefix) and
// each token once more (noise_bits_after).
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t noise_prefix(uint64_t seed, uint64_t index) {
  return mix(mix(seed + 0x9E3779B97F4A7C15ull) ^ (index + 0x632BE59BD9B4E019ull));
}
uint64_t noise_bits_after(uint64_t prefix, int32_t token) {
  return mix(prefix ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x8CB92BA72F3D8DD7ull));
}
uint64_t noise_bits(uint64_t seed, uint64_t index, int32_t token) {
  return noise_bits_after(noise_prefix(seed, index), token);
}

double gumbel_of(uint64_t bits) {
  // Uniform in (0, 1): 52 bits, centred in their interval (exact in a
  // double, so never 0 or 1: the largest is 1 - 2^-53).
  const double u = (static_cast<double>(bits >> 12) + 0.5) * 0x1.0p-52;
  return -std::log(-std::log(u));
}

// An upper bound of gumbel_of(bits) from the top kBoundBits bits alone (a
// table lookup instead of two logarithms): a token whose logit plus this
// bound stays below the best key so far cannot win, and is skipped without
// computing its noise. The draw is the same as computing every key.
constexpr int kBoundBits = 12;
const std::vector<double>& gumbel_bounds() {
  static const std::vector<double> table = [] {
    std::vector<double> t(size_t{1} << kBoundBits);
    for (size_t b = 0; b < t.size(); ++b) {
      // The largest u of bucket b (gumbel_of's largest in the last), with a margin for rounding.
      const double hi = b + 1 == t.size() ? 1.0 - 0x1.0p-53 : static_cast<double>(b + 1) / static_cast<double>(t.size());
      t[b] = -std::log(-std::log(hi)) + 1e-9;
    }
    return t;
  }();
  return table;
}

}  // namespace

double gumbel_noise(uint64_t seed, uint64_t index, int32_t token) { return gumbel_of(noise_bits(seed, index, token)); }

int32_t pick_token(std::span<const float> logits, const SamplingParams& params, uint64_t index) {
  const int32_t top = argmax(logits);
  if (params.temperature <= 0.0f || params.top_k == 1) return top;
  const float m = logits[static_cast<size_t>(top)];
  const size_t V = logits.size();
  const double T = params.temperature;
  // The tokens kept by the filters, found from the most likely down (ties
  // by id) and sorted only as far as a filter looks.
  std::vector<int32_t> order;
  size_t keep = V;
  const bool filter = params.top_k > 0 || params.top_p < 1.0f || params.min_p > 0.0f;
  if (filter) {
    std::vector<double> p(V);
    for (size_t i = 0; i < V; ++i) p[i] = std::exp(static_cast<double>(logits[i] - m) / T);
    order.resize(V);
    std::iota(order.begin(), order.end(), 0);
    auto before = [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
    size_t sorted = 0;  // order[0, sorted) are the most likely, in order
    auto sort_to = [&](size_t n) {
      n = std::min(n, V);
      if (n <= sorted) return;
      const auto from = order.begin() + static_cast<long>(sorted), to = order.begin() + static_cast<long>(n);
      if (n < V) std::nth_element(from, to, order.end(), before);
      std::sort(from, to, before);
      sorted = n;
    };
    auto grow = [&](size_t need) {  // sorted at least `need`, in growing chunks
      if (need > sorted) sort_to(std::max({need, 2 * sorted, size_t{256}}));
    };
    if (params.top_k > 0) {
      keep = std::min(keep, static_cast<size_t>(params.top_k));
      sort_to(keep);
    }
    if (params.top_p < 1.0f) {
      double total = 0;
      if (keep == V) {
        for (double x : p) total += x;
      } else {
        for (size_t i = 0; i < keep; ++i) total += p[order[i]];
      }
      double mass = 0;
      size_t n = 0;
      while (n < keep) {
        grow(n + 1);
        mass += p[order[n++]] / total;
        if (mass >= params.top_p) break;
      }
      keep = std::max<size_t>(n, 1);
    }
    if (params.min_p > 0.0f) {
      grow(1);
      const double floor = params.min_p * p[order[0]];
      size_t n = 1;
      while (n < keep) {
        grow(n + 1);
        if (p[order[n]] < floor) break;
        ++n;
      }
      keep = n;
    }
    order.resize(keep);
  }
  // Gumbel-max: argmax of log p_i + g_i is a draw from p (the normalising
  // constant does not move the argmax). Ties go to the lowest id. The most
  // likely kept token goes first, so that the bound prunes from the start.
  const std::vector<double>& bound = gumbel_bounds();
  const uint64_t prefix = noise_prefix(params.seed, index);
  const int32_t first = filter ? order[0] : top;
  int32_t best = first;
  double best_key = static_cast<double>(logits[static_cast<size_t>(first)] - m) / T + gumbel_noise(params.seed, index, first);
  auto consider = [&](int32_t i) {
    if (i == first) return;
    const double x = static_cast<double>(logits[static_cast<size_t>(i)] - m) / T;
    const uint64_t bits = noise_bits_after(prefix, i);
    if (!(x + bound[bits >> (64 - kBoundBits)] >= best_key)) return;
    const double key = x + gumbel_of(bits);
    if (key > best_key || (key == best_key && i < best)) {
      best = i;
      best_key = key;
    }
  };
  if (filter) {
    for (int32_t i : order) consider(i);
  } else {
    for (size_t i = 0; i < V; ++i) consider(static_cast<int32_t>(i));
  }
  return best;
}

bool Sampler::adjusts() const {
  return !params_.logit_bias.empty() || params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

bool Sampler::plain_greedy() const { return (params_.temperature <= 0.0f || params_.top_k == 1) && !adjusts(); }

void Sampler::take(int32_t token) {
  ++drawn_;
  ++output_counts_[token];
}

int32_t Sampler::next(std::span<const float> raw) {
  // Copy the row only when a bias or penalty will change it (a vocabulary-sized copy per token otherwise).
  const bool adjust = adjusts();
  std::vector<float> row;
  if (adjust) row = adjusted(raw);
  const std::span<const float> logits = adjust ? std::span<const float>(row) : raw;
  const int32_t token = pick_token(logits, params_, drawn_++);
  ++output_counts_[token];
  return token;
}

}  // namespace strata
