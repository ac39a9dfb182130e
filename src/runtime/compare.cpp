#include "runtime/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/model.h"
#include "runtime/sampler.h"
#include "util/error.h"

namespace strata {

namespace {

// log-softmax in double, so KL of nearly equal distributions is not noise.
std::vector<double> log_softmax(const float* logits, int64_t n) {
  double m = logits[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  const double lse = m + std::log(sum);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(logits[i]) - lse;
  return out;
}

std::vector<float> all_logits(Model& m, const std::vector<int32_t>& seq) {
  auto cache = m.new_cache();
  std::vector<Row> rows;
  for (size_t i = 0; i < seq.size(); ++i) rows.push_back(Row{seq[i], static_cast<int64_t>(i), cache.get(), true});
  std::vector<float> logits(seq.size() * m.config().vocab_size);
  m.forward(rows, logits.data());
  return logits;
}

}  // namespace

CompareReport compare_models(Model& a, Model& b, const std::vector<std::vector<int32_t>>& sequences,
                             const std::function<void(int64_t done, int64_t total)>& progress) {
  const int64_t V = a.config().vocab_size;
  if (b.config().vocab_size != V)
    throw Error("the models have different vocabularies (" + std::to_string(V) + " and " +
                std::to_string(b.config().vocab_size) + " tokens)");
  CompareReport r;
  std::vector<double> kls;
  double nll_a = 0.0, nll_b = 0.0;
  int64_t agree = 0, predicted = 0;
  int64_t total = 0;
  for (const auto& seq : sequences) total += static_cast<int64_t>(seq.size());
  for (const auto& seq : sequences) {
    if (seq.size() < 2) throw Error("compare: every prompt needs at least two tokens");
    std::vector<float> la = all_logits(a, seq), lb = all_logits(b, seq);
    for (size_t i = 0; i < seq.size(); ++i) {
      const float* pa = &la[i * V];
      const float* pb = &lb[i * V];
      std::vector<double> qa = log_softmax(pa, V), qb = log_softmax(pb, V);
      double kl = 0.0;
      for (int64_t t = 0; t < V; ++t) kl += std::exp(qa[t]) * (qa[t] - qb[t]);
      kls.push_back(std::max(kl, 0.0));
      agree += argmax({pa, static_cast<size_t>(V)}) == argmax({pb, static_cast<size_t>(V)});
      if (i + 1 < seq.size()) {
        nll_a -= qa[seq[i + 1]];
        nll_b -= qb[seq[i + 1]];
        ++predicted;
      }
    }
    ++r.sequences;
    if (progress) progress(static_cast<int64_t>(kls.size()), total);
  }
  r.positions = static_cast<int64_t>(kls.size());
  if (kls.empty()) return r;
  double sum = 0.0;
  for (double k : kls) sum += k;
  r.mean_kl = sum / kls.size();
  std::sort(kls.begin(), kls.end());
  r.max_kl = kls.back();
  r.p99_kl = kls[std::min(kls.size() - 1, static_cast<size_t>(std::ceil(0.99 * kls.size())) - 1)];
  r.top1_agreement = static_cast<double>(agree) / kls.size();
  r.perplexity_a = std::exp(nll_a / predicted);
  r.perplexity_b = std::exp(nll_b / predicted);
  return r;
}

std::string compare_gate_failure(const CompareReport& r, std::optional<double> min_top1, std::optional<double> max_kl) {
  std::string out;
  char b[160];
  if (min_top1 && !(r.top1_agreement >= *min_top1)) {
    std::snprintf(b, sizeof b, "top-1 agreement %.6g is below --min-top1 %.6g", r.top1_agreement, *min_top1);
    out += b;
  }
  // Written so that a NaN divergence fails too.
  if (max_kl && !(r.mean_kl <= *max_kl)) {
    std::snprintf(b, sizeof b, "mean KL %.6g nats is above --max-kl %.6g", r.mean_kl, *max_kl);
    out += (out.empty() ? "" : "; ") + std::string(b);
  }
  return out;
}

}  // namespace strata
