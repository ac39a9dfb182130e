#pragma once
// Resident weights rewritten into the kernels' interleaved layout
// (kernels/interleave.h) once at load: the checkpoint's mapping stays
// untouched; the copies live here and the mapped pages they came from are
// released from the resident set.
#include <vector>

#include "kernels/linear.h"
#include "storage/aligned_buffer.h"

namespace strata {

class InterleavedWeights {
 public:
  // Repoints every matrix of `mats` that has an interleaved layout at an
  // interleaved copy owned here (one allocation for the lot); others are
  // left as they are.
  // Returns the copy's index (for release()), or kNone when none was made.
  size_t adopt(const std::vector<kernels::WeightMatrix*>& mats);
  // Frees the copy made by the adopt() call that returned `index`: the
  // matrices it repointed must never be read again.
  void release(size_t index);
  static constexpr size_t kNone = static_cast<size_t>(-1);
  // One matrix; returns it (repointed or not).
  kernels::WeightMatrix adopt(const kernels::WeightMatrix& w);
  uint64_t bytes() const { return bytes_; }

 private:
  std::vector<AlignedBuffer> buffers_;
  std::vector<uint64_t> sizes_;  // per buffer: the bytes adopt() counted
  uint64_t bytes_ = 0;
};

}  // namespace strata
