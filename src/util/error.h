#pragma once
// One exception type for every user-facing failure: bad files, bad configs,
// bad arguments. The CLI prints what() as a single line and exits non-zero,
// so messages must name the file (or input) and the problem.
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace strata
