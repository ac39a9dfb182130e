#include "model/expert_layout.h"

#include <algorithm>
#include <cstring>

#include "formats/dtype.h"
#include "util/checked_math.h"
#include "util/error.h"

namespace strata {

namespace {

uint64_t align64(uint64_t v) { return checked_add(v, 63, "expert blob") & ~uint64_t{63}; }

}  // namespace

// Checked: a layout read from a manifest may carry any dimensions, and a
// wrapped size would pass the check that it fits in its blob.
size_t weight_data_bytes(const kernels::WeightMatrix& m) {
  return checked_mul(static_cast<uint64_t>(std::max<int64_t>(m.out, 0)), m.row_bytes(), "weight data");
}

size_t weight_scales_bytes(const kernels::WeightMatrix& m) {
  if (!m.scales || m.scale_group <= 0) return 0;
  const size_t per = m.scale_dtype == DType::F8_E8M0 ? 1 : dtype_size(m.scale_dtype);
  const uint64_t per_row = checked_mul(static_cast<uint64_t>(m.in / m.scale_group), per, "weight scales");
  return checked_mul(static_cast<uint64_t>(std::max<int64_t>(m.out, 0)), per_row, "weight scales");
}

size_t weight_block_scale_bytes(const kernels::WeightMatrix& m) {
  if (!m.block_scale) return 0;
  if (m.block_out <= 0 || m.block_in <= 0 || m.out < 0 || m.in < 0 || m.scale_row_offset < 0)
    throw Error("an FP8 block scale needs positive block sizes");
  const uint64_t rows_end = checked_add(static_cast<uint64_t>(m.scale_row_offset), static_cast<uint64_t>(m.out),
                                        "block scales");
  const auto bo = static_cast<uint64_t>(m.block_out), bi = static_cast<uint64_t>(m.block_in);
  const uint64_t rows = rows_end / bo + (rows_end % bo != 0);
  const uint64_t cols = static_cast<uint64_t>(m.in) / bi + (static_cast<uint64_t>(m.in) % bi != 0);
  return checked_mul(checked_mul(rows, cols, "block scales"), sizeof(float), "block scales");
}

size_t weight_bias_bytes(const kernels::WeightMatrix& m) {
  return m.bias ? checked_mul(static_cast<uint64_t>(std::max<int64_t>(m.out, 0)), sizeof(float), "bias") : 0;
}

BlobPlan plan_blob(const ExpertWeights& bound) {
  BlobPlan plan;
  plan.layout = bound;
  plan.bytes = sizeof(BlobHeader);
  visit_expert_ranges(plan.layout, [&](auto& ptr, size_t bytes) {
    BlobPlan::Piece p{ptr, bytes, plan.bytes};
    plan.pieces.push_back(p);
    ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(static_cast<uintptr_t>(p.offset));
    plan.bytes = align64(checked_add(p.offset, bytes, "expert blob"));
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
  visit_expert_ranges(e, [&](auto&, size_t bytes) { total = checked_add(total, bytes, "expert payload"); });
  return total;
}

}  // namespace strata
