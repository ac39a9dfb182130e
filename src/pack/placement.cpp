#include "pack/placement.h"

#include <algorithm>
#include <numeric>

namespace strata {

std::vector<uint32_t> place_layer(const std::vector<double>& weights, const std::vector<double>& heat) {
  const size_t E = heat.size(), D = weights.size();
  std::vector<uint32_t> drive(E, 0);
  if (D <= 1) return drive;
  std::vector<size_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return heat[a] > heat[b]; });
  // Experts never seen in the trace still count a little, so that they too
  // spread evenly (they may be hot in other text).
  double total = 0;
  for (double h : heat) total += h;
  const double floor = total > 0 ? total / static_cast<double>(E) * 1e-3 : 1.0;
  std::vector<double> load(D, 0.0);
  for (size_t e : order) {
    const double h = std::max(heat[e], floor);
    size_t best = 0;
    double best_cost = 0;
    for (size_t d = 0; d < D; ++d) {
      const double cost = (load[d] + h) / weights[d];
      if (d == 0 || cost < best_cost) {
        best = d;
        best_cost = cost;
      }
    }
    load[best] += h;
    drive[e] = static_cast<uint32_t>(best);
  }
  return drive;
}

}  // namespace strata
