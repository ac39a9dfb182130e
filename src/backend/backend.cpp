#include "backend/backend.h"

#include <string>

#include "util/error.h"

namespace strata {

Tensor Tensor::slice(uint64_t from, uint64_t count) const {
  if (from > size || count > size - from)
    throw Error("internal: values [" + std::to_string(from) + ", " + std::to_string(from + count) +
                ") of a tensor of " + std::to_string(size));
  return Tensor{buffer, offset + from, count};
}

}  // namespace strata
