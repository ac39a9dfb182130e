#include "model/expert_layout.h"

#include <cstring>

#include "formats/dtype.h"
#include "util/error.h"

namespace strata {

namespace {

uint64_t align64(uint64_t v) { return (v + 63) & ~uint64_t{63}; }

}  // namespace

size_t weight_data_bytes(const kernels::WeightMatrix& m) { return static_cast<size_t>(m.out) * m.row_bytes(); }

size_t weight_scales_bytes(const kernels::WeightMatrix& m) {
  if (!m.scales || m.scale_group <= 0) return 0;
  const size_t per = m.scale_dtype == DType::F8_E8M0 ? 1 : dtype_size(m.scale_dtype);
  return static_cast<size_t>(m.out) * static_cast<size_t>(m.in / m.scale_group) * per;
}

size_t weight_block_scale_bytes(const kernels::WeightMatrix& m) {
  if (!m.block_scale) return 0;
  const int64_t rows = (m.scale_row_offset + m.out + m.block_out - 1) / m.block_out;
  const int64_t cols = (m.in + m.block_in - 1) / m.block_in;
  return static_cast<size_t>(rows * cols) * sizeof(float);
}

size_t weight_bias_bytes(const kernels::WeightMatrix& m) { return m.bias ? static_cast<size_t>(m.out) * sizeof(float) : 0; }

BlobPlan plan_blob(const ExpertWeights& bound) {
  BlobPlan plan;
  plan.layout = bound;
  plan.bytes = sizeof(BlobHeader);
  visit_expert_ranges(plan.layout, [&](auto& ptr, size_t bytes) {
    BlobPlan::Piece p{ptr, bytes, plan.bytes};
    plan.pieces.push_back(p);
    ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(static_cast<uintptr_t>(p.offset));
    plan.bytes = align64(p.offset + bytes);
  });
  return plan;
}

void fill_blob(const BlobPlan& plan, int64_t layer, int64_t expert, uint8_t* blob) {
  std::memset(blob, 0, plan.bytes);
  BlobHeader h;
  h.layer = static_cast<uint32_t>(layer);
  h.expert = static_cast<uint32_t>(expert);
  h.bytes = plan.bytes;
  std::memcpy(blob, &h, sizeof h);
  for (const auto& p : plan.pieces) std::memcpy(blob + p.offset, p.src, p.bytes);
}

void check_blob_header(const uint8_t* blob, int64_t layer, int64_t expert, uint64_t bytes, const std::string& where) {
  BlobHeader want, got;
  std::memcpy(&got, blob, sizeof got);
  if (std::memcmp(got.magic, want.magic, sizeof want.magic) != 0)
    throw Error(where + ": not an expert blob (bad magic); the pack is damaged or the manifest points elsewhere");
  if (got.layer != layer || got.expert != expert || got.bytes != bytes)
    throw Error(where + ": holds layer " + std::to_string(got.layer) + " expert " + std::to_string(got.expert) +
                " (" + std::to_string(got.bytes) + " bytes) but layer " + std::to_string(layer) + " expert " +
                std::to_string(expert) + " (" + std::to_string(bytes) + " bytes) was expected");
}

ExpertWeights rebase(const ExpertWeights& layout, const uint8_t* base, uint64_t relative_mask) {
  ExpertWeights e = layout;
  int i = 0;
  visit_expert_ranges(e, [&](auto& ptr, size_t) {
    if (relative_mask >> i & 1)
      ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(base + reinterpret_cast<uintptr_t>(ptr));
    ++i;
  });
  return e;
}

uint64_t expert_payload_bytes(const ExpertWeights& e) {
  uint64_t total = 0;
  visit_expert_ranges(e, [&](auto&, size_t bytes) { total += bytes; });
  return total;
}

}  // namespace strata
