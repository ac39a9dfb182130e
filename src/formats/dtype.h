#pragma once
// Element types that checkpoints store, and exact conversions of the narrow
// float formats to f32 (every bf16/f16/fp8 value is exactly representable).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  // Scalar types (safetensors and GGUF).
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0, I64, I32, I16, I8, U8, BOOL,
  // Block-quantized types as GGUF stores them: a block of `dtype_block_elems`
  // values along a row takes `dtype_block_bytes` bytes.
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, MXFP4,
};

const char* dtype_name(DType t);
// Bytes per element of a scalar type; 0 for block types.
size_t dtype_size(DType t);
// Elements per block (1 for scalar types) and bytes per block.
size_t dtype_block_elems(DType t);
size_t dtype_block_bytes(DType t);
bool dtype_is_block(DType t);
// Bytes of a row of n elements; nullopt if n is not a whole number of blocks.
std::optional<size_t> dtype_row_bytes(DType t, uint64_t n);
// Safetensors spells types "F32", "BF16", "F8_E4M3", ...; nullopt if unknown.
std::optional<DType> dtype_from_safetensors(std::string_view name);

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return std::bit_cast<float>(sign);
    // Subnormal: value = man * 2^-24, exact in f32.
    float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

// OCP FP8 E4M3 ("fn" variant: no infinities, 0x7f/0xff are NaN), bias 7.
inline float fp8_e4m3_to_f32(uint8_t b) {
  uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t man = b & 0x7u;
  if (exp == 0xf && man == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exp == 0) {
    float v = static_cast<float>(man) * 0x1p-9f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (man << 20));
}

// Round to nearest even, in software (for compilers without _Float16).
uint16_t f32_to_f16_round(float f);

inline uint16_t f32_to_bf16_round(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace strata
