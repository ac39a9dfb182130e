#pragma once
// Bounds on one render, so that no template (truncated, hostile, or just
// quadratic in a long conversation) can hang or exhaust the process.
#include <cstddef>
#include <cstdint>

namespace strata::tmpl {

struct RenderLimits {
  int64_t max_steps = 10'000'000;      // loop iterations + macro calls
  int max_call_depth = 200;            // nested macro calls (recursion)
  // Statements and expressions being evaluated at once, through macro calls
  // and recursive loops: what bounds the C++ stack a render takes (the
  // parser bounds one template's own nesting, but recursion multiplies it).
  // A render also stops while min_stack_left bytes of the thread's stack
  // remain, whatever the nesting (frames are larger in sanitizer builds).
  int max_nesting = 2000;
  std::size_t min_stack_left = 512u << 10;
  std::size_t max_string = 64u << 20;  // longest string / list a template may build
  std::size_t max_output = 256u << 20; // rendered text, bytes
};

}  // namespace strata::tmpl
