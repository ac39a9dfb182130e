// WeightBinder: the checkpoint spellings of quantized linear layers
// (compressed-tensors int4 and int8, GGUF block types, gpt-oss MXFP4, stacked
// experts) bind to matrices whose products match the values the format
// defines, and malformed companions are one clear error naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "kernels/linear.h"
#include "model/weights.h"
#include "util/error.h"

namespace strata {
namespace {

class MemorySource : public TensorSource {
 public:
  void add(const std::string& name, DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    auto& b = store_.emplace_back(std::move(bytes));
    TensorView v;
    v.name = name;
    v.dtype = t;
    v.shape = std::move(shape);
    v.data = b.data();
    v.nbytes = b.size();
    v.file = "mem.safetensors";
    tensors_[name] = v;
  }
  template <class T>
  void add_values(const std::string& name, DType t, std::vector<int64_t> shape, const std::vector<T>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    add(name, t, std::move(shape), std::move(bytes));
  }
  const TensorView* find(const std::string& name) const override {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> n;
    for (const auto& [k, v] : tensors_) n.push_back(k);
    return n;
  }
  std::string describe() const override { return "mem"; }

 private:
  std::deque<std::vector<uint8_t>> store_;
  std::map<std::string, TensorView> tensors_;
};

std::vector<float> dequant(const kernels::WeightMatrix& w) {
  std::vector<float> all(static_cast<size_t>(w.out * w.in));
  for (int64_t o = 0; o < w.out; ++o) kernels::dequantize_row(w, o, &all[o * w.in]);
  return all;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BinderFormats, CompressedTensorsInt4) {
  const int64_t out = 3, in = 64;
  std::vector<int> q(out * in);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int>((i * 11 + 5) % 16) - 8;
  std::vector<int32_t> packed(out * in / 8, 0);
  for (size_t i = 0; i < q.size(); ++i)
    packed[i / 8] = static_cast<int32_t>(static_cast<uint32_t>(packed[i / 8]) | (static_cast<uint32_t>(q[i] + 8) << (4 * (i % 8))));
  std::vector<uint16_t> scales(out * in / 32);
  for (size_t g = 0; g < scales.size(); ++g) scales[g] = f32_to_bf16_round(0.5f + 0.25f * static_cast<float>(g));
  MemorySource src;
  src.add_values("l.weight_packed", DType::I32, {out, in / 8}, packed);
  src.add_values("l.weight_scale", DType::BF16, {out, in / 32}, scales);
  src.add_values("l.weight_shape", DType::I64, {2}, std::vector<int64_t>{out, in});
  ModelConfig c;
  WeightBinder b(src, c);
  const kernels::WeightMatrix w = b.linear("l", out, in);
  EXPECT_EQ(w.packing, kernels::Packing::Int4x8);
  const std::vector<float> v = dequant(w);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      EXPECT_EQ(v[o * in + i], static_cast<float>(q[o * in + i]) * bf16_to_f32(scales[(o * in + i) / 32]));

  // A weight_shape that disagrees, and scales of another group size, are errors.
  MemorySource bad;
  bad.add_values("l.weight_packed", DType::I32, {out, in / 8}, packed);
  bad.add_values("l.weight_scale", DType::BF16, {out, 3}, std::vector<uint16_t>(3 * out));
  WeightBinder bb(bad, c);
  const std::string err = error_of([&] { bb.linear("l", out, in); });
  EXPECT_NE(err.find("l.weight_scale"), std::string::npos) << err;
  MemorySource bad2;
  bad2.add_values("l.weight_packed", DType::I32, {out, in / 8}, packed);
  bad2.add_values("l.weight_scale", DType::BF16, {out, in / 32}, scales);
  bad2.add_values("l.weight_shape", DType::I32, {2}, std::vector<int32_t>{out, in + 8});
  WeightBinder bb2(bad2, c);
  EXPECT_NE(error_of([&] { bb2.linear("l", out, in); }).find("weight_shape"), std::string::npos);

  // Groups of 64: one scale per 64 values.
  MemorySource g64;
  g64.add_values("l.weight_packed", DType::I32, {out, in / 8}, packed);
  g64.add_values("l.weight_scale", DType::F32, {out, in / 64}, std::vector<float>{0.5f, -2.0f, 0.125f});
  WeightBinder b64(g64, c);
  const std::vector<float> v64 = dequant(b64.linear("l", out, in));
  const float s64[3] = {0.5f, -2.0f, 0.125f};
  for (int64_t i = 0; i < out * in; ++i) EXPECT_EQ(v64[i], static_cast<float>(q[i]) * s64[i / 64]);
  // A zero point (asymmetric) is refused rather than ignored.
  g64.add_values("l.weight_zero_point", DType::I32, {out, 1}, std::vector<int32_t>(out));
  EXPECT_NE(error_of([&] { b64.linear("l", out, in); }).find("zero point"), std::string::npos);
}

TEST(BinderFormats, Int8PerRow) {
  const int64_t out = 2, in = 40;
  std::vector<int8_t> q(out * in);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(static_cast<int>(i * 7) % 256 - 128);
  for (std::vector<int64_t> sshape : {std::vector<int64_t>{out}, std::vector<int64_t>{out, 1}}) {
    MemorySource src;
    src.add_values("l.weight", DType::I8, {out, in}, q);
    src.add_values("l.weight_scale", DType::F32, sshape, std::vector<float>{0.5f, 0.03125f});
    ModelConfig c;
    WeightBinder b(src, c);
    const std::vector<float> v = dequant(b.linear("l", out, in));
    for (int64_t i = 0; i < out * in; ++i) EXPECT_EQ(v[i], static_cast<float>(q[i]) * (i < in ? 0.5f : 0.03125f));
  }
  MemorySource bad;
  bad.add_values("l.weight", DType::I8, {out, in}, q);
  bad.add_values("l.weight_scale", DType::F32, {out, 2}, std::vector<float>(4, 1.0f));
  ModelConfig c;
  WeightBinder b(bad, c);
  EXPECT_NE(error_of([&] { b.linear("l", out, in); }).find("one scale per row"), std::string::npos);
}

TEST(BinderFormats, GgufBlockTypesAndStackedExperts) {
  // Two Q8_0 experts of [2, 64]: expert e's blocks follow expert e-1's.
  const int64_t E = 2, out = 2, in = 64;
  std::vector<uint8_t> bytes(E * out * (in / 32) * 34);
  for (size_t blk = 0; blk < bytes.size() / 34; ++blk) {
    _Float16 d = static_cast<_Float16>(0.25f * static_cast<float>(blk + 1));
    std::memcpy(&bytes[34 * blk], &d, 2);
    for (int j = 0; j < 32; ++j) bytes[34 * blk + 2 + j] = static_cast<uint8_t>(j - 16);
  }
  MemorySource src;
  src.add("exps", DType::Q8_0, {E, out, in}, bytes);
  src.add("l.weight", DType::Q8_0, {out, in}, std::vector<uint8_t>(bytes.begin(), bytes.begin() + out * 2 * 34));
  src.add("short.weight", DType::Q8_0, {out, in}, std::vector<uint8_t>(10));
  src.add("q8_1.weight", DType::Q8_1, {1, 256}, std::vector<uint8_t>(8 * 36));  // no kernel: activations only
  ModelConfig c;
  WeightBinder b(src, c);
  const std::vector<float> e1 = dequant(b.stacked("exps", 1, out, in));
  for (int64_t i = 0; i < out * in; ++i) {
    const int64_t blk = (out * in + i) / 32;  // expert 1 starts after expert 0's 4 blocks
    EXPECT_EQ(e1[i], static_cast<float>(static_cast<int>(i % 32) - 16) * 0.25f * static_cast<float>(blk + 1));
  }
  const std::vector<float> l = dequant(b.linear("l", out, in));
  EXPECT_EQ(l[33], -15.0f * 0.5f);  // block 1 (d = 0.5), q = 1 - 16
  EXPECT_NE(error_of([&] { b.linear("short", out, in); }).find("short.weight"), std::string::npos);
  EXPECT_NE(error_of([&] { b.linear("q8_1", 1, 256); }).find("q8_1.weight"), std::string::npos);
  EXPECT_NE(error_of([&] { b.stacked("exps", 2, out, in); }).find("exps"), std::string::npos);
}

TEST(BinderFormats, GptOssMxfp4Experts) {
  const int64_t E = 3, out = 2, in = 64, G = in / 32;
  std::vector<uint8_t> blocks(E * out * G * 16), scales(E * out * G);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(125 + i % 5);
  MemorySource src;
  src.add("experts.gate_up_proj_blocks", DType::U8, {E, out, G, 16}, blocks);
  src.add("experts.gate_up_proj_scales", DType::U8, {E, out, G}, scales);
  ModelConfig c;
  WeightBinder b(src, c);
  const double lut[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6};
  const std::vector<float> v = dequant(b.mxfp4("experts.gate_up_proj", 2, out, in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const size_t g = static_cast<size_t>((2 * out + o) * G + i / 32);
      const uint8_t byte = blocks[g * 16 + (i % 32) / 2];
      const int nib = i % 2 ? byte >> 4 : byte & 0xF;
      EXPECT_EQ(v[o * in + i], static_cast<float>(std::ldexp(lut[nib], scales[g] - 127))) << o << "," << i;
    }
  EXPECT_NE(error_of([&] { b.mxfp4("experts.gate_up_proj", std::nullopt, out, in); }).find("gate_up_proj_blocks"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
