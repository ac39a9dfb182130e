#pragma once
// Sees the routing of each MoE layer as a step computes it: what router
// traces (runtime/route_trace.h) record. Called on the step thread, in layer
// order; seeing changes nothing the step computes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/batch.h"

namespace strata {

class RouteObserver {
 public:
  virtual ~RouteObserver() = default;
  // MoE layer `layer` chose ids[r·k .. r·k + k) for rows[r], in the router's
  // order; `rows` are the step's rows [first, first + rows.size()) (a pass
  // wider than a step routes a layer's parts in turn).
  virtual void routed(int64_t layer, size_t first, std::span<const Row> rows, std::span<const int32_t> ids,
                      size_t k) = 0;
  // The step over `rows` is done (every MoE layer has been seen).
  virtual void step_done(std::span<const Row> rows) = 0;
};

}  // namespace strata
