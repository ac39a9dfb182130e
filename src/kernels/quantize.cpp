#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "formats/dtype.h"
#include "util/error.h"

namespace strata::kernels {

namespace {

#if defined(__FLT16_MAX__)
uint16_t f32_to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
#else
// clang before 15 has no _Float16 on x86 (the fuzz build): the same rounding.
uint16_t f32_to_f16(float f) { return f32_to_f16_round(f); }
#endif

float amax_of(const float* x, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// E2M1 values ×2, as the MXFP4 decoder's table (ggml kvalues_mxfp4).
constexpr int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The code whose value (× the halved block scale) is nearest to x; the first
// such code on a tie, compared as ggml's best_index_mxfp4 does.
uint8_t nearest_e2m1(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(kE2M1x2[0] * d - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float err = std::fabs(kE2M1x2[i] * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void quantize_row_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    const float d = amax_of(x, 32) / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t h = f32_to_f16(d);
    std::memcpy(out, &h, 2);
    for (int i = 0; i < 32; ++i) out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[i] * id)));
  }
}

void quantize_row_mxfp4(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 17) {
    const float amax = amax_of(x, 32);
    // Shared exponent: the largest value lands near the top of E2M1's range (6).
    const int e = amax > 0 ? static_cast<int>(std::floor(std::log2(amax))) - 2 + 127 : 0;
    const uint8_t eb = static_cast<uint8_t>(std::clamp(e, 0, 254));
    // Half the scale, because the table is doubled (same as the decoder).
    const float d = eb < 2 ? std::ldexp(1.0f, -128 + eb) : std::ldexp(1.0f, eb - 128);
    out[0] = eb;
    for (int j = 0; j < 16; ++j)
      out[1 + j] = static_cast<uint8_t>(nearest_e2m1(x[j], d) | nearest_e2m1(x[j + 16], d) << 4);
  }
}

void quantize_row_int8(const float* x, int64_t n, int8_t* out, float* scale) {
  const float d = amax_of(x, n) / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  *scale = d;
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(std::lround(x[i] * id));
}

void quantize_row_int4(const float* x, int64_t n, uint32_t* packed, uint16_t* bf16_scales) {
  for (int64_t g = 0; g < n / 32; ++g) {
    const uint16_t sb = f32_to_bf16_round(amax_of(x + g * 32, 32) / 7.0f);
    bf16_scales[g] = sb;
    const float d = bf16_to_f32(sb);  // quantize against the scale the decoder will use
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) {
        const long q = std::clamp(std::lround(x[g * 32 + w * 8 + j] * id), -8L, 7L);
        word |= static_cast<uint32_t>(q + 8) << (4 * j);
      }
      packed[g * 4 + w] = word;
    }
  }
}

std::unique_ptr<OwnedMatrix> quantize_matrix(const WeightMatrix& w, QuantTarget target) {
  if (target != QuantTarget::Int8Row && w.in % 32 != 0)
    throw Error("cannot quantize a matrix with " + std::to_string(w.in) + " columns to blocks of 32");
  auto m = std::make_unique<OwnedMatrix>();
  WeightMatrix& q = m->matrix;
  q.out = w.out;
  q.in = w.in;
  const size_t rows = static_cast<size_t>(w.out), n = static_cast<size_t>(w.in);
  std::vector<float> row(n);
  switch (target) {
    case QuantTarget::Int8Row: q.dtype = DType::I8; break;
    case QuantTarget::Q8_0: q.dtype = DType::Q8_0; break;
    case QuantTarget::Int4: q.dtype = DType::I32; q.packing = Packing::Int4x8; break;
    case QuantTarget::Mxfp4: q.dtype = DType::MXFP4; break;
  }
  const size_t row_bytes = target == QuantTarget::Int4 ? n / 2 : q.row_bytes();
  m->data.resize(rows * row_bytes);
  if (target == QuantTarget::Int8Row) m->scales.resize(rows * sizeof(float));
  if (target == QuantTarget::Int4) m->scales.resize(rows * (n / 32) * sizeof(uint16_t));
  for (size_t r = 0; r < rows; ++r) {
    dequantize_row(w, static_cast<int64_t>(r), row.data());
    uint8_t* dst = &m->data[r * row_bytes];
    switch (target) {
      case QuantTarget::Int8Row:
        quantize_row_int8(row.data(), w.in, reinterpret_cast<int8_t*>(dst),
                          reinterpret_cast<float*>(&m->scales[r * sizeof(float)]));
        break;
      case QuantTarget::Q8_0: quantize_row_q8_0(row.data(), w.in, dst); break;
      case QuantTarget::Mxfp4: quantize_row_mxfp4(row.data(), w.in, dst); break;
      case QuantTarget::Int4:
        quantize_row_int4(row.data(), w.in, reinterpret_cast<uint32_t*>(dst),
                          reinterpret_cast<uint16_t*>(&m->scales[r * (n / 32) * sizeof(uint16_t)]));
        break;
    }
  }
  q.data = m->data.data();
  if (target == QuantTarget::Int8Row) {
    q.scales = m->scales.data();
    q.scale_dtype = DType::F32;
    q.scale_group = w.in;
  } else if (target == QuantTarget::Int4) {
    q.scales = m->scales.data();
    q.scale_dtype = DType::BF16;
    q.scale_group = 32;
  }
  if (w.bias) {
    m->bias.assign(w.bias, w.bias + w.out);
    q.bias = m->bias.data();
  }
  check_supported(q);
  return m;
}

}  // namespace strata::kernels
