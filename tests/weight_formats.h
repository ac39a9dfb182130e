#pragma once
// Random weight matrices of every format the kernels read, for the kernel
// tests and the Vulkan backend's tests: random bytes with the scales set to
// sane values, and a row width per format that exercises its edge cases.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "formats/dtype.h"
#include "kernels/linear.h"
#include "kernels_test_support.h"

namespace strata::kernel_tests::formats {

inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// ---- random matrices of every format -------------------------------------------

enum class Fmt {
  F32, BF16, F16, F8, F8Odd, I8, I4, I4G128, Mxfp4Split, Q8_0, Q4_K, Q6_K, Mxfp4,
  Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K,
};

struct FmtCase {
  const char* name;
  Fmt fmt;
  int64_t in;  // a row width that exercises the format's edge cases
};

inline const FmtCase kCases[] = {
    {"F32", Fmt::F32, 300},       {"BF16", Fmt::BF16, 300},      {"F16", Fmt::F16, 300},
    {"F8_E4M3", Fmt::F8, 300},    {"F8_E4M3_block100", Fmt::F8Odd, 300},
    {"I8_row", Fmt::I8, 300},     {"I4_group32", Fmt::I4, 320},  {"I4_group128", Fmt::I4G128, 384},
    {"MXFP4_hf", Fmt::Mxfp4Split, 320},
    {"Q8_0", Fmt::Q8_0, 320},     {"Q4_K", Fmt::Q4_K, 768},      {"Q6_K", Fmt::Q6_K, 768},
    {"MXFP4_gguf", Fmt::Mxfp4, 320},
    {"Q4_0", Fmt::Q4_0, 320},     {"Q4_1", Fmt::Q4_1, 320},      {"Q5_0", Fmt::Q5_0, 320},
    {"Q5_1", Fmt::Q5_1, 320},     {"Q2_K", Fmt::Q2_K, 768},      {"Q3_K", Fmt::Q3_K, 768},
    {"Q5_K", Fmt::Q5_K, 768},
};

// The GGUF block types whose random blocks are random bytes with their f16
// scales (d, and m / dmin where the type has one) replaced: the DType and the
// byte offsets of those scales in a block (ggml-common.h).
struct GgufBlockCase {
  Fmt fmt;
  DType dtype;
  std::vector<size_t> f16_fields;
};
inline const GgufBlockCase kGgufBlockCases[] = {
    {Fmt::Q4_0, DType::Q4_0, {0}},     {Fmt::Q4_1, DType::Q4_1, {0, 2}}, {Fmt::Q5_0, DType::Q5_0, {0}},
    {Fmt::Q5_1, DType::Q5_1, {0, 2}},  {Fmt::Q2_K, DType::Q2_K, {80, 82}}, {Fmt::Q3_K, DType::Q3_K, {108}},
    {Fmt::Q5_K, DType::Q5_K, {0, 2}},
};

struct Mat {
  std::vector<uint8_t> data, scales;
  std::vector<float> block_scale;
  kernels::WeightMatrix w;
};

inline Mat random_matrix(Fmt f, int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  auto byte = [&] { return static_cast<uint8_t>(rng() & 0xff); };
  Mat m;
  kernels::WeightMatrix& w = m.w;
  w.out = out;
  w.in = in;
  const size_t n = static_cast<size_t>(out * in);
  switch (f) {
    case Fmt::F32: {
      w.dtype = DType::F32;
      m.data.resize(4 * n);
      for (size_t i = 0; i < n; ++i) {
        float v = nd(rng);
        std::memcpy(&m.data[4 * i], &v, 4);
      }
      break;
    }
    case Fmt::BF16:
    case Fmt::F16:
      w.dtype = f == Fmt::BF16 ? DType::BF16 : DType::F16;
      m.data.resize(2 * n);
      for (size_t i = 0; i < n; ++i) put_u16(&m.data[2 * i], f == Fmt::BF16 ? f32_to_bf16_round(nd(rng)) : to_f16(nd(rng)));
      break;
    case Fmt::F8:
    case Fmt::F8Odd: {
      w.dtype = DType::F8_E4M3;
      m.data.resize(n);
      for (auto& b : m.data) {
        b = byte();
        if ((b & 0x7f) == 0x7f) b = 0x3f;  // no NaN encodings
      }
      w.block_out = f == Fmt::F8 ? 16 : 7;
      w.block_in = f == Fmt::F8 ? 128 : 100;  // 100: scale blocks straddle 16-lane vectors
      const int64_t rows = (out + w.block_out - 1) / w.block_out, cols = (in + w.block_in - 1) / w.block_in;
      m.block_scale.resize(static_cast<size_t>(rows * cols));
      for (auto& s : m.block_scale) s = std::ldexp(ud(rng), -8);
      w.block_scale = m.block_scale.data();
      break;
    }
    case Fmt::I8: {
      w.dtype = DType::I8;
      m.data.resize(n);
      for (auto& b : m.data) b = byte();
      m.scales.resize(4 * static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o) {
        float s = ud(rng) * 0.01f;
        std::memcpy(&m.scales[4 * o], &s, 4);
      }
      w.scales = m.scales.data();
      w.scale_dtype = DType::F32;
      w.scale_group = in;
      break;
    }
    case Fmt::I4:
    case Fmt::I4G128: {
      const size_t group = f == Fmt::I4 ? 32 : 128;
      w.dtype = DType::I32;
      w.packing = kernels::Packing::Int4x8;
      m.data.resize(n / 2);
      for (auto& b : m.data) b = byte();
      m.scales.resize(2 * n / group);
      for (size_t g = 0; g < n / group; ++g) put_u16(&m.scales[2 * g], f32_to_bf16_round(ud(rng) * 0.01f));
      w.scales = m.scales.data();
      w.scale_dtype = DType::BF16;
      w.scale_group = static_cast<int64_t>(group);
      break;
    }
    case Fmt::Mxfp4Split: {
      w.dtype = DType::U8;
      w.packing = kernels::Packing::Mxfp4Split;
      m.data.resize(n / 2);
      for (auto& b : m.data) b = byte();
      m.scales.resize(n / 32);
      for (auto& s : m.scales) s = static_cast<uint8_t>(118 + rng() % 16);
      w.scales = m.scales.data();
      w.scale_dtype = DType::F8_E8M0;
      w.scale_group = 32;
      break;
    }
    case Fmt::Q8_0:
    case Fmt::Mxfp4: {
      const bool q8 = f == Fmt::Q8_0;
      w.dtype = q8 ? DType::Q8_0 : DType::MXFP4;
      const size_t bb = q8 ? 34 : 17;
      m.data.resize(n / 32 * bb);
      for (auto& b : m.data) b = byte();
      for (size_t b = 0; b < n / 32; ++b) {
        if (q8)
          put_u16(&m.data[b * bb], to_f16(ud(rng) * 0.01f));
        else
          m.data[b * bb] = static_cast<uint8_t>(118 + rng() % 16);
      }
      break;
    }
    case Fmt::Q4_K:
    case Fmt::Q6_K: {
      const bool k4 = f == Fmt::Q4_K;
      w.dtype = k4 ? DType::Q4_K : DType::Q6_K;
      const size_t bb = k4 ? 144 : 210;
      m.data.resize(n / 256 * bb);
      for (auto& b : m.data) b = byte();
      for (size_t b = 0; b < n / 256; ++b) {
        if (k4) {
          put_u16(&m.data[b * bb], to_f16(ud(rng) * 0.001f));
          put_u16(&m.data[b * bb + 2], to_f16(ud(rng) * 0.001f));
        } else {
          put_u16(&m.data[b * bb + 208], to_f16(ud(rng) * 0.001f));
        }
      }
      break;
    }
    case Fmt::Q4_0:
    case Fmt::Q4_1:
    case Fmt::Q5_0:
    case Fmt::Q5_1:
    case Fmt::Q2_K:
    case Fmt::Q3_K:
    case Fmt::Q5_K: {
      const GgufBlockCase* c = nullptr;
      for (const auto& k : kGgufBlockCases)
        if (k.fmt == f) c = &k;
      w.dtype = c->dtype;
      const size_t be = dtype_block_elems(w.dtype), bb = dtype_block_bytes(w.dtype);
      m.data.resize(n / be * bb);
      for (auto& b : m.data) b = byte();
      // Scales of either sign (ggml's Q4_0 / Q5_0 quantizers write d < 0).
      for (size_t b = 0; b < n / be; ++b)
        for (size_t off : c->f16_fields)
          put_u16(&m.data[b * bb + off], to_f16((rng() & 1 ? -0.001f : 0.001f) * ud(rng)));
      break;
    }
  }
  w.data = m.data.data();
  return m;
}

}  // namespace strata::kernel_tests::formats
