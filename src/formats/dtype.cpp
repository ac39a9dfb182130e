#include "formats/dtype.h"

#include <array>
#include <bit>
#include <string_view>
#include <utility>

namespace strata {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t block_elems;
  size_t block_bytes;
  bool in_safetensors;
};
// Block sizes follow ggml's type traits (ggml-common.h): e.g. Q8_0 is an f16
// scale + 32 int8; Q4_K is a 256-value super-block of 144 bytes; MXFP4 is an
// E8M0 scale byte + 16 bytes of packed E2M1 nibbles.
constexpr std::array<DTypeInfo, 26> kTypes{{
    {DType::F64, "F64", 1, 8, true},       {DType::F32, "F32", 1, 4, true},
    {DType::F16, "F16", 1, 2, true},       {DType::BF16, "BF16", 1, 2, true},
    {DType::F8_E4M3, "F8_E4M3", 1, 1, true}, {DType::F8_E5M2, "F8_E5M2", 1, 1, true},
    {DType::F8_E8M0, "F8_E8M0", 1, 1, true}, {DType::I64, "I64", 1, 8, true},
    {DType::I32, "I32", 1, 4, true},       {DType::I16, "I16", 1, 2, true},
    {DType::I8, "I8", 1, 1, true},         {DType::U8, "U8", 1, 1, true},
    {DType::BOOL, "BOOL", 1, 1, true},     {DType::Q4_0, "Q4_0", 32, 18, false},
    {DType::Q4_1, "Q4_1", 32, 20, false},  {DType::Q5_0, "Q5_0", 32, 22, false},
    {DType::Q5_1, "Q5_1", 32, 24, false},  {DType::Q8_0, "Q8_0", 32, 34, false},
    {DType::Q8_1, "Q8_1", 32, 36, false},  {DType::Q2_K, "Q2_K", 256, 84, false},
    {DType::Q3_K, "Q3_K", 256, 110, false}, {DType::Q4_K, "Q4_K", 256, 144, false},
    {DType::Q5_K, "Q5_K", 256, 176, false}, {DType::Q6_K, "Q6_K", 256, 210, false},
    {DType::Q8_K, "Q8_K", 256, 292, false}, {DType::MXFP4, "MXFP4", 32, 17, false},
}};

const DTypeInfo* info(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return &i;
  return nullptr;
}
}  // namespace

const char* dtype_name(DType t) {
  const DTypeInfo* i = info(t);
  return i ? i->name.data() : "?";
}

size_t dtype_size(DType t) {
  const DTypeInfo* i = info(t);
  return i && i->block_elems == 1 ? i->block_bytes : 0;
}

size_t dtype_block_elems(DType t) {
  const DTypeInfo* i = info(t);
  return i ? i->block_elems : 0;
}

size_t dtype_block_bytes(DType t) {
  const DTypeInfo* i = info(t);
  return i ? i->block_bytes : 0;
}

bool dtype_is_block(DType t) { return dtype_block_elems(t) > 1; }

std::optional<size_t> dtype_row_bytes(DType t, uint64_t n) {
  const DTypeInfo* i = info(t);
  if (!i || n % i->block_elems != 0) return std::nullopt;
  return static_cast<size_t>(n / i->block_elems * i->block_bytes);
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& i : kTypes)
    if (i.in_safetensors && i.name == name) return i.type;
  return std::nullopt;
}

uint16_t f32_to_f16_round(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t e8 = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (e8 == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  const int32_t exp = static_cast<int32_t>(e8) - 127 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t half = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // a carry into the exponent is correct rounding
  return static_cast<uint16_t>(h);
}

}  // namespace strata
