#include "vulkan/vk_weights.h"

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

}  // namespace strata::vk
