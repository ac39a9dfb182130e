#pragma once
// Device copies of host arrays that outlive the model (the trunk's matrices,
// norm weights, biases), made once on first use and found again by host
// address: a head's row slice of a matrix already copied resolves inside
// that copy. Routed experts are not kept here (their memory is reused for
// other experts, backend.h); the backend stages them per call.
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "kernels/linear.h"
#include "vulkan/vk_arena.h"
#include "vulkan/vk_formats.h"
#include "vulkan/vk_stream.h"

namespace strata::vk {

class WeightStore {
 public:
  // `upload(piece, host, bytes)` copies host bytes into a device piece.
  using Upload = std::function<void(const Arena::Piece&, const void*, uint64_t)>;
  WeightStore(const Context& ctx, Upload upload) : arena_(ctx, Buffer::Where::Device, 256ull << 20), upload_(std::move(upload)) {}

  // The device address of host bytes [p, p + bytes), copied on first use.
  uint64_t address(const void* p, uint64_t bytes);
  // `w` with every array resident.
  WeightRef resident(const kernels::WeightMatrix& w);
  // The device address of the matrices' data one after another (one copy,
  // made on first use): matrices without scales, block scales or bias, of
  // one format and row length (stackable()), so that row r of the stack is
  // at r · row_bytes.
  uint64_t stacked(std::span<const kernels::WeightMatrix* const> ws);
  static bool stackable(std::span<const kernels::WeightMatrix* const> ws);
  uint64_t bytes() const { return arena_.reserved(); }
  // Forgets every copy (after the ops that read them have run): host memory
  // freed since may be reused for other arrays at the same addresses.
  void clear() {
    copies_.clear();
    stacks_.clear();
    arena_.clear();
  }

 private:
  struct Copy {
    uint64_t bytes;
    uint64_t address;
  };
  Arena arena_;
  Upload upload_;
  std::map<uintptr_t, Copy> copies_;  // by host start address
  std::map<std::vector<uintptr_t>, uint64_t> stacks_;  // by the matrices' host data addresses, in order
};

}  // namespace strata::vk
