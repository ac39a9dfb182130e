#include "model/weights.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace strata {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool is_float_type(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

bool is_gguf_block_type(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::MXFP4: return true;
    default: return false;
  }
}

std::string where(const TensorView& t) { return t.file + ": tensor '" + t.name + "'"; }

int64_t read_int(const TensorView& t, size_t i) {
  switch (t.dtype) {
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      return v;
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      return v;
    }
    default: throw Error(where(t) + " has type " + dtype_name(t.dtype) + "; expected I32 or I64");
  }
}

}  // namespace

const TensorView& WeightBinder::expect(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorView& t = source_.get(name);
  if (t.shape != shape)
    throw Error(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + " but the config implies " +
                shape_str(shape));
  return t;
}

const float* WeightBinder::to_f32(const TensorView& t) {
  if (!is_float_type(t.dtype))
    throw Error(t.file + ": tensor '" + t.name + "' has type " + dtype_name(t.dtype) + "; expected F32, BF16 or F16");
  auto& v = owned_.emplace_back(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype) {
      case DType::F32: std::memcpy(&v[i], t.data + 4 * i, 4); break;
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        v[i] = bf16_to_f32(h);
        break;
      }
      default: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        v[i] = f16_to_f32(h);
        break;
      }
    }
  }
  return v.data();
}

void WeightBinder::check(const TensorView& t, const kernels::WeightMatrix& w, int64_t rows) {
  widest_in_ = std::max(widest_in_, w.in);
  try {
    kernels::check_supported(w);
  } catch (const Error& e) {
    throw Error(where(t) + ": " + e.what());
  }
  const size_t need = static_cast<size_t>(rows) * w.row_bytes();
  if (t.nbytes != 0 && t.nbytes < need)
    throw Error(where(t) + " holds " + std::to_string(t.nbytes) + " bytes but its shape and type need " +
                std::to_string(need));
}

const float* WeightBinder::vector(const std::string& name, int64_t n) { return to_f32(expect(name, {n})); }

const float* WeightBinder::values(const std::string& name, int64_t n) {
  const TensorView& t = source_.get(name);
  if (t.numel() != n)
    throw Error(where(t) + " has shape " + shape_str(t.shape) + " but the config implies " + std::to_string(n) +
                " values");
  return to_f32(t);
}

const float* WeightBinder::leading(const std::string& name, int64_t n) {
  const TensorView& t = source_.get(name);
  if (t.numel() < n)
    throw Error(where(t) + " has shape " + shape_str(t.shape) + " but the config implies at least " +
                std::to_string(n) + " values");
  return to_f32(t);
}

kernels::WeightMatrix WeightBinder::packed_mxfp4(const std::string& prefix, int64_t out, int64_t in) {
  const std::string pname = prefix + ".weight_packed", sname = prefix + ".weight_scale";
  if (in % 32 != 0)
    throw Error(source_.describe() + ": tensor '" + pname +
                "': MXFP4 needs an input width that is a multiple of 32, the config implies " + std::to_string(in));
  const TensorView& p = expect(pname, {out, in / 2});
  const TensorView& s = expect(sname, {out, in / 32});
  return mxfp4_split(p, s, out, in, 0, 0);
}

kernels::WeightMatrix WeightBinder::table(const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = expect(name, {rows, cols});
  if (!is_float_type(t.dtype) && !is_gguf_block_type(t.dtype))
    throw Error(t.file + ": tensor '" + name + "' has type " + dtype_name(t.dtype) +
                "; expected F32, BF16, F16 or a GGUF block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, "
                "Q5_K, Q6_K, MXFP4)");
  kernels::WeightMatrix w;
  w.dtype = t.dtype;
  w.out = rows;
  w.in = cols;
  w.data = t.data;
  check(t, w, rows);
  return w;
}

