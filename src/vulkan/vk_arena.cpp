#include "vulkan/vk_arena.h"

#include <algorithm>

namespace strata::vk {

Arena::Piece Arena::take(uint64_t bytes) {
  bytes = taken(bytes);
  // The next buffer that has room (those after current_ are rewound ones).
  while (current_ < buffers_.size() && top_ + bytes > buffers_[current_].bytes()) {
    ++current_;
    top_ = 0;
  }
  if (current_ == buffers_.size()) {
    buffers_.emplace_back(ctx_, std::max(bytes, chunk_), where_);
    top_ = 0;
  }
  const Buffer& b = buffers_[current_];
  Piece p{b.handle(), top_, b.address() + top_, b.mapped() ? b.mapped() + top_ : nullptr};
  top_ += bytes;
  used_ += bytes;
  return p;
}

void Arena::rewind() {
  current_ = 0;
  top_ = 0;
  used_ = 0;
}

void Arena::clear() {
  buffers_.clear();
  rewind();
}

uint64_t Arena::reserved() const {
  uint64_t n = 0;
  for (const Buffer& b : buffers_) n += b.bytes();
  return n;
}

}  // namespace strata::vk
