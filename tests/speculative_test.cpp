// Speculative decoding (runtime/drafter.h, the scheduler's verification):
// whatever the drafter proposes, a sequence's tokens and logits are the bits
// it gives without one — greedy and sampled (penalties too), on every
// architecture (a recurrent Kimi K3 state rolled back included), streamed
// under a small expert cache, with a session reused afterwards — and the
// sampled tokens follow the target's distribution. Plus the n-gram drafter's
// proposals and the draft-length policy. (The MTP drafter's own tests are in
// mtp_drafter_test.cpp; it joins the drafters here on a fixture with an MTP
// layer.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "model/model.h"
#include "pack/packer.h"
#include "runtime/draft_length.h"
#include "runtime/drafter.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "fixture_models.h"
#include "same_bits.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";
const std::vector<int32_t> kPrompt = {5, 17, 3, 42, 9, 5, 17, 3};

// Proposes the reference continuation with one token wrong at a position
// that cycles from step to step (and a step with none wrong), so that every
// rejection point is verified: all kept, the first wrong, the last wrong.
class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(std::vector<int32_t> reference, int32_t vocab) : ref_(std::move(reference)), vocab_(vocab) {}
  std::string name() const override { return "oracle"; }
  std::unique_ptr<DraftStream> start(const SamplingParams&) override { return std::make_unique<Stream>(*this); }
  int steps = 0;

 private:
  struct Stream final : DraftStream {
    explicit Stream(OracleDrafter& d) : d(d) {}
    void propose(std::span<const int32_t>, uint64_t first, int max, std::vector<int32_t>& out) override {
      const int wrong = d.steps++ % (max + 1);  // == max: none wrong
      for (int j = 0; j < max && first + j < d.ref_.size(); ++j) {
        const int32_t t = d.ref_[first + j];
        out.push_back(j == wrong ? (t + 1) % d.vocab_ : t);
      }
    }
    OracleDrafter& d;
  };
  std::vector<int32_t> ref_;
  int32_t vocab_;
};

// Always proposes the same tokens.
class ConstantDrafter final : public Drafter {
 public:
  explicit ConstantDrafter(int32_t token) : token_(token) {}
  std::string name() const override { return "constant"; }
  std::unique_ptr<DraftStream> start(const SamplingParams&) override { return std::make_unique<Stream>(token_); }

 private:
  struct Stream final : DraftStream {
    explicit Stream(int32_t t) : t(t) {}
    void propose(std::span<const int32_t>, uint64_t, int max, std::vector<int32_t>& out) override {
      out.assign(static_cast<size_t>(max), t);
    }
    int32_t t;
  };
  int32_t token_;
};

std::unique_ptr<Model> load(const fs::path& dir, LoadOptions o = {}) {
  o.threads = 2;
  o.allow_long_context = true;
  if (o.heat.empty()) o.heat = "none";
  return load_model(dir, o);
}

GenerateResult run(Model& m, SamplingParams sampling, Drafter* drafter, int n = 24, int draft_max = 4,
                   const std::vector<int32_t>& prompt = kPrompt) {
  GenerateOptions g;
  g.max_new_tokens = n;
  g.keep_logits = true;
  g.sampling = std::move(sampling);
  g.drafter = drafter;
  g.draft_max = draft_max;
  g.draft_adaptive = false;  // every step drafts: every rejection point is reached
  return generate(m, prompt, g);
}

std::vector<SamplingParams> samplings() {
  SamplingParams greedy;
  SamplingParams sampled{0.9f, 1234};
  sampled.top_p = 0.95f;
  SamplingParams penalised{1.0f, 77};
  penalised.top_k = 40;
  penalised.repetition_penalty = 1.3f;
  penalised.presence_penalty = 0.5f;
  penalised.frequency_penalty = 0.25f;
  return {greedy, sampled, penalised};
}

class Speculative : public ::testing::TestWithParam<fs::path> {};

