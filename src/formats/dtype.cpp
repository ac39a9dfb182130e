#include "formats/dtype.h"

#include <array>
#include <string_view>
#include <utility>

namespace strata {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 13> kTypes{{
    {DType::F64, "F64", 8},     {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1}, {DType::I64, "I64", 8},     {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},     {DType::I8, "I8", 1},           {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
}};
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i.name.data();
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i.size;
  return 0;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& i : kTypes)
    if (i.name == name) return i.type;
  return std::nullopt;
}

}  // namespace strata
