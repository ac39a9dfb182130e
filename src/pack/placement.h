#pragma once
// Which drive each expert goes to. Within a layer, experts are dealt out so
// that the reads a token makes split across the drives in proportion to their
// bandwidth: hottest first (by router trace heat; by id without one), each to
// the drive whose expected load per GB/s would stay lowest. Balancing per
// layer matters because a token reads its top-k of one layer at a time.
#include <cstdint>
#include <vector>

namespace strata {

// weights[d] > 0: drive d's relative bandwidth. heat[e] >= 0: how often
// expert e is picked (all equal without a trace). Returns drive per expert.
std::vector<uint32_t> place_layer(const std::vector<double>& weights, const std::vector<double>& heat);

}  // namespace strata
