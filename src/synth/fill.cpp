#include "synth/fill.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace strata::synth {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256**: every output bit is usable (codes are taken from all bits).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& v : s_) v = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t r = std::rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return r;
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }  // [0, 1)

 private:
  uint64_t s_[4];
};

// Acklam's rational approximation of the standard normal quantile function
// (relative error < 1.2e-9).
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425, hi = 1 - lo;
  if (p < lo) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > hi) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

constexpr int kTableBits = 12;
constexpr int kTable = 1 << kTableBits;

// The 4096 quantiles of N(0, 1), rescaled to unit variance exactly.
const std::array<float, kTable>& unit_normal() {
  static const std::array<float, kTable> t = [] {
    std::array<float, kTable> v{};
    double ss = 0;
    for (int i = 0; i < kTable; ++i) {
      const double x = normal_quantile((i + 0.5) / kTable);
      v[i] = static_cast<float>(x);
      ss += x * x;
    }
    const double k = 1.0 / std::sqrt(ss / kTable);
    for (float& x : v) x = static_cast<float>(x * k);
    return v;
  }();
  return t;
}

// RMSNorm weights: 1 ± 5%, evenly spread.
const std::array<float, kTable>& norm_weights() {
  static const std::array<float, kTable> t = [] {
    std::array<float, kTable> v{};
    for (int i = 0; i < kTable; ++i) v[i] = 1.0f + 0.1f * ((i + 0.5f) / kTable - 0.5f);
    return v;
  }();
  return t;
}

// FP8 E4M3 codes: 256 quantiles of N(0, 64²), each the nearest finite E4M3.
struct Fp8Table {
  std::array<uint8_t, 256> code{};
};
const Fp8Table& fp8_normal() {
  static const Fp8Table t = [] {
    Fp8Table r;
    for (int i = 0; i < 256; ++i) {
      const float x = static_cast<float>(64.0 * normal_quantile((i + 0.5) / 256));
      int best = 0;
      float best_err = INFINITY;
      for (int c = 0; c < 256; ++c) {
        const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
        if (std::isnan(v)) continue;
        const float err = std::fabs(v - x);
        if (err < best_err) {
          best_err = err;
          best = c;
        }
      }
      r.code[i] = static_cast<uint8_t>(best);
    }
    return r;
  }();
  return t;
}

// Root mean square of the E2M1 values over uniformly random 4-bit codes:
// HF MXFP4 (0, .5, 1, 1.5, 2, 3, 4, 6) and ggml's doubled kvalues.
const float kFp4Rms = std::sqrt((0 + 0.25f + 1 + 2.25f + 4 + 9 + 16 + 36) / 8.0f);

// E8M0 exponent bytes (bias `bias`) for values of rms `unit_rms` × 2^(e − bias)
// to have std `sigma`: the floor or the ceiling of the exact exponent, at
// random in the proportion that makes blocks average out to the target.
class E8m0 {
 public:
  E8m0(float sigma, float unit_rms, int bias) {
    const double x = bias + std::log2(std::max(sigma, 1e-30f) / unit_rms);
    const double f = std::floor(x);
    lo_ = static_cast<uint8_t>(std::clamp(f, 1.0, 254.0));
    hi_ = static_cast<uint8_t>(std::clamp(f + 1, 1.0, 254.0));
    threshold_ = static_cast<uint64_t>((x - f) * 0x1p32);
  }
  uint8_t pick(uint64_t r) const { return (r >> 32) < threshold_ ? hi_ : lo_; }
  // From 8 random bits (the proportion then has 1/256 resolution).
  uint8_t pick8(uint8_t r) const { return (uint64_t(r) << 24) < threshold_ ? hi_ : lo_; }

 private:
  uint8_t lo_ = 127, hi_ = 127;
  uint64_t threshold_ = 0;
};

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

