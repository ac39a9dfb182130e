#pragma once
// What this process holds in memory, as the kernel counts it.
#include <cstdint>

namespace strata {

// Resident anonymous memory (RssAnon in /proc/self/status): the heap, stacks
// and private buffers, not mapped files. 0 where the kernel does not say.
uint64_t resident_anonymous_bytes();

}  // namespace strata
