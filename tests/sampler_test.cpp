// The sampling module (CLI and server): each filter does what its definition
// says (Hugging Face's logits processors, OpenAI's penalties), and a seed
// fixes the output.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/sampler.h"
#include "util/error.h"

namespace strata {
namespace {

// Draw frequencies over many single-step samplers with different seeds.
std::vector<double> frequencies(const SamplingParams& base, const std::vector<float>& logits, int draws = 60000) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) {
    SamplingParams p = base;
    p.seed = static_cast<uint64_t>(i) * 7919 + 1;
    Sampler s(p);
    f[s.next(logits)] += 1.0 / draws;
  }
  return f;
}

const std::vector<float> kLogits = {0.0f, std::log(2.0f), std::log(4.0f)};  // p = 1/7, 2/7, 4/7

TEST(Sampler, GreedyAndTopK1PickTheLargestLowestIdOnTies) {
  Sampler greedy({});
  EXPECT_EQ(greedy.next(std::vector<float>{1, 3, 3, 2}), 1);
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler k1(p);
  EXPECT_EQ(k1.next(kLogits), 2);
}

TEST(Sampler, TemperatureOneDrawsFromTheSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  const auto f = frequencies(p, kLogits);
  EXPECT_NEAR(f[0], 1.0 / 7, 0.01);
  EXPECT_NEAR(f[1], 2.0 / 7, 0.01);
  EXPECT_NEAR(f[2], 4.0 / 7, 0.01);
  // Temperature 2 flattens: p ∝ 1, √2, 2.
  p.temperature = 2.0f;
  const auto g = frequencies(p, kLogits);
  const double z = 1 + std::sqrt(2.0) + 2;
  EXPECT_NEAR(g[0], 1 / z, 0.01);
  EXPECT_NEAR(g[2], 2 / z, 0.01);
}

TEST(Sampler, TopKTopPAndMinPKeepWhatTheirDefinitionsKeep) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;  // tokens 1 and 2, renormalised: 1/3, 2/3
  auto f = frequencies(p, kLogits);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 1.0 / 3, 0.01);
  p.top_k = 0;
  p.top_p = 0.5f;  // 4/7 alone reaches 0.5
  f = frequencies(p, kLogits, 2000);
  EXPECT_EQ(f[0] + f[1], 0.0);
  p.top_p = 0.6f;  // needs the top two (4/7 < 0.6 <= 6/7)
  f = frequencies(p, kLogits);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 1.0 / 3, 0.01);
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // floor 0.3 · 4/7 ≈ 0.171 drops 1/7
  f = frequencies(p, kLogits);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[2], 2.0 / 3, 0.01);
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  s.set_prompt(std::vector<int32_t>{0, 1});
  const std::vector<float> l = {4.0f, -1.0f, 3.0f, 2.9f};
  // Prompt tokens: 4 / 2 = 2 and -1 · 2 = -2; no output yet.
  EXPECT_EQ(s.penalized(l), (std::vector<float>{2.0f, -2.0f, 3.0f, 2.9f}));
  EXPECT_EQ(s.next(l), 2);  // greedy on the penalised row
  // Token 2 is now output once: 3 / 2 (repetition) - 0.5 - 0.25.
  EXPECT_EQ(s.penalized(l), (std::vector<float>{2.0f, -2.0f, 0.75f, 2.9f}));
  EXPECT_EQ(s.next(l), 3);
}

TEST(Sampler, TheSameSeedGivesTheSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 1234;
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i));
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 30; ++i) {
    ta.push_back(a.next(l));
    tb.push_back(b.next(l));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 1235;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 30; ++i) tc.push_back(c.next(l));
  EXPECT_NE(ta, tc);
}

TEST(Sampler, OutOfRangeParametersAreErrors) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(validate(p), Error);
  p = {};
  p.temperature = -1.0f;
  EXPECT_THROW(validate(p), Error);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(validate(p), Error);
  p = {};
  p.presence_penalty = 3.0f;
  EXPECT_THROW(validate(p), Error);
  EXPECT_NO_THROW(validate(SamplingParams{}));
}

}  // namespace
}  // namespace strata
