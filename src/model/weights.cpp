#include "model/weights.h"

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

const float* WeightBinder::vector(const std::string& name, int64_t n) { return to_f32(expect(name, {n})); }

kernels::WeightMatrix WeightBinder::table(const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = expect(name, {rows, cols});
  if (!is_float_type(t.dtype))
    throw Error(t.file + ": tensor '" + name + "' has type " + dtype_name(t.dtype) + "; expected F32, BF16 or F16");
  kernels::WeightMatrix w;
  w.dtype = t.dtype;
  w.out = rows;
  w.in = cols;
  w.data = t.data;
  return w;
}

kernels::WeightMatrix WeightBinder::linear(const std::string& prefix, int64_t out, int64_t in, bool bias) {
  const std::string name = prefix + ".weight";
  const TensorView& t = expect(name, {out, in});
  kernels::WeightMatrix w;
  w.dtype = t.dtype;
  w.out = out;
  w.in = in;
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
  } else if (!is_float_type(t.dtype)) {
    throw Error(t.file + ": tensor '" + name + "' has unsupported weight type " + dtype_name(t.dtype));
  }
  if (bias) w.bias = vector(prefix + ".bias", out);
  return w;
}

}  // namespace strata
