#pragma once
// The median of a few samples (0 for none): how probes and benches rate a
// noisy drive, where the best or the mean of samples would follow outliers.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace strata {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace strata
