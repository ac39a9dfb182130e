#include "runtime/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/sampler.h"

namespace strata {

TokenLogprobs token_logprobs(std::span<const float> row, int32_t token, int top_n) {
  const float m = row[argmax(row)];
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v - m));
  const float lse = m + static_cast<float>(std::log(sum));
  TokenLogprobs out;
  out.logprob = row[token] - lse;
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min<size_t>(static_cast<size_t>(std::max(top_n, 0)), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(),
                    [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], row[ids[i]] - lse);
  return out;
}

}  // namespace strata