TEST_P(Speculative, OutputIsTheSameWithAnyDrafter) {
  auto m = load(GetParam());
  const int32_t vocab = static_cast<int32_t>(m->config().vocab_size);
  auto self = make_model_drafter(*m, *m);  // a draft model: the target itself
  auto ngram = make_ngram_drafter();
  // The checkpoint's own next-token-prediction layer, where it has one.
  auto mtp = m->mtp_layers().empty() ? nullptr : make_mtp_drafter(*m);
  for (const SamplingParams& sp : samplings()) {
    SCOPED_TRACE("temperature " + std::to_string(sp.temperature) + " seed " + std::to_string(sp.seed));
    const GenerateResult want = run(*m, sp, nullptr);
    ASSERT_EQ(want.tokens.size(), 24u);
    OracleDrafter oracle(want.tokens, vocab);
    std::vector<Drafter*> drafters = {&oracle, ngram.get(), self.get()};
    if (mtp) drafters.push_back(mtp.get());
    for (Drafter* d : drafters) {
      SCOPED_TRACE(d->name());
      const GenerateResult got = run(*m, sp, d);
      expect_same_bits(want.tokens, want.logits, got.tokens, got.logits);
      EXPECT_LE(got.accepted_tokens, got.drafted_tokens);
    }
    // The oracle's steps were verified: some kept, some rejected at each point.
    EXPECT_GT(oracle.steps, 3);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Speculative, ::testing::ValuesIn(fixture_model_dirs()),
                         [](const auto& info) { return info.param.filename().string(); });

// The draft length as it runs for users (adaptive: baselines, probes, the
// measured outcome turning drafting off and on, the drafters' catch-up
// windows restarting their caches, a recurrent target's rollbacks) over
// longer runs: the output is still that of no drafting, bit for bit.
TEST(SpeculativeAdaptive, LongRunsGiveTheBitsOfNoDrafting) {
  for (const char* name : {"ds_mtp", "k3_bf16"}) {
    SCOPED_TRACE(name);
    auto m = load(kModels / name);
    auto self = make_model_drafter(*m, *m);
    auto ngram = make_ngram_drafter();
    auto mtp = m->mtp_layers().empty() ? nullptr : make_mtp_drafter(*m);
    for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{0.9f, 99}}) {
      GenerateOptions g;
      g.max_new_tokens = 160;
      g.keep_logits = true;
      g.sampling = sp;
      const GenerateResult want = generate(*m, kPrompt, g);
      std::vector<Drafter*> drafters = {self.get(), ngram.get()};
      if (mtp) drafters.push_back(mtp.get());
      for (Drafter* d : drafters) {
        SCOPED_TRACE(d->name());
        g.drafter = d;
        g.draft_max = 4;
        g.draft_adaptive = true;
        const GenerateResult got = generate(*m, kPrompt, g);
        expect_same_bits(want.tokens, want.logits, got.tokens, got.logits);
      }
    }
  }
}

// A draft model far behind starts over at the last 32 tokens, at positions
// from 0: its proposal is that of a fresh stream given only those tokens.
TEST(ModelDrafterWindow, FarBehindItProposesAsAFreshStreamOfTheLastWindow) {
  auto m = load(kModels / "qwen_gqa");
  auto drafter = make_model_drafter(*m, *m);
  std::vector<int32_t> seq(kPrompt.begin(), kPrompt.end());
  for (int i = 0; seq.size() < 100; ++i) seq.push_back(3 + (i * 37) % 200);
  const SamplingParams greedy;
  auto stream = drafter->start(greedy);
  stream->prepare(std::span<const int32_t>(seq).first(kPrompt.size()));
  std::vector<int32_t> out;
  stream->propose(std::span<const int32_t>(seq).first(kPrompt.size()), 0, 3, out);
  ASSERT_EQ(out.size(), 3u);
  out.clear();
  stream->propose(seq, 0, 4, out);  // 100 - kPrompt.size() tokens behind
  const std::span<const int32_t> window = std::span<const int32_t>(seq).last(32);
  auto fresh = drafter->start(greedy);
  fresh->prepare(window);
  std::vector<int32_t> want;
  fresh->propose(window, 0, 4, want);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(out, want);
}

