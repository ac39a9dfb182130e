#pragma once
// A named tensor as a checkpoint stores it: type, shape and where its bytes
// are. Readers produce these; nothing else in strata knows file formats.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/dtype.h"

namespace strata {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into a mapped file
  size_t nbytes = 0;
  // Where the bytes are, explicitly: `data` holds exactly the `nbytes` bytes
  // at byte `offset` of `file` (empty when they are in no file). Whoever
  // reads a tensor other than through `data` (the expert streamer: O_DIRECT
  // reads into a cache slot) uses these, never the mapping.
  std::string file;
  uint64_t offset = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// A set of named tensors, from one file or many (a sharded checkpoint).
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // nullptr if absent.
  virtual const TensorView* find(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Throws strata::Error naming the checkpoint and the missing tensor.
  const TensorView& get(const std::string& name) const;
  // A short description for error messages (the directory or file).
  virtual std::string describe() const = 0;
};

}  // namespace strata
