#pragma once
// Tokens and logits compared bit for bit (memcmp, so -0.0 against 0.0 or two
// NaN payloads count as different): what batch invariance and streaming
// promise, for the tests that check it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace strata {

inline void expect_same_logits(const std::vector<std::vector<float>>& want, const std::vector<std::vector<float>>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].size(), got[k].size()) << "token " << k;
    ASSERT_EQ(0, std::memcmp(want[k].data(), got[k].data(), want[k].size() * sizeof(float))) << "token " << k;
  }
}

inline void expect_same_bits(const std::vector<int32_t>& want_tokens, const std::vector<std::vector<float>>& want_logits,
                             const std::vector<int32_t>& got_tokens, const std::vector<std::vector<float>>& got_logits) {
  ASSERT_EQ(want_tokens, got_tokens);
  expect_same_logits(want_logits, got_logits);
}

}  // namespace strata