// The oracle under the longest draft: acceptance is counted as it happened.
TEST(SpeculativeCounts, AcceptedTokensAreTheDraftedOnesKept) {
  auto m = load(kModels / "qwen_gqa");
  const GenerateResult want = run(*m, {}, nullptr, 30);
  // Every step proposes the next 4 reference tokens, the j-th wrong in turn.
  OracleDrafter oracle(want.tokens, static_cast<int32_t>(m->config().vocab_size));
  const GenerateResult got = run(*m, {}, &oracle, 30, 4);
  ASSERT_EQ(want.tokens, got.tokens);
  ASSERT_GT(got.draft_steps, 0);
  // Wrong at j keeps j; none wrong keeps all 4.
  EXPECT_GT(got.accepted_tokens, 0);
  EXPECT_LT(got.accepted_tokens, got.drafted_tokens);
  // Fewer steps than tokens: each kept draft saved one.
  EXPECT_LT(got.draft_steps, static_cast<int64_t>(got.tokens.size()) - 1);
}

// Many seeds: the sampled text with a drafter is the text without one.
TEST(SpeculativeSeeds, EverySeedSamplesTheSameTokensWithAndWithoutDrafting) {
  auto m = load(kModels / "k3_bf16");  // a recurrent state too: rejections roll it back
  auto self = make_model_drafter(*m, *m);
  auto ngram = make_ngram_drafter(1, 3);
  int64_t rejected = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SamplingParams sp{1.0f, seed};
    sp.top_p = 0.9f;
    sp.repetition_penalty = 1.1f;  // the draft model does not apply it: it guesses wrong at times
    const GenerateResult want = run(*m, sp, nullptr, 16);
    for (Drafter* d : {ngram.get(), self.get()}) {
      const GenerateResult got = run(*m, sp, d, 16, 3);
      ASSERT_EQ(want.tokens, got.tokens) << "seed " << seed << ", " << d->name();
      rejected += got.drafted_tokens - got.accepted_tokens;
    }
  }
  EXPECT_GT(rejected, 0);
}

