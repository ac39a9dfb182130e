#include "util/stack_room.h"

#include <pthread.h>

namespace strata {

StackRoom::StackRoom() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* addr = nullptr;
  std::size_t size = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0) low_ = reinterpret_cast<std::uintptr_t>(addr);
  pthread_attr_destroy(&attr);
}

std::size_t StackRoom::left() const {
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  if (low_ == 0 || here < low_) return SIZE_MAX;
  return here - low_;
}

}  // namespace strata
