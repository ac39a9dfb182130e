#include "vulkan/vk_weights.h"

#include "util/error.h"

namespace strata::vk {

uint64_t WeightStore::address(const void* p, uint64_t bytes) {
  if (!p || bytes == 0) return 0;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  auto it = copies_.upper_bound(start);
  if (it != copies_.begin()) {
    --it;
    if (start + bytes <= it->first + it->second.bytes) return it->second.address + (start - it->first);
  }
  const Arena::Piece piece = arena_.take(bytes);
  upload_(piece, p, bytes);
  copies_[start] = Copy{bytes, piece.address};
  return piece.address;
}

WeightRef WeightStore::resident(const kernels::WeightMatrix& w) {
  weight_format(w);  // readable by the shaders, else a clear error
  const WeightSpans s = weight_spans(w);
  return weight_ref(w, address(w.data, s.data), address(w.scales, s.scales), address(w.block_scale, s.block_scale),
                    address(w.bias, s.bias));
}

bool WeightStore::stackable(std::span<const kernels::WeightMatrix* const> ws) {
  if (ws.empty()) return false;
  const kernels::WeightMatrix& first = *ws[0];
  uint64_t bytes = 0;
  for (const kernels::WeightMatrix* w : ws) {
    if (w->packing != kernels::Packing::Plain || w->scales || w->block_scale || w->bias || !w->data ||
        w->dtype != first.dtype || w->in != first.in || w->row_bytes() != first.row_bytes())
      return false;
    bytes += static_cast<uint64_t>(w->out) * w->row_bytes();
  }
  return bytes < (uint64_t{1} << 32);  // the shaders' offsets into one matrix are 32 bits (weight_format())
}

uint64_t WeightStore::stacked(std::span<const kernels::WeightMatrix* const> ws) {
  // Found again every step: checked and copied only the first time.
  std::vector<uintptr_t> key;
  for (const kernels::WeightMatrix* w : ws) key.push_back(reinterpret_cast<uintptr_t>(w->data));
  if (auto it = stacks_.find(key); it != stacks_.end()) return it->second;
  if (!stackable(ws)) throw Error("internal: matrices that cannot be stacked");
  uint64_t bytes = 0;
  for (const kernels::WeightMatrix* w : ws) {
    weight_format(*w);  // readable by the shaders, else a clear error
    bytes += weight_spans(*w).data;
  }
  const Arena::Piece piece = arena_.take(bytes);
  uint64_t at = 0;
  for (const kernels::WeightMatrix* w : ws) {
    const uint64_t n = weight_spans(*w).data;
    upload_(Arena::Piece{piece.buffer, piece.offset + at, piece.address + at, piece.mapped ? piece.mapped + at : nullptr},
            w->data, n);
    at += n;
  }
  stacks_.emplace(std::move(key), piece.address);
  return piece.address;
}

}  // namespace strata::vk