// Streamed from a pack with an expert cache of a quarter of the experts:
// the same bits as in RAM without drafting (ds_mtp: its MTP layer drafts
// too, its experts streamed through the same cache).
TEST(SpeculativeStreamed, QuarterCacheGivesTheBitsOfRamWithoutDrafting) {
  for (const char* name : {"qwen_gqa", "ds_mtp"}) {
    SCOPED_TRACE(name);
    const fs::path tmp = fs::temp_directory_path() / ("strata_spec_" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    PackOptions p;
    p.source = kModels / name;
    p.out = tmp / "pack";
    pack_model(p);
    auto ram = load(kModels / name);
    LoadOptions o;
    o.stream = true;
    o.cache_slots = static_cast<size_t>(std::max<int64_t>(1, ram->config().n_routed_experts / 4));
    auto streamed = load(p.out, o);
    ASSERT_TRUE(streamed->streaming());
    auto mtp = streamed->mtp_layers().empty() ? nullptr : make_mtp_drafter(*streamed);
    for (const SamplingParams& sp : samplings()) {
      const GenerateResult want = run(*ram, sp, nullptr);
      OracleDrafter oracle(want.tokens, static_cast<int32_t>(ram->config().vocab_size));
      auto ngram = make_ngram_drafter();
      std::vector<Drafter*> drafters = {&oracle, ngram.get()};
      if (mtp) drafters.push_back(mtp.get());
      for (Drafter* d : drafters) {
        SCOPED_TRACE(d->name());
        const GenerateResult got = run(*streamed, sp, d);
        expect_same_bits(want.tokens, want.logits, got.tokens, got.logits);
      }
    }
    fs::remove_all(tmp);
  }
}

// One turn of a chat kept in `session`, drafting with `d` (null: none).
GenerateResult turn(Model& m, Drafter* d, Session& session, const std::vector<int32_t>& prompt) {
  GenerateOptions g;
  g.max_new_tokens = 12;
  g.keep_logits = true;
  g.sampling = {0.8f, 5};
  g.drafter = d;
  g.draft_max = 4;
  g.draft_adaptive = false;
  return generate(m, prompt, g, session);
}

// A session kept by a drafted run (Kimi K3: its recurrent state was rolled
// back within the run) serves the next prompt as one kept without drafting.
TEST(SpeculativeSession, ARecurrentModelsSessionIsReusedAsWithoutDrafting) {
  auto m = load(kModels / "k3_bf16");
  const int32_t vocab = static_cast<int32_t>(m->config().vocab_size);
  Session plain, drafted;
  const GenerateResult a = turn(*m, nullptr, plain, kPrompt);
  OracleDrafter oracle(a.tokens, vocab);
  const GenerateResult b = turn(*m, &oracle, drafted, kPrompt);
  expect_same_bits(a.tokens, a.logits, b.tokens, b.logits);
  EXPECT_EQ(plain.tokens, drafted.tokens);
  // The next turn repeats the prompt and departs: reuse from the prompt's end.
  std::vector<int32_t> next = kPrompt;
  next.insert(next.end(), {7, 8, 9});
  const GenerateResult c = turn(*m, nullptr, plain, next);
  OracleDrafter oracle2(c.tokens, vocab);
  const GenerateResult d = turn(*m, &oracle2, drafted, next);
  expect_same_bits(c.tokens, c.logits, d.tokens, d.logits);
  EXPECT_EQ(c.reused_tokens, d.reused_tokens);
  EXPECT_GT(d.reused_tokens, 0);
}

// The MTP drafter on a reused session: the target computes no hidden states
// for the reused prefix, so the MTP cache starts over after it (runtime/
// mtp_drafter.cpp); it drafts on, and the output is that of no drafting.
TEST(SpeculativeSession, AnMtpDraftersSessionIsReusedAsWithoutDrafting) {
  auto m = load(kModels / "ds_mtp");
  auto mtp = make_mtp_drafter(*m);
  Session plain, drafted;
  const GenerateResult a = turn(*m, nullptr, plain, kPrompt), b = turn(*m, mtp.get(), drafted, kPrompt);
  expect_same_bits(a.tokens, a.logits, b.tokens, b.logits);
  std::vector<int32_t> next = plain.tokens;
  next.insert(next.end(), {7, 8, 9});
  const GenerateResult c = turn(*m, nullptr, plain, next), d = turn(*m, mtp.get(), drafted, next);
  expect_same_bits(c.tokens, c.logits, d.tokens, d.logits);
  EXPECT_EQ(c.reused_tokens, d.reused_tokens);
  EXPECT_GT(d.reused_tokens, static_cast<int64_t>(kPrompt.size()));
  EXPECT_GT(d.drafted_tokens, 0);
}

// A stop token met inside a verification (after drafted tokens were kept)
// on a recurrent model: the session holds what a run without drafting
// holds, and serves the next turn alike.
TEST(SpeculativeSession, AStopInsideAVerificationKeepsTheSessionOfARunWithoutDrafting) {
  auto m = load(kModels / "k3_bf16");
  const int32_t vocab = static_cast<int32_t>(m->config().vocab_size);
  GenerateOptions g;
  g.max_new_tokens = 16;
  g.keep_logits = true;
  g.sampling = {0.8f, 9};
  const GenerateResult ref = generate(*m, kPrompt, g);
  // Stop at the token output sixth (its first occurrence).
  const int32_t stop = ref.tokens[5];
  g.stop_tokens = {stop};
  for (int draft_max : {3, 4, 5}) {
    SCOPED_TRACE("draft_max " + std::to_string(draft_max));
    Session plain, drafted;
    g.drafter = nullptr;
    const GenerateResult a = generate(*m, kPrompt, g, plain);
    OracleDrafter oracle(ref.tokens, vocab);
    g.drafter = &oracle;
    g.draft_max = draft_max;
    g.draft_adaptive = false;
    const GenerateResult b = generate(*m, kPrompt, g, drafted);
    expect_same_bits(a.tokens, a.logits, b.tokens, b.logits);
    ASSERT_EQ(a.tokens.back(), stop);
    EXPECT_GT(b.accepted_tokens, 0);
    // The drafted session may hold fewer tokens (a rolled-back state), never other ones.
    ASSERT_LE(drafted.tokens.size(), plain.tokens.size());
    EXPECT_TRUE(std::equal(drafted.tokens.begin(), drafted.tokens.end(), plain.tokens.begin()));
    std::vector<int32_t> next = plain.tokens;
    next.insert(next.end(), {7, 8});
    g.drafter = nullptr;
    g.stop_tokens.clear();
    const GenerateResult c = generate(*m, next, g, plain);
    const GenerateResult d = generate(*m, next, g, drafted);
    expect_same_bits(c.tokens, c.logits, d.tokens, d.logits);
    g.stop_tokens = {stop};
  }
}

// Sampled tokens follow the target's distribution when drawn from a drafted
// row's logits: the first decode step feeds the first token and the drafter's
// g, g; where the second token sampled is g, the third is drawn from the row
// fed g in that step. Over many seeds, that token's counts against the sum of its
// probabilities (softmax of the logits row it was drawn from), Pearson's
// chi-square.
TEST(SpeculativeDistribution, TokensDrawnFromDraftedRowsFollowTheTargetsDistribution) {
  auto m = load(kModels / "qwen_gqa");
  const size_t V = static_cast<size_t>(m->config().vocab_size);
  const float T = 1.0f;
  // g: the most frequent second token without drafting.
  std::vector<int> seen(V, 0);
  for (uint64_t seed = 1; seed <= 200; ++seed) ++seen[static_cast<size_t>(run(*m, {T, seed}, nullptr, 2).tokens[1])];
  const int32_t g = static_cast<int32_t>(std::max_element(seen.begin(), seen.end()) - seen.begin());
  ConstantDrafter constant(g);
  std::vector<double> expected(V, 0.0), observed(V, 0.0);
  int drafted_rows = 0;
  for (int i = 0; i < 6000 && drafted_rows < 600; ++i) {
    const GenerateResult r = run(*m, {T, static_cast<uint64_t>(i) + 1}, &constant, 3, 2);
    ASSERT_EQ(r.tokens.size(), 3u);
    if (r.tokens[1] != g) continue;  // token 2 came from a later step
    ++drafted_rows;
    ASSERT_GE(r.accepted_tokens, 1);
    const std::vector<float>& row = r.logits[2];
    const float mx = *std::max_element(row.begin(), row.end());
    double z = 0;
    for (float x : row) z += std::exp(static_cast<double>(x - mx) / T);
    for (size_t v = 0; v < V; ++v) expected[v] += std::exp(static_cast<double>(row[v] - mx) / T) / z;
    observed[static_cast<size_t>(r.tokens[2])] += 1;
  }
  ASSERT_GE(drafted_rows, 300);
  double chi2 = 0, rest_e = 0, rest_o = 0;
  int cells = 0;
  for (size_t v = 0; v < V; ++v) {
    if (expected[v] >= 5) {
      chi2 += (observed[v] - expected[v]) * (observed[v] - expected[v]) / expected[v];
      ++cells;
    } else {
      rest_e += expected[v];
      rest_o += observed[v];
    }
  }
  if (rest_e >= 5) {
    chi2 += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
    ++cells;
  }
  ASSERT_GE(cells, 5);
  // Mean cells - 1, sd sqrt(2 (cells - 1)): six standard deviations above.
  const double df = cells - 1;
  EXPECT_LT(chi2, df + 6 * std::sqrt(2 * df)) << cells << " cells, " << drafted_rows << " drafted rows";
}

TEST(NgramDrafter, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  auto d = make_ngram_drafter(2, 3);
  auto s = d->start({});
  std::vector<int32_t> out;
  // "1 2 3" occurred twice, followed by 4 5 the first time and 6 7 8 the second: the latest wins.
  const std::vector<int32_t> seq = {1, 2, 3, 4, 5, 9, 1, 2, 3, 6, 7, 8, 0, 1, 2, 3};
  s->propose(seq, 0, 3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{6, 7, 8}));
  // A repetition shorter than max goes on: "x y x y" proposes x y x y x.
  out.clear();
  d->start({})->propose(std::vector<int32_t>{7, 8, 7, 8}, 0, 5, out);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 7, 8, 7}));
  // Grown by what was accepted: "8 0" is new, "0 1" occurred once, followed by 2 3 ...
  std::vector<int32_t> grown = seq;
  grown.insert(grown.end(), {6, 7, 8, 0, 1});
  out.clear();
  s->propose(grown, 0, 4, out);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 6, 7}));
  // Nothing seen before: nothing proposed; at most `max`.
  out.clear();
  s->propose(std::vector<int32_t>{1, 2, 3, 42}, 0, 4, out);
  EXPECT_TRUE(out.empty());
  auto fresh = d->start({});
  out.clear();
  fresh->propose(seq, 0, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{6}));
}

