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
  // MoE layer `layer` chose ids[r·k .. r·k + k) for rows[r], in the router's order.
  virtual void routed(int64_t layer, std::span<const Row> rows, std::span<const int32_t> ids, size_t k) = 0;
  // The step over `rows` is done (every MoE layer has been seen).
  virtual void step_done(std::span<const Row> rows) = 0;
};

}  // namespace strata
