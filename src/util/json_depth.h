#pragma once
// How deeply JSON text nests, found by scanning it rather than parsing it.
// nlohmann's parser is iterative, but copying, dumping, comparing and
// rendering a parsed value recurse once per level: JSON from a client (a
// request body) is measured first and refused past a limit, so that a body
// of a million brackets is one clear error rather than a stack overflow
// somewhere downstream.
#include <cstddef>
#include <string_view>

namespace strata {

// The deepest nesting of [ and { outside strings (0 for a scalar). Text that
// is not JSON gets some number; the parser then says what is wrong with it.
// Returns as soon as the depth passes `stop_after` (the caller's limit).
std::size_t json_nesting_depth(std::string_view text, std::size_t stop_after = static_cast<std::size_t>(-1));

}  // namespace strata