template <class T, class Conv>
void fill_table(const std::array<float, kTable>& base, float scale, Conv conv, Rng& rng, uint8_t* dst, size_t count) {
  std::array<T, kTable> table;
  for (int i = 0; i < kTable; ++i) table[i] = conv(base[i] * scale);
  T* out = reinterpret_cast<T*>(dst);
  size_t i = 0;
  // Five 12-bit indices per 64-bit draw.
  while (i + 5 <= count) {
    uint64_t r = rng.next();
    for (int k = 0; k < 5; ++k, r >>= kTableBits) {
      T v = table[r & (kTable - 1)];
      std::memcpy(out + i + k, &v, sizeof(T));
    }
    i += 5;
  }
  uint64_t r = rng.next();
  for (; i < count; ++i, r >>= kTableBits) {
    T v = table[r & (kTable - 1)];
    std::memcpy(out + i, &v, sizeof(T));
  }
}

void random_bytes(Rng& rng, uint8_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(dst + i, &r, 8);
  }
  if (i < n) {
    const uint64_t r = rng.next();
    std::memcpy(dst + i, &r, n - i);
  }
}

void table_bytes(const std::array<uint8_t, 256>& table, Rng& rng, uint8_t* dst, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint64_t r = rng.next();
    for (int k = 0; k < 8 && i < n; ++k, ++i, r >>= 8) dst[i] = table[r & 0xff];
  }
}

// Block types: random codes, per-block scales for a weight std of `sigma`.
// Q8_0 codes are uniform random bytes (std of a uniform int8: 73.9): cheap,
// and any int8 is a valid code.
void fill_q8_0(float sigma, Rng& rng, uint8_t* dst, size_t blocks) {
  // 16 block scales spread ±10% around sigma / 73.9, picked by 4 random bits.
  uint16_t d[16];
  for (int i = 0; i < 16; ++i) d[i] = f32_to_f16_round(sigma / 73.9f * (0.9f + 0.2f * (i + 0.5f) / 16));
  for (size_t b = 0; b < blocks; ++b, dst += 34) {
    uint64_t r[4];
    for (auto& x : r) x = rng.next();
    put_u16(dst, d[r[0] >> 60]);
    std::memcpy(dst + 2, r, 32);
  }
}

// Q4_K: y = d·sc·q − dmin·m, q uniform in 0..15. With dmin = 7.5·d and
// m = sc every sub-block is zero-mean: y = d·sc·(q − 7.5).
void fill_q4_k(float sigma, Rng& rng, uint8_t* dst, size_t blocks) {
  constexpr int lo = 32, hi = 63;
  double msq = 0;
  for (int s = lo; s <= hi; ++s) msq += double(s) * s;
  msq /= (hi - lo + 1);
  const float code_std = std::sqrt(255.0f / 12.0f);  // of q − 7.5
  const float d = sigma / (code_std * static_cast<float>(std::sqrt(msq)));
  const uint16_t d16 = f32_to_f16_round(d), dmin16 = f32_to_f16_round(7.5f * f16_to_f32(d16));
  for (size_t b = 0; b < blocks; ++b, dst += 144) {
    put_u16(dst, d16);
    put_u16(dst + 2, dmin16);
    uint8_t sc[8];
    uint64_t r = rng.next();
    for (int j = 0; j < 8; ++j, r >>= 8) sc[j] = static_cast<uint8_t>(lo + (r & 0xff) % (hi - lo + 1));
    uint8_t* q = dst + 4;  // 12 bytes of 6-bit scales and mins (ggml's get_scale_min_k4, inverted)
    for (int j = 0; j < 4; ++j) {
      q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
      q[j + 4] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));  // mins equal the scales
      q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xf) | ((sc[j + 4] & 0xf) << 4));
    }
    random_bytes(rng, dst + 16, 128);
  }
}

// Q6_K: y = d·sc·(q − 32), q uniform in 0..63, sc in 16..63.
void fill_q6_k(float sigma, Rng& rng, uint8_t* dst, size_t blocks) {
  constexpr int lo = 16, hi = 63;
  double msq = 0;
  for (int s = lo; s <= hi; ++s) msq += double(s) * s;
  msq /= (hi - lo + 1);
  const float code_std = std::sqrt((64.0f * 64.0f - 1) / 12.0f);
  const uint16_t d16 = f32_to_f16_round(sigma / (code_std * static_cast<float>(std::sqrt(msq))));
  for (size_t b = 0; b < blocks; ++b, dst += 210) {
    random_bytes(rng, dst, 192);  // ql[128], qh[64]
    for (int j = 0; j < 16; j += 8) {
      uint64_t r = rng.next();
      for (int k = 0; k < 8; ++k, r >>= 8) dst[192 + j + k] = static_cast<uint8_t>(lo + (r & 0xff) % (hi - lo + 1));
    }
    put_u16(dst + 208, d16);
  }
}

