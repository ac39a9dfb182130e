#include "vulkan/vk_formats.h"

#include <string>

#include "formats/dtype.h"
#include "util/error.h"

namespace strata::vk {

const char* format_name(WeightFormat f) {
  static const char* const names[] = {"f32",  "bf16", "f16",  "f8_e4m3", "i8_row", "i4_group",
                                      "mxfp4_split", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
                                      "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "mxfp4",
                                      "il_q8_0", "il_mxfp4", "il_q4_k"};
  return names[static_cast<uint32_t>(f)];
}

namespace {

[[noreturn]] void unreadable(const kernels::WeightMatrix& w, const std::string& why) {
  throw Error(std::string("the Vulkan backend cannot read a ") + dtype_name(w.dtype) + " matrix [" +
              std::to_string(w.out) + " x " + std::to_string(w.in) + "]: " + why);
}

uint32_t scale_type(const kernels::WeightMatrix& w) {
  switch (w.scale_dtype) {
    case DType::F32: return 0;
    case DType::BF16: return 1;
    case DType::F16: return 2;
    default: return 0;  // E8M0 (MXFP4 split): read as bytes
  }
}

}  // namespace

WeightFormat weight_format(const kernels::WeightMatrix& w) {
  kernels::check_supported(w);
  if (static_cast<uint64_t>(w.out) * w.row_bytes() >= (uint64_t{1} << 32))
    unreadable(w, "more than 4 GiB in one matrix");
  switch (w.packing) {
    case kernels::Packing::Int4x8: return WeightFormat::I4_GROUP;
    case kernels::Packing::Mxfp4Split: return WeightFormat::MXFP4_SPLIT;
    case kernels::Packing::Interleaved16:
      switch (w.dtype) {
        case DType::Q8_0: return WeightFormat::IL_Q8_0;
        case DType::MXFP4: return WeightFormat::IL_MXFP4;
        case DType::Q4_K: return WeightFormat::IL_Q4_K;
        default: unreadable(w, "an interleaved layout the shaders do not know");
      }
    case kernels::Packing::Plain: break;
  }
  switch (w.dtype) {
    case DType::F32: return WeightFormat::F32;
    case DType::BF16: return WeightFormat::BF16;
    case DType::F16: return WeightFormat::F16;
    case DType::F8_E4M3: return WeightFormat::F8_E4M3;
    case DType::I8: return WeightFormat::I8_ROW;
    case DType::Q8_0: return WeightFormat::Q8_0;
    case DType::Q4_0: return WeightFormat::Q4_0;
    case DType::Q4_1: return WeightFormat::Q4_1;
    case DType::Q5_0: return WeightFormat::Q5_0;
    case DType::Q5_1: return WeightFormat::Q5_1;
    case DType::Q2_K: return WeightFormat::Q2_K;
    case DType::Q3_K: return WeightFormat::Q3_K;
    case DType::Q4_K: return WeightFormat::Q4_K;
    case DType::Q5_K: return WeightFormat::Q5_K;
    case DType::Q6_K: return WeightFormat::Q6_K;
    case DType::MXFP4: return WeightFormat::MXFP4;
    default: unreadable(w, "no shader for this type");
  }
}

WeightSpans weight_spans(const kernels::WeightMatrix& w) {
  WeightSpans s;
  const uint64_t out = static_cast<uint64_t>(w.out);
  s.data = out * w.row_bytes();
  if (w.scales && w.scale_group > 0)
    s.scales = out * static_cast<uint64_t>(w.in / w.scale_group) * (w.scale_dtype == DType::F32   ? 4
                                                                     : w.scale_dtype == DType::BF16 ||
                                                                               w.scale_dtype == DType::F16
                                                                         ? 2
                                                                         : 1);
  if (w.block_scale) {
    const uint64_t cols = static_cast<uint64_t>((w.in + w.block_in - 1) / w.block_in);
    const uint64_t grid_rows = static_cast<uint64_t>((w.scale_row_offset + w.out + w.block_out - 1) / w.block_out);
    s.block_scale = grid_rows * cols * sizeof(float);
  }
  if (w.bias) s.bias = out * sizeof(float);
  return s;
}

WeightRef weight_ref(const kernels::WeightMatrix& w, uint64_t data, uint64_t scales, uint64_t block_scale,
                     uint64_t bias) {
  WeightRef r;
  r.data = data;
  r.scales = scales;
  r.block_scale = block_scale;
  r.bias = bias;
  r.out_rows = static_cast<uint32_t>(w.out);
  r.in_cols = static_cast<uint32_t>(w.in);
  r.row_bytes = static_cast<uint32_t>(w.row_bytes());
  if (w.scales && w.scale_group > 0) {
    r.scale_row_bytes = static_cast<uint32_t>(weight_spans(w).scales / static_cast<uint64_t>(w.out ? w.out : 1));
    r.group = static_cast<uint32_t>(w.scale_group);
    r.scale_type = scale_type(w);
  }
  if (w.block_scale) {
    r.has_block_scale = 1;
    r.block_out = static_cast<uint32_t>(w.block_out);
    r.block_in = static_cast<uint32_t>(w.block_in);
    r.block_cols = static_cast<uint32_t>((w.in + w.block_in - 1) / w.block_in);
    r.row_offset = static_cast<uint32_t>(w.scale_row_offset);
  }
  r.has_bias = w.bias ? 1 : 0;
  return r;
}

}  // namespace strata::vk
