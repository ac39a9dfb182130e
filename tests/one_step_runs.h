#pragma once
// Batch invariance's check, shared by the tests that make it: each token a
// run generated has the logits of a one-step run on the prompt extended by
// the tokens before it (computed where that run put it: in a prompt's chunk,
// alone), bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "runtime/generator.h"
#include "same_bits.h"

namespace strata {

inline void expect_one_step_runs_give_each_tokens_logits(Model& model, const std::vector<int32_t>& prompt,
                                                         const GenerateResult& full) {
  GenerateOptions one;
  one.max_new_tokens = 1;
  one.keep_logits = true;
  ASSERT_EQ(full.logits.size(), full.tokens.size());
  for (size_t k = 0; k < full.tokens.size(); ++k) {
    std::vector<int32_t> p = prompt;
    p.insert(p.end(), full.tokens.begin(), full.tokens.begin() + static_cast<long>(k));
    const GenerateResult r = generate(model, p, one);
    SCOPED_TRACE("k = " + std::to_string(k));
    expect_same_logits({full.logits[k]}, r.logits);
  }
}

}  // namespace strata
