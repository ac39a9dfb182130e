#pragma once
// Random tensor contents, generated directly in the stored type: floats by
// table lookup into the quantiles of a normal distribution, block-quantized
// types as random codes under per-block scales chosen so that the decoded
// weights have the requested standard deviation. A chunk's bytes depend only
// on (seed, tensor name, chunk index), never on threads or timing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "synth/synth.h"

namespace strata::synth {

// Bytes of the smallest self-contained piece of a tensor (an element, or a
// quantization block); chunks are whole units.
uint64_t unit_bytes(DType t);

// The seed of a tensor's chunk stream.
uint64_t tensor_seed(uint64_t seed, std::string_view name);

// Fills `n` bytes (whole units) of chunk `chunk` of tensor `t`.
void fill_chunk(const TensorSpec& t, uint64_t tensor_seed, uint64_t chunk, uint8_t* dst, size_t n);

}  // namespace strata::synth
