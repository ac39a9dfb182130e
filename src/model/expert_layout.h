#pragma once
// The bytes behind an expert. A bound ExpertWeights points at a handful of
// ranges (each matrix's data, and where present its scales, FP8 block scales
// and bias). Seeing them as a list lets `pack` copy an expert into one blob
// and lets the streamer read an expert from disk into a cache slot and
// re-point the same weights there: the kernels then see the very bytes they
// would have seen in memory, which is what keeps streaming bit-exact.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "model/expert_provider.h"

namespace strata {

// Bytes of each kind of range a matrix points at.
size_t weight_data_bytes(const kernels::WeightMatrix& m);
size_t weight_scales_bytes(const kernels::WeightMatrix& m);
size_t weight_block_scale_bytes(const kernels::WeightMatrix& m);
size_t weight_bias_bytes(const kernels::WeightMatrix& m);

// Calls f(pointer_field, bytes) for every range of `e`, always in the same
// order (gate, up, down, gate_up; data, scales, block_scale, bias), so that
// "the i-th range" means the same field in every expert of a layout.
template <class E, class F>
void visit_expert_ranges(E& e, F&& f) {
  static_assert(std::is_same_v<std::remove_const_t<E>, ExpertWeights>);
  for (auto* m : e.matrices()) {
    if (!m->valid()) continue;
    f(m->data, weight_data_bytes(*m));
    if (m->scales) f(m->scales, weight_scales_bytes(*m));
    if (m->block_scale) f(m->block_scale, weight_block_scale_bytes(*m));
    if (m->bias) f(m->bias, weight_bias_bytes(*m));
  }
}

// One expert laid out as a single blob: a 64-byte header naming the expert
// (so a read from the wrong place is caught even without checksums), then
// each range at a 64-byte aligned offset. `layout` is the expert with every
// pointer replaced by its offset in the blob (never 0: the header is there),
// and rebase() turns it back into real pointers.
struct BlobHeader {
  char magic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'X', '1'};
  uint32_t layer = 0;
  uint32_t expert = 0;
  uint64_t bytes = 0;  // the whole blob, header included
  uint8_t reserved[40] = {};
};
static_assert(sizeof(BlobHeader) == 64);
struct BlobPlan {
  ExpertWeights layout;
  struct Piece {
    const void* src = nullptr;
    size_t bytes = 0;
    uint64_t offset = 0;
  };
  std::vector<Piece> pieces;
  uint64_t bytes = 0;
};
BlobPlan plan_blob(const ExpertWeights& bound);
// Writes the header and copies the pieces of `plan` into `blob` (plan.bytes
// long; gaps zeroed).
void fill_blob(const BlobPlan& plan, int64_t layer, int64_t expert, uint8_t* blob);
// Throws strata::Error (naming `where`) unless `blob` starts with the header
// of (layer, expert) and `bytes` long.
void check_blob_header(const uint8_t* blob, int64_t layer, int64_t expert, uint64_t bytes, const std::string& where);

// `layout` with the ranges selected by `relative_mask` (bit i = i-th range in
// visit order) moved from offsets to base + offset; other pointers kept.
ExpertWeights rebase(const ExpertWeights& layout, const uint8_t* base, uint64_t relative_mask = ~uint64_t{0});

// Total payload bytes of an expert (what a token that selects it needs).
uint64_t expert_payload_bytes(const ExpertWeights& e);

}  // namespace strata