// A sequence whose drafts were all accepted, 30 steps of 4.
DraftAcceptance all_accepted() {
  DraftAcceptance a;
  for (int i = 0; i < 30; ++i) a.record(4, 4);
  return a;
}

TEST(DraftLength, DraftsMoreWhenMoreIsAcceptedAndRowsAreCheap) {
  DraftLength policy(8);
  DraftAcceptance good;
  for (int i = 0; i < 30; ++i) good.record(4, 4);
  DraftAcceptance bad;
  for (int i = 0; i < 30; ++i) bad.record(1, 0);
  // Rows cheap (a 5-row step costs 1.1x one row): long drafts for a good
  // acceptance, none for a bad one.
  for (int i = 0; i < 20; ++i) {
    policy.record_step(1, 1.0);
    policy.record_step(5, 1.1);
  }
  EXPECT_NEAR(policy.cost(4, 1), 1.1, 1e-9);
  policy.begin_step();
  EXPECT_GE(policy.choose(good), 6);
  EXPECT_EQ(policy.choose(bad), 0);
  // Rows dearer than whole steps: drafting cannot pay.
  DraftLength dear(8);
  for (int i = 0; i < 40; ++i) {
    dear.record_step(1, 1.0);
    dear.record_step(3, 3.5);
  }
  EXPECT_EQ(dear.choose(good), 0);
  // A sequence that stopped drafting tries one token after kProbeEvery
  // steps, and waits twice as long after each probe that did not pay: 16,
  // 32, 64 and 128 idle steps (its first idle step was the choice above).
  std::vector<int> probes;
  for (int i = 1; i <= 240; ++i) {
    policy.begin_step();
    if (policy.choose(bad) > 0) probes.push_back(i);
  }
  EXPECT_EQ(probes, (std::vector<int>{15, 47, 111, 239}));
  // A sequence that starts with a baseline skips its first steps (steps
  // 243 to 249 of this policy: no baseline of the grid falls due in them).
  DraftAcceptance fresh = good;
  fresh.baseline_left = DraftLength::kBaselineSteps;
  for (int i = 0; i < DraftLength::kBaselineSteps; ++i) {
    policy.begin_step();
    EXPECT_EQ(policy.choose(fresh), 0);
  }
  policy.begin_step();
  EXPECT_GT(policy.choose(fresh), 0);
}

