#pragma once
// Scaling a full-size shape down to a byte budget (shape.cpp).
#include <cstdint>
#include <functional>
#include <optional>

#include "synth/synth.h"

namespace strata::synth {

struct ShapeRequest {
  Format format = Format::Safetensors;
  Quant quant;
  bool legacy_mla = false;
  std::optional<double> target_bytes;
  std::optional<int64_t> layers, experts, hidden;  // pinned axes
  std::optional<int64_t> vocab;                    // a pinned synthetic vocabulary
  int64_t min_vocab = 512;                         // the synthetic vocabulary's minimum
  int64_t tokenizer_vocab = 0;                     // a real tokenizer's size (0: synthetic vocabulary)
};

struct ShapeResult {
  ModelConfig config;
  uint64_t estimated_bytes = 0;  // of the weight files
  uint64_t full_bytes = 0;       // the unscaled shape's, same estimate
};

// The shape class is kept: experts per token, head width (GQA head_dim, MLA
// nope/rope/v dims), the GQA ratio, shared experts, routing; the hidden size,
// the expert and dense widths, the MLA ranks and the head counts shrink
// together by a width factor w, the layer count and the expert count by
// their own factors. With a budget, the three factors share the reduction
// equally in log-bytes (w counts twice: matrices are width²), the solution is
// found by bisection and then refined over layers and experts so the
// estimated file size lands as close to the budget as the granularity allows.
// Throws strata::Error if the budget is outside what the shape can reach.
ShapeResult fit_shape(const ModelConfig& base, const ShapeRequest& r);

// Calls fn(tensor, copies) for the tensors of `c`, planning one layer of
// each kind (dense, MoE) and passing how many layers share it: a cheap sum
// over a model of any size.
void for_each_tensor_once(const ModelConfig& c, Format format, const Quant& q, bool legacy_mla,
                          const std::function<void(const TensorSpec&, uint64_t copies)>& fn);

// Estimated bytes of the weight files of `c` (exact tensor bytes plus a
// per-tensor header allowance).
uint64_t estimate_bytes(const ModelConfig& c, const ShapeRequest& r);

}  // namespace strata::synth