// ggml MXFP4: y = kvalues[q] · 2^(e − 128), kvalues the doubled E2M1 values.
void fill_mxfp4(float sigma, Rng& rng, uint8_t* dst, size_t blocks) {
  const E8m0 e(sigma, 2 * kFp4Rms, 128);
  uint64_t pick = 0;
  for (size_t b = 0; b < blocks; ++b, dst += 17) {
    if (b % 8 == 0) pick = rng.next();  // eight blocks' exponents from one draw
    const uint64_t r0 = rng.next(), r1 = rng.next();
    dst[0] = e.pick8(static_cast<uint8_t>(pick >> (8 * (b % 8))));
    std::memcpy(dst + 1, &r0, 8);
    std::memcpy(dst + 9, &r1, 8);
  }
}

}  // namespace


uint64_t unit_bytes(DType t) { return dtype_is_block(t) ? dtype_block_bytes(t) : dtype_size(t); }

uint64_t tensor_seed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  uint64_t x = seed ^ h;
  return splitmix64(x);
}

void fill_chunk(const TensorSpec& t, uint64_t tseed, uint64_t chunk, uint8_t* dst, size_t n) {
  uint64_t x = tseed + chunk * 0x9e3779b97f4a7c15ull;
  Rng rng(splitmix64(x));
  const uint64_t unit = unit_bytes(t.dtype);
  if (unit == 0 || n % unit != 0) throw Error("internal: chunk of " + t.name + " is not whole units");
  const size_t count = n / unit;
  const float sigma = t.scale;

  switch (t.fill) {
    case Fill::Gaussian:
    case Fill::NormWeight: {
      const auto& base = t.fill == Fill::NormWeight ? norm_weights() : unit_normal();
      const float scale = t.fill == Fill::NormWeight ? 1.0f : sigma;
      switch (t.dtype) {
        case DType::F32:
          fill_table<float>(
              base, scale, [](float v) { return v; }, rng, dst, count);
          return;
        case DType::BF16: fill_table<uint16_t>(base, scale, f32_to_bf16_round, rng, dst, count); return;
        case DType::F16: fill_table<uint16_t>(base, scale, f32_to_f16_round, rng, dst, count); return;
        case DType::Q8_0: fill_q8_0(sigma, rng, dst, count); return;
        case DType::Q4_K: fill_q4_k(sigma, rng, dst, count); return;
        case DType::Q6_K: fill_q6_k(sigma, rng, dst, count); return;
        case DType::MXFP4: fill_mxfp4(sigma, rng, dst, count); return;
        default: break;
      }
      break;
    }
    case Fill::Fp8Codes:
      if (t.dtype == DType::F8_E4M3) {
        table_bytes(fp8_normal().code, rng, dst, n);
        return;
      }
      break;
    case Fill::Fp8ScaleInv:
      if (t.dtype == DType::F32) {
        for (size_t i = 0; i < count; ++i) {
          const float v = sigma / 64.0f * (0.9f + 0.2f * rng.uniform());
          std::memcpy(dst + 4 * i, &v, 4);
        }
        return;
      }
      break;
    case Fill::Mxfp4Blocks:
      if (t.dtype == DType::U8) {
        random_bytes(rng, dst, n);
        return;
      }
      break;
    case Fill::Mxfp4Scales:
      if (t.dtype == DType::U8) {
        const E8m0 e(sigma, kFp4Rms, 127);
        for (size_t i = 0; i < n; ++i) dst[i] = e.pick(rng.next());
        return;
      }
      break;
  }
  throw Error(std::string("internal: no generator for ") + t.name + " (" + dtype_name(t.dtype) + ")");
}

}  // namespace strata::synth