// Sequences that keep drafting skip kBaselineSteps steps in a row at every
// 16th step until steps without drafts are measured at their batch size
// (three times at most), then at every kBaselineEvery-th: the same steps
// for every sequence, so that a step with several sequences and no drafts
// is measured too. The outcomes of steps with different numbers of
// sequences are kept apart: drafting measured slower beside another
// sequence stops there and still runs alone.
TEST(DraftLength, BaselinesFallOnTheSameStepsAndOutcomesAreKeptByBatchSize) {
  DraftLength policy(8);
  for (int i = 0; i < 20; ++i) {
    policy.record_step(2, 1.0);
    policy.record_step(10, 1.1);
  }
  DraftAcceptance a = all_accepted(), b = all_accepted();
  std::vector<int> skipped_a, skipped_b;
  for (int step = 1; step <= 128; ++step) {
    policy.begin_step();
    if (policy.choose(a, 2, 2) == 0) skipped_a.push_back(step);
    if (step >= 10 && policy.choose(b, 2, 2) == 0) skipped_b.push_back(step);  // b joins later
  }
  std::vector<int> expected;
  for (int start : {16, 32, 48, 64})  // three early baselines, then at the 64th step
    for (int i = 0; i < DraftLength::kBaselineSteps; ++i) expected.push_back(start + i);
  expected.push_back(128);
  EXPECT_EQ(skipped_a, expected);
  EXPECT_EQ(skipped_b, expected);
  // Steps without drafts measured at this batch size: no more early
  // baselines there; at a batch size not measured yet, a sequence starts
  // with them (steps 129 to 256 here).
  for (int i = 0; i < 5; ++i) policy.record_outcome(false, 1.0, 2, 2);
  DraftAcceptance c = all_accepted(), d = all_accepted();
  std::vector<int> skipped_c, skipped_d;
  for (int step = 129; step <= 256; ++step) {
    policy.begin_step();
    if (policy.choose(c, 2, 2) == 0) skipped_c.push_back(step);
    if (policy.choose(d, 3, 3) == 0) skipped_d.push_back(step);
  }
  std::vector<int> at_64, at_16;
  for (int start : {192, 256})
    for (int i = 0; i < DraftLength::kBaselineSteps && start + i <= 256; ++i) at_64.push_back(start + i);
  for (int start : {144, 160, 176, 192, 256})
    for (int i = 0; i < DraftLength::kBaselineSteps && start + i <= 256; ++i) at_16.push_back(start + i);
  EXPECT_EQ(skipped_c, at_64);
  EXPECT_EQ(skipped_d, at_16);  // three early ones, then the 64th steps'
  // Sequences refused together probe together: their probes fade the
  // measurement once a step.
  DraftLength fading(8);
  for (int i = 0; i < 20; ++i) {
    fading.record_outcome(true, 3.0, 4, 2);
    fading.record_outcome(false, 1.0, 2, 2);
  }
  fading.begin_step();
  fading.note_probe(2);
  fading.note_probe(2);
  EXPECT_TRUE(fading.drafting_measured_slower(2)) << "faded twice in one step";
  fading.begin_step();
  fading.note_probe(2);
  EXPECT_FALSE(fading.drafting_measured_slower(2));
  // Drafting measured slower with two sequences: refused there, not alone.
  for (int i = 0; i < 5; ++i) {
    policy.record_outcome(true, 3.0, 4, 2);  // 0.75 s a token drafting, 0.5 without
    policy.record_outcome(false, 1.0, 1, 1);
    policy.record_outcome(true, 2.0, 4, 1);  // alone: 0.5 s a token drafting, 1.0 without
  }
  EXPECT_TRUE(policy.drafting_measured_slower(2));
  EXPECT_FALSE(policy.drafting_measured_slower(1));
  DraftAcceptance two = all_accepted(), one = all_accepted();  // no baseline under way
  policy.begin_step();
  EXPECT_EQ(policy.choose(two, 2, 2), 0);
  EXPECT_GT(policy.choose(one, 1, 1), 0);
  // Past kOutcomeSequences the cost model decides alone.
  for (int i = 0; i < 5; ++i) {
    policy.record_outcome(true, 30.0, 4, DraftLength::kOutcomeSequences + 1);
    policy.record_outcome(false, 1.0, 4, DraftLength::kOutcomeSequences + 1);
  }
  EXPECT_FALSE(policy.drafting_measured_slower(DraftLength::kOutcomeSequences + 1));
}