kernels::WeightMatrix WeightBinder::linear(const std::string& prefix, int64_t out, int64_t in, bool bias) {
  kernels::WeightMatrix w;
  w.out = out;
  w.in = in;
  const std::string packed_name = prefix + ".weight_packed";
  if (const TensorView* p = source_.find(packed_name)) {
    // compressed-tensors: "mxfp4-pack-quantized" bytes, or "pack-quantized"
    // int4 words (symmetric, groups of 32 or a multiple).
    if (p->dtype == DType::U8) {
      kernels::WeightMatrix m = packed_mxfp4(prefix, out, in);
      if (bias) m.bias = vector(prefix + ".bias", out);
      return m;
    }
    if (p->dtype != DType::I32)
      throw Error(where(*p) + " has type " + dtype_name(p->dtype) +
                  "; expected I32 (eight int4 values per word) or U8 (two MXFP4 values per byte)");
    if (in % 32 != 0)
      throw Error(where(*p) + ": packed int4 needs an input width that is a multiple of 32, the config implies " +
                  std::to_string(in));
    if (const TensorView* z = source_.find(prefix + ".weight_zero_point"))
      throw Error(where(*z) + ": asymmetric int4 (a zero point) is not supported");
    const TensorView& t = expect(packed_name, {out, in / 8});
    if (const TensorView* s = source_.find(prefix + ".weight_shape")) {
      if (s->numel() != 2 || read_int(*s, 0) != out || read_int(*s, 1) != in)
        throw Error(where(*s) + " does not say [" + std::to_string(out) + ", " + std::to_string(in) + "]");
    }
    // One scale per group along the row; Kimi-K2 uses groups of 32.
    const std::string sname = prefix + ".weight_scale";
    const TensorView& s = source_.get(sname);
    const int64_t groups = s.shape.size() == 2 ? s.shape[1] : 0;
    if (s.shape.size() != 2 || s.shape[0] != out || groups <= 0 || in % groups != 0 || (in / groups) % 32 != 0)
      throw Error(where(s) + " has shape " + shape_str(s.shape) + "; int4 scales for [" + std::to_string(out) + ", " +
                  std::to_string(in) + "] must be [" + std::to_string(out) +
                  ", in / group] with a group size that is a multiple of 32 (e.g. [" + std::to_string(out) + ", " +
                  std::to_string(in / 32) + "] for groups of 32)");
    if (!is_float_type(s.dtype))
      throw Error(where(s) + " has type " + dtype_name(s.dtype) + "; expected F32, BF16 or F16");
    w.dtype = DType::I32;
    w.packing = kernels::Packing::Int4x8;
    w.data = t.data;
    w.scales = s.data;
    w.scale_dtype = s.dtype;
    w.scale_group = in / groups;
    check(t, w, out);
  } else {
    const std::string name = prefix + ".weight";
    const TensorView& t = expect(name, {out, in});
    w.dtype = t.dtype;
    w.data = t.data;
    if (t.dtype == DType::F8_E4M3) {
      if (!config_.fp8_block)
        throw Error(t.file + ": tensor '" + name +
                    "' is FP8 but config.json has no fp8 quantization_config with weight_block_size");
      const auto [bo, bi] = *config_.fp8_block;
      const std::string sname = prefix + ".weight_scale_inv";
      const TensorView& s = expect(sname, {(out + bo - 1) / bo, (in + bi - 1) / bi});
      w.block_scale = to_f32(s);
      w.block_out = bo;
      w.block_in = bi;
    } else if (t.dtype == DType::I8) {
      const std::string sname = prefix + ".weight_scale";
      const TensorView& s = source_.get(sname);
      if (s.shape != std::vector<int64_t>{out} && s.shape != std::vector<int64_t>{out, 1})
        throw Error(where(s) + " has shape " + shape_str(s.shape) + "; int8 weights need one scale per row: [" +
                    std::to_string(out) + "] or [" + std::to_string(out) + ", 1]");
      if (!is_float_type(s.dtype))
        throw Error(where(s) + " has type " + dtype_name(s.dtype) + "; expected F32, BF16 or F16");
      w.scales = s.data;
      w.scale_dtype = s.dtype;
      w.scale_group = in;
    } else if (!is_float_type(t.dtype) && !is_gguf_block_type(t.dtype)) {
      throw Error(t.file + ": tensor '" + name + "' has unsupported weight type " + dtype_name(t.dtype));
    }
    check(t, w, out);
  }
  if (bias) w.bias = vector(prefix + ".bias", out);
  return w;
}

kernels::WeightMatrix WeightBinder::stacked(const std::string& name, int64_t expert, int64_t out, int64_t in) {
  const TensorView& t = source_.get(name);
  if (t.shape.size() != 3 || t.shape[1] != out || t.shape[2] != in || expert < 0 || expert >= t.shape[0])
    throw Error(where(t) + " has shape " + shape_str(t.shape) + " but the config implies [E > " +
                std::to_string(expert) + ", " + std::to_string(out) + ", " + std::to_string(in) + "]");
  if (!is_float_type(t.dtype) && !is_gguf_block_type(t.dtype))
    throw Error(where(t) + " has unsupported weight type " + dtype_name(t.dtype));
  kernels::WeightMatrix w;
  w.dtype = t.dtype;
  w.out = out;
  w.in = in;
  w.data = t.data;
  check(t, w, out * t.shape[0]);
  w.data = t.data + static_cast<size_t>(expert * out) * w.row_bytes();
  return w;
}

kernels::WeightMatrix WeightBinder::mxfp4(const std::string& prefix, std::optional<int64_t> expert, int64_t out,
                                          int64_t in) {
  const std::string bname = prefix + "_blocks", sname = prefix + "_scales";
  const TensorView& b = source_.get(bname);
  if (in % 32 != 0)
    throw Error(where(b) + ": MXFP4 needs an input width that is a multiple of 32, the config implies " +
                std::to_string(in));
  const int64_t groups = in / 32;
  std::vector<int64_t> bshape{out, groups, 16}, sshape{out, groups};
  int64_t e = 0;
  if (expert) {
    if (b.shape.size() != 4 || *expert < 0 || *expert >= b.shape[0])
      throw Error(where(b) + " has shape " + shape_str(b.shape) + " but the config implies [E > " +
                  std::to_string(*expert) + ", " + std::to_string(out) + ", " + std::to_string(groups) + ", 16]");
    e = *expert;
    bshape.insert(bshape.begin(), b.shape[0]);
    sshape.insert(sshape.begin(), b.shape[0]);
  }
  expect(bname, bshape);
  const TensorView& s = expect(sname, sshape);
  return mxfp4_split(b, s, out, in, static_cast<size_t>(e * out * groups * 16), static_cast<size_t>(e * out * groups));
}

kernels::WeightMatrix WeightBinder::mxfp4_split(const TensorView& codes, const TensorView& scales, int64_t out,
                                                int64_t in, size_t code_offset, size_t scale_offset) {
  if (codes.dtype != DType::U8) throw Error(where(codes) + " has type " + dtype_name(codes.dtype) + "; expected U8");
  if (scales.dtype != DType::U8 && scales.dtype != DType::F8_E8M0)
    throw Error(where(scales) + " has type " + dtype_name(scales.dtype) + "; expected U8 (E8M0 exponents)");
  kernels::WeightMatrix w;
  w.dtype = DType::U8;
  w.packing = kernels::Packing::Mxfp4Split;
  w.out = out;
  w.in = in;
  w.data = codes.data + code_offset;
  w.scales = scales.data + scale_offset;
  w.scale_dtype = DType::F8_E8M0;
  w.scale_group = 32;
  check(codes, w, out);
  return w;
}

}  // namespace strata
