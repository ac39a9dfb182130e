#pragma once
// How much of the calling thread's stack is left, for code that recurses on
// its input (a template's macros calling each other) and must stop with an
// error before the stack overflows. A fixed depth limit cannot promise that
// by itself: frame sizes change with the build (sanitizers make them several
// times larger) and threads have stacks of different sizes.
#include <cstddef>
#include <cstdint>

namespace strata {

class StackRoom {
 public:
  // Finds the calling thread's stack; use the object on that thread only.
  StackRoom();
  // Bytes between the caller's frame and the end of the stack; SIZE_MAX
  // where the stack's bounds cannot be read.
  std::size_t left() const;

 private:
  std::uintptr_t low_ = 0;  // the stack's lowest address (it grows down)
};

}  // namespace strata