// What whole steps measured overrules the model: drafting that came out
// slower per emitted token than not drafting stops, whatever the model
// says; probes fade that measurement, so drafting runs (and is measured)
// again after a while, and stays on once it measures faster.
TEST(DraftLength, DraftingMeasuredSlowerStopsAndIsTriedAgainLater) {
  DraftLength policy(8);
  DraftAcceptance good;
  for (int i = 0; i < 30; ++i) good.record(4, 4);
  for (int i = 0; i < 20; ++i) {
    policy.record_step(1, 1.0);
    policy.record_step(5, 1.1);
  }
  policy.begin_step();
  EXPECT_GT(policy.choose(good), 0);  // the model: drafting pays
  for (int i = 0; i < 5; ++i) {
    policy.record_outcome(false, 1.0, 1);
    policy.record_outcome(true, 6.0, 4);  // 1.5 s a token drafting, 1.0 without
  }
  EXPECT_TRUE(policy.drafting_measured_slower());
  policy.begin_step();
  EXPECT_EQ(policy.choose(good), 0);
  int tried_again = 0;
  for (int i = 1; i <= 2 * DraftLength::kMaxProbeEvery && tried_again == 0; ++i) {
    policy.begin_step();
    const int k = policy.choose(good);
    if (k > 0 && good.probed) policy.note_probe();  // the scheduler's part: the probe ran
    if (k > 1) tried_again = i;                     // more than a probe's one token
  }
  EXPECT_EQ(tried_again, DraftLength::kMaxProbeEvery)
      << "the first probe (kMaxProbeEvery - 1 idle steps after the refusal) faded it";
  for (int i = 0; i < 5; ++i) policy.record_outcome(true, 2.0, 4);
  EXPECT_FALSE(policy.drafting_measured_slower());
  policy.begin_step();
  EXPECT_GT(policy.choose(good), 1);
}

// Never a one-row step (always drafting, or several sequences): the costs are
// still learnt from the row counts that do occur, and the drafter's own time
// counts. Each row as dear as a whole step and a drafter at half a step per
// token: drafting would halve the speed, so it stops.
TEST(DraftLength, LearnsWithoutOneRowStepsAndCountsTheDraftersTime) {
  DraftLength policy(8);
  DraftAcceptance good;
  for (int i = 0; i < 30; ++i) good.record(4, 3);
  policy.begin_step();
  EXPECT_GT(policy.choose(good), 0);  // the prior: rows are cheap
  for (int i = 0; i < 50; ++i) {
    policy.record_step(3, 3.0);
    policy.record_step(5, 5.0);
    policy.record_draft(1.0, 2);
  }
  EXPECT_NEAR(policy.cost(2, 1), 1 + 2 + 0.5 * 2, 1e-9);
  EXPECT_EQ(policy.choose(good, 1), 0);
  // Beside three other sequences one more row costs a quarter of the step.
  EXPECT_GT(policy.choose(good, 4), 0);
}

}  // namespace
}  // namespace strata
