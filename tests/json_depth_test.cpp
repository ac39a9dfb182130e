// util/json_depth.h: brackets are counted outside strings only, escapes
// included, and the scan stops once past the caller's limit.
#include <gtest/gtest.h>

#include "util/json_depth.h"

namespace strata {
namespace {

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("3"), 0u);
  EXPECT_EQ(json_nesting_depth("{}"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"(["[[[", "\"[[", "\\", [] ])"), 2u);
  EXPECT_EQ(json_nesting_depth("[[[[[[", 3), 4u);  // stops once past the limit
}

}  // namespace
}  // namespace strata
