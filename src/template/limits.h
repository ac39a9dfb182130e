#pragma once
// Bounds on one render, so that no template (truncated, hostile, or just
// quadratic in a long conversation) can hang or exhaust the process.
#include <cstddef>
#include <cstdint>

namespace strata::tmpl {

struct RenderLimits {
  int64_t max_steps = 10'000'000;      // loop iterations + macro calls
  int max_call_depth = 200;            // nested macro calls (recursion)
  std::size_t max_string = 64u << 20;  // longest string / list a template may build
  std::size_t max_output = 256u << 20; // rendered text, bytes
};

}  // namespace strata::tmpl
