#pragma once
// Small pieces of error-message text shared by the checkpoint readers.
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// "[a,b,c]". Appends rather than operator+ chains: GCC 12 warns falsely
// (-Wrestrict) on those.
inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

// "[begin,end)".
inline std::string range_str(uint64_t begin, uint64_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ',';
  s += std::to_string(end);
  s += ')';
  return s;
}

}  // namespace strata
