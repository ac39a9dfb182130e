#pragma once
// Routing computed on the host, exactly as RouteSpec (backend.h) states it:
// the CPU backend routes its logits in place with it, and the Vulkan backend
// routes the logits it copied back (the chosen ids are needed on the host
// anyway, to fetch the experts), so both choose the same experts from the
// same logits.
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace strata {

// Scratch route_on_host() needs for a router over `experts`.
size_t route_scratch_floats(int64_t experts);
size_t route_scratch_ints(int64_t experts);

// ids and weights [n × spec.k] from logits [n × spec.experts] (overwritten:
// softmax routing normalises them in place). Throws nothing; the caller
// checks spec against its plan.
void route_on_host(const RouteSpec& spec, float* logits, size_t n, int32_t* ids, float* weights, float* floats,
                   int32_t* ints);

}  // namespace strata
