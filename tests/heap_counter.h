#pragma once
// Counts every heap allocation the test binary makes, on any thread
// (heap_counter.cpp replaces the global operator new): a test reads it before
// and after the code it checks.
#include <cstdint>

namespace strata::testing {

uint64_t heap_allocations();

}  // namespace strata::testing
