#include "formats/tensor.h"

#include "util/error.h"

namespace strata {

const TensorView& TensorSource::get(const std::string& name) const {
  if (const TensorView* t = find(name)) return *t;
  throw Error(describe() + ": missing tensor '" + name + "'");
}

}  // namespace strata
