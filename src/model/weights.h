#pragma once
// Binding checkpoint tensors to the shapes an architecture expects. Large
// weights stay where the reader mapped them (quantized weights and their
// scales in their stored types); only small vectors (norms, biases, FP8 block
// scales) are converted to f32 and owned here.
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "kernels/linear.h"
#include "model/interleaved_weights.h"
#include "model/model_config.h"

namespace strata {

class WeightBinder {
 public:
  WeightBinder(const TensorSource& source, const ModelConfig& config) : source_(source), config_(config) {}

  // A linear layer [out, in] under `prefix`, whichever way the checkpoint
  // stores it:
  //  - "<prefix>.weight" F32/BF16/F16;
  //  - "<prefix>.weight" F8_E4M3 + "<prefix>.weight_scale_inv" (block grid of
  //    config.fp8_block);
  //  - "<prefix>.weight" I8 + "<prefix>.weight_scale" [out] or [out, 1]
  //    (F32/BF16/F16): int8, one scale per row;
  //  - "<prefix>.weight" of a GGUF block type (Q8_0, Q4_K, Q6_K, MXFP4) with
  //    HF-order shape [out, in], as the GGUF reader hands it out;
  //  - compressed-tensors pack-quantized int4 (symmetric): "<prefix>.weight_packed"
  //    I32 [out, in/8] + "<prefix>.weight_scale" [out, in/G] (F32/BF16/F16;
  //    G a multiple of 32: Kimi-K2 ships G = 32) + optional
  //    "<prefix>.weight_shape" [2] = {out, in} (I32 or I64);
  //  - compressed-tensors mxfp4-pack-quantized: "<prefix>.weight_packed" U8
  //    (packed_mxfp4 below).
  // "<prefix>.bias" is bound too when `bias` is true.
  kernels::WeightMatrix linear(const std::string& prefix, int64_t out, int64_t in, bool bias = false);
  // Expert `expert` of a stacked [E, out, in] tensor `name` (e.g. GGUF
  // ffn_gate_exps) of any type linear() accepts as a plain ".weight".
  kernels::WeightMatrix stacked(const std::string& name, int64_t expert, int64_t out, int64_t in);
  // gpt-oss MXFP4 as Hugging Face ships it: "<prefix>_blocks" U8
  // [E, out, in/32, 16] + "<prefix>_scales" U8 [E, out, in/32] (E8M0, bias
  // 127), expert `expert`; without `expert` the tensors are [out, in/32, 16]
  // and [out, in/32].
  kernels::WeightMatrix mxfp4(const std::string& prefix, std::optional<int64_t> expert, int64_t out, int64_t in);
  // A matrix used only through kernels::linear() for the whole run (the
  // trunk's projections): repointed at an interleaved copy owned here when
  // its format has that faster layout (kernels/interleave.h).
  kernels::WeightMatrix resident(const kernels::WeightMatrix& m) { return interleave_ ? interleaved_.adopt(m) : m; }
  // Whether resident() rewrites (the backend's wants_interleaved()).
  void set_interleave(bool on) { interleave_ = on; }
  // A 2-D table such as the token embedding, read row by row.
  kernels::WeightMatrix table(const std::string& name, int64_t rows, int64_t cols);
  // A 1-D tensor of `n` elements as f32 (norm weights, biases).
  const float* vector(const std::string& name, int64_t n);
  // A tensor of any shape holding exactly `n` elements, as f32 in its stored
  // order (a depthwise convolution's [channels, 1, kernel] or [channels,
  // kernel]; a [1, n] projection vector).
  const float* values(const std::string& name, int64_t n);
  // The first `n` elements of a tensor that holds at least that many, as f32
  // (Kimi K3's A_log, stored [heads] or padded).
  const float* leading(const std::string& name, int64_t n);
  // compressed-tensors "mxfp4-pack-quantized" [out, in]: "<prefix>.weight_packed"
  // U8 [out, in/2] (weight 2i in the low nibble of byte i, E2M1) and
  // "<prefix>.weight_scale" U8 [out, in/32] (E8M0), as Kimi K3 ships its experts.
  kernels::WeightMatrix packed_mxfp4(const std::string& prefix, int64_t out, int64_t in);
  bool has(const std::string& name) const { return source_.find(name) != nullptr; }
  // The widest input (columns) of any matrix bound so far: what a product's
  // scratch is planned for.
  int64_t widest_in() const { return widest_in_; }

 private:
  const TensorView& expect(const std::string& name, const std::vector<int64_t>& shape);
  // An MXFP4 matrix whose E2M1 codes (two a byte, low nibble first) and E8M0
  // scales (one per 32) start at these offsets of their tensors.
  kernels::WeightMatrix mxfp4_split(const TensorView& codes, const TensorView& scales, int64_t out, int64_t in,
                                    size_t code_offset, size_t scale_offset);
  const float* to_f32(const TensorView& t);
  // Checks that `t` holds `rows` rows of `w`'s layout and that the kernels
  // accept `w`; errors name the tensor.
  void check(const TensorView& t, const kernels::WeightMatrix& w, int64_t rows);

  const TensorSource& source_;
  const ModelConfig& config_;
  std::deque<std::vector<float>> owned_;
  InterleavedWeights interleaved_;
  bool interleave_ = true;
  int64_t widest_in_ = 0;
};

}  // namespace strata
