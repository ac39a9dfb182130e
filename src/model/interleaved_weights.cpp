#include "model/interleaved_weights.h"

#include "kernels/interleave.h"
#include "util/mapped_file.h"

namespace strata {

size_t InterleavedWeights::adopt(const std::vector<kernels::WeightMatrix*>& mats) {
  uint64_t total = 0;
  for (const kernels::WeightMatrix* m : mats)
    if (kernels::interleavable(*m)) total += align_up(static_cast<uint64_t>(m->out) * m->row_bytes(), 64);
  if (total == 0) return kNone;
  AlignedBuffer& buf = buffers_.emplace_back(total, /*zeroed=*/false);
  uint64_t at = 0;
  for (kernels::WeightMatrix* m : mats) {
    if (!kernels::interleavable(*m)) continue;
    const size_t bytes = static_cast<size_t>(m->out) * m->row_bytes();
    const uint8_t* src = m->data;
    *m = kernels::interleave(*m, buf.data() + at);
    release_mapped_pages(src, bytes);
    at += align_up(bytes, 64);
  }
  bytes_ += total;
  sizes_.push_back(total);
  return buffers_.size() - 1;
}

void InterleavedWeights::release(size_t index) {
  if (index >= buffers_.size() || buffers_[index].empty()) return;
  bytes_ -= sizes_[index];
  buffers_[index] = AlignedBuffer();
}

kernels::WeightMatrix InterleavedWeights::adopt(const kernels::WeightMatrix& w) {
  kernels::WeightMatrix m = w;
  adopt(std::vector<kernels::WeightMatrix*>{&m});
  return m;
}

}  // namespace strata
