// Drafting with the checkpoint's own next-token-prediction layer
// (runtime/drafter.h: make_mtp_drafter; model/mtp_forward.cpp). On
// tests/fixtures/models/ds_mtp (transformers' ds_sharded with an MTP layer
// appended, and a reference from tools/train_fixtures/make_mtp_fixture.py):
// the hidden states forward() hands out, the MTP logits and a chained second
// step against the reference; the drafter's proposals are the reference's
// argmax, prompt handed over in chunks or whole; on ds_mtp_trained (a tiny
// model trained with its MTP layer) drafts are kept under greedy; its
// experts count in a streamed budget's trunk; a failing stream turns
// drafting off; a model without an MTP layer is one clear error.
// (That the output with it is the output without it, in RAM, streamed and
// on a reused session, speculative_test.cpp checks with every drafter.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "runtime/drafter.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "runtime/sampler.h"
#include "same_bits.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";
const fs::path kFixture = kModels / "ds_mtp";
// models.py (f32, torch) against strata (f32 from the same bf16 weights):
// the difference is summation order only.
constexpr float kTolerance = 1e-4f;
const std::vector<int32_t> kFixturePrompt = {5, 17, 3, 42, 9, 5, 17, 3};

struct MtpReference {
  std::vector<int32_t> seq;  // prompt + greedy
  size_t rows = 0;
  std::vector<float> hidden, logits, chain;  // [rows × hidden], [rows × vocab], [(rows - 1) × vocab]
};

std::vector<float> read_f32(const fs::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  EXPECT_TRUE(f.good()) << "short file " << p;
  return v;
}

MtpReference load_reference(const ModelConfig& c) {
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(kFixture / "reference.json"));
  MtpReference r;
  r.seq = j["prompt_ids"].get<std::vector<int32_t>>();
  for (int32_t t : j["greedy_ids"]) r.seq.push_back(t);
  const nlohmann::json& m = j["mtp"];
  r.rows = m["n_rows"].get<size_t>();
  const size_t H = static_cast<size_t>(c.hidden_size), V = static_cast<size_t>(c.vocab_size);
  r.hidden = read_f32(kFixture / m["hidden_file"].get<std::string>(), r.rows * H);
  r.logits = read_f32(kFixture / m["logits_file"].get<std::string>(), r.rows * V);
  r.chain = read_f32(kFixture / m["chain_logits_file"].get<std::string>(), (r.rows - 1) * V);
  return r;
}

std::unique_ptr<Model> load(const fs::path& dir, LoadOptions o = {}) {
  o.threads = 2;
  if (o.heat.empty()) o.heat = "none";
  return load_model(dir, o);
}

void expect_near(std::span<const float> want, std::span<const float> got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(want[i] - got[i]));
  EXPECT_LE(worst, kTolerance) << what;
}

// The main model's final hidden states of seq[0 .. rows), as forward() hands them out.
std::vector<float> main_hidden(Model& m, const std::vector<int32_t>& seq, size_t rows) {
  auto cache = m.new_cache();
  std::vector<Row> r;
  for (size_t i = 0; i < rows; ++i) r.push_back(Row{seq[i], static_cast<int64_t>(i), cache.get(), false, true});
  std::vector<float> hidden(rows * static_cast<size_t>(m.config().hidden_size));
  m.forward(r, nullptr, hidden.data());
  return hidden;
}

TEST(MtpForward, HiddenStatesLogitsAndAChainedStepMatchTheReference) {
  auto m = load(kFixture);
  ASSERT_EQ(m->mtp_layers().size(), 1u);
  const MtpReference ref = load_reference(m->config());
  const size_t H = static_cast<size_t>(m->config().hidden_size), V = static_cast<size_t>(m->config().vocab_size);
  // h_i after the final norm: a state before it would be far off.
  const std::vector<float> hidden = main_hidden(*m, ref.seq, ref.rows);
  expect_near(ref.hidden, hidden, "hidden states");

  // MTP row i: token s[i+1] and h_i at position i, all rows in one step.
  auto cache = m->new_mtp_cache();
  std::vector<Row> rows;
  for (size_t i = 0; i < ref.rows; ++i) rows.push_back(Row{ref.seq[i + 1], static_cast<int64_t>(i), cache.get(), true});
  std::vector<float> logits(ref.rows * V), out(ref.rows * H);
  m->mtp_forward(0, rows, hidden.data(), logits.data(), out.data());
  expect_near(ref.logits, logits, "MTP logits");
  EXPECT_EQ(cache->length(), static_cast<int64_t>(ref.rows));

  // A second step after row i: its argmax at position i + 1, on row i's
  // output; then row i + 1 is written back as it was.
  std::vector<float> chained(V), chained_out(H);
  for (size_t i = 0; i + 1 < ref.rows; ++i) {
    cache->set_length(static_cast<int64_t>(i + 1));
    const int32_t t = argmax(std::span<const float>(&logits[i * V], V));
    ASSERT_EQ(t, argmax(std::span<const float>(&ref.logits[i * V], V))) << "row " << i;
    const Row row{t, static_cast<int64_t>(i + 1), cache.get(), true};
    m->mtp_forward(0, std::span<const Row>(&row, 1), &out[i * H], chained.data(), chained_out.data());
    expect_near(std::span<const float>(&ref.chain[i * V], V), chained, "chained step after row " + std::to_string(i));
    cache->set_length(static_cast<int64_t>(i + 1));
    m->mtp_forward(0, std::span<const Row>(&rows[i + 1], 1), &hidden[(i + 1) * H], chained.data(), chained_out.data());
  }
}

TEST(MtpForward, RowsGiveTheSameBitsInOneStepAsOneAtATime) {
  LoadOptions small;
  small.max_batch = 5;  // the MTP step is cut in pieces too
  auto m = load(kFixture, small);
  const MtpReference ref = load_reference(m->config());
  const size_t H = static_cast<size_t>(m->config().hidden_size), V = static_cast<size_t>(m->config().vocab_size);
  const std::vector<float> hidden = main_hidden(*m, ref.seq, ref.rows);
  auto whole = m->new_mtp_cache(), single = m->new_mtp_cache();
  std::vector<Row> rows;
  for (size_t i = 0; i < ref.rows; ++i) rows.push_back(Row{ref.seq[i + 1], static_cast<int64_t>(i), whole.get(), true});
  std::vector<float> a(ref.rows * V), a_out(ref.rows * H), b(ref.rows * V), b_out(ref.rows * H);
  m->mtp_forward(0, rows, hidden.data(), a.data(), a_out.data());
  for (size_t i = 0; i < ref.rows; ++i) {
    Row r = rows[i];
    r.cache = single.get();
    m->mtp_forward(0, std::span<const Row>(&r, 1), &hidden[i * H], &b[i * V], &b_out[i * H]);
  }
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a_out.data(), b_out.data(), a_out.size() * sizeof(float)));
}

TEST(MtpForward, HandingOutHiddenStatesChangesNoLogit) {
  for (const char* name : {"ds_mtp", "k3_bf16", "qwen_gqa"}) {
    SCOPED_TRACE(name);
    auto m = load(kModels / name);
    const std::vector<int32_t> seq = {5, 17, 3, 42, 9, 5, 17, 3};
    const size_t V = static_cast<size_t>(m->config().vocab_size);
    std::vector<float> plain(seq.size() * V), with(seq.size() * V), hidden(seq.size() * m->config().hidden_size);
    for (bool want_hidden : {false, true}) {
      auto cache = m->new_cache();
      std::vector<Row> rows;
      for (size_t i = 0; i < seq.size(); ++i)
        rows.push_back(Row{seq[i], static_cast<int64_t>(i), cache.get(), true, want_hidden});
      m->forward(rows, want_hidden ? with.data() : plain.data(), hidden.data());
    }
    EXPECT_EQ(0, std::memcmp(plain.data(), with.data(), plain.size() * sizeof(float)));
  }
}

// `n` tokens, greedy, logits kept; with a drafter, `draft_max` drafted every
// step (not adapted: every step is checked).
GenerateOptions every_step(int n, int draft_max) {
  GenerateOptions g;
  g.max_new_tokens = n;
  g.keep_logits = true;
  g.draft_max = draft_max;
  g.draft_adaptive = false;
  return g;
}

// Wraps a drafter and records each proposal with the sequence it was for.
class RecordingDrafter final : public Drafter {
 public:
  explicit RecordingDrafter(Drafter& inner) : inner_(inner) {}
  std::string name() const override { return "recording " + inner_.name(); }
  std::unique_ptr<DraftStream> start(const SamplingParams& s) override {
    return std::make_unique<Stream>(*this, inner_.start(s));
  }
  struct Proposal {
    size_t length;  // tokens of the sequence it came after
    std::vector<int32_t> tokens;
  };
  std::vector<Proposal> proposals;

 private:
  struct Stream final : DraftStream {
    Stream(RecordingDrafter& d, std::unique_ptr<DraftStream> inner) : d(d), inner(std::move(inner)) {}
    void propose(std::span<const int32_t> tokens, uint64_t first, int max, std::vector<int32_t>& out) override {
      const size_t before = out.size();
      inner->propose(tokens, first, max, out);
      d.proposals.push_back({tokens.size(), std::vector<int32_t>(out.begin() + static_cast<long>(before), out.end())});
    }
    bool wants_hidden() const override { return inner->wants_hidden(); }
    void observe(std::span<const int32_t> tokens, int64_t from, std::span<const float> hidden) override {
      inner->observe(tokens, from, hidden);
    }
    RecordingDrafter& d;
    std::unique_ptr<DraftStream> inner;
  };
  Drafter& inner_;
};

TEST(MtpDrafter, ProposesTheReferenceArgmaxWithThePromptInChunksOrWhole) {
  // The prompt whole, in steps of 5, and in one pass of 5-row parts (the
  // hidden states handed to the drafter part by part, in row order).
  for (const auto& [chunk, pass] : {std::pair<int64_t, int64_t>{0, 0}, {5, 0}, {5, 17}}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk) + ", pass " + std::to_string(pass));
    LoadOptions o;
    o.max_batch = chunk;
    o.max_pass = pass;
    auto m = load(kFixture, o);
    const MtpReference ref = load_reference(m->config());
    const size_t V = static_cast<size_t>(m->config().vocab_size);
    auto mtp = make_mtp_drafter(*m);
    RecordingDrafter recording(*mtp);
    const std::vector<int32_t> prompt(ref.seq.begin(), ref.seq.begin() + 17);
    GenerateOptions g = every_step(16, 2);  // greedy
    g.drafter = &recording;
    const GenerateResult r = generate(*m, prompt, g);
    ASSERT_EQ(r.tokens, std::vector<int32_t>(ref.seq.begin() + 17, ref.seq.end()));
    // After N tokens, the first guess is MTP row N - 2's argmax, the second the chained step's after it.
    int checked = 0;
    for (const auto& p : recording.proposals) {
      ASSERT_FALSE(p.tokens.empty()) << "after " << p.length;
      const size_t row = p.length - 2;
      EXPECT_EQ(p.tokens[0], argmax(std::span<const float>(&ref.logits[row * V], V))) << "after " << p.length;
      if (p.tokens.size() > 1 && row + 1 < ref.rows) {
        EXPECT_EQ(p.tokens[1], argmax(std::span<const float>(&ref.chain[row * V], V))) << "after " << p.length;
        ++checked;
      }
    }
    EXPECT_GE(checked, 5);
    EXPECT_GT(r.draft_steps, 5);
  }
}

// A stream that observed many tokens without proposing keeps only the last
// 32 rows waiting; its next proposal restarts its cache at them, positions
// shifted, and so proposes exactly what a fresh stream handed only those rows
// proposes (runtime/mtp_drafter.cpp, kWindowRows). Any hidden states will do:
// random ones here.
TEST(MtpDrafter, FarBehindItProposesAsAFreshStreamOfTheLastWindow) {
  auto m = load(kFixture);
  const size_t width = static_cast<size_t>(m->config().hidden_size);
  const int64_t L = 90, prompt = 17, window = 32;
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < L; ++i) tokens.push_back(static_cast<int32_t>(3 + (i * 37) % 200));
  std::vector<float> hidden(static_cast<size_t>(L) * width);
  uint32_t state = 12345;
  for (float& v : hidden) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  auto rows = [&](int64_t from, int64_t n) {
    return std::span<const float>(hidden).subspan(static_cast<size_t>(from) * width, static_cast<size_t>(n) * width);
  };
  auto mtp = make_mtp_drafter(*m);
  const SamplingParams greedy;
  auto behind = mtp->start(greedy);
  const std::span<const int32_t> all(tokens);
  behind->observe(all.first(prompt), 0, rows(0, prompt - 1));
  std::vector<int32_t> first;
  behind->propose(all.first(prompt), 0, 3, first);
  ASSERT_FALSE(first.empty());
  // Drafting off for L - prompt - 1 tokens: each one's row is handed over, nothing proposed.
  for (int64_t size = prompt + 1; size <= L; ++size) behind->observe(all.first(size), size - 2, rows(size - 2, 1));
  std::vector<int32_t> got;
  behind->propose(all, 0, 4, got);

  auto fresh = mtp->start(greedy);
  fresh->observe(all, L - 1 - window, rows(L - 1 - window, window));
  std::vector<int32_t> want;
  fresh->propose(all, 0, 4, want);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(got, want);
}

// A stream that reads hidden states and fails in its third observe(): that
// sequence drafts no more (one warning), its rows ask for no more hidden
// states, and its output is that of no drafting.
class FailingObserver final : public Drafter {
 public:
  std::string name() const override { return "failing observer"; }
  std::unique_ptr<DraftStream> start(const SamplingParams&) override { return std::make_unique<Stream>(*this); }
  int observed = 0, proposed = 0;

 private:
  struct Stream final : DraftStream {
    explicit Stream(FailingObserver& d) : d(d) {}
    bool wants_hidden() const override { return true; }
    void observe(std::span<const int32_t>, int64_t, std::span<const float>) override {
      if (++d.observed == 3) throw Error("observe failed");
    }
    void propose(std::span<const int32_t> tokens, uint64_t, int max, std::vector<int32_t>& out) override {
      ++d.proposed;
      out.assign(static_cast<size_t>(max), tokens.back());
    }
    FailingObserver& d;
  };
};

TEST(MtpDrafter, AStreamFailingToObserveStopsDraftingAndTheOutputIsUnchanged) {
  auto m = load(kFixture);
  GenerateOptions g = every_step(12, 2);
  const GenerateResult want = generate(*m, kFixturePrompt, g);
  FailingObserver failing;
  g.drafter = &failing;
  testing::internal::CaptureStderr();
  const GenerateResult got = generate(*m, kFixturePrompt, g);
  const std::string err = testing::internal::GetCapturedStderr();
  expect_same_bits(want.tokens, want.logits, got.tokens, got.logits);
  EXPECT_EQ(failing.observed, 3);
  EXPECT_EQ(failing.proposed, 2);  // after the prompt's observe() and the first step's
  EXPECT_NE(err.find("observe failed"), std::string::npos) << err;
}

// Greedy with the MTP layer drafting gives the bits of greedy without, and
// keeps some of its drafts (a trained layer guesses the continuation).
void expect_mtp_drafts_kept(Model& m, const std::vector<int32_t>& prompt, int tokens) {
  GenerateOptions g = every_step(tokens, 3);
  const GenerateResult want = generate(m, prompt, g);
  auto mtp = make_mtp_drafter(m);
  g.drafter = mtp.get();
  const GenerateResult got = generate(m, prompt, g);
  expect_same_bits(want.tokens, want.logits, got.tokens, got.logits);
  EXPECT_GT(got.accepted_tokens, 0);
  ::testing::Test::RecordProperty("accepted",
                                  std::to_string(got.accepted_tokens) + " of " + std::to_string(got.drafted_tokens));
}

// ds_mtp_trained (tools/train_fixtures/train_mtp_fixture.py): an MTP layer
// trained with its model guesses the greedy continuation of held-out text
// well enough that drafts are kept, and the output is that of no drafting.
TEST(MtpDrafter, ATrainedMtpLayersDraftsAreAcceptedUnderGreedy) {
  const fs::path dir = kModels / "ds_mtp_trained";
  auto m = load(dir);
  const nlohmann::json trained = nlohmann::json::parse(std::ifstream(dir / "train_result.json"));
  const std::vector<int32_t> prompt = trained["prompt_ids"].get<std::vector<int32_t>>();
  expect_mtp_drafts_kept(*m, prompt, 48);
}

// trained_ds_mtp (tools/train_fixtures: a DeepSeek-V3 trained jointly with
// its MTP layer on Debian documentation): the layer's logits for every row
// of the reference sequence, given strata's own final hidden states, match
// make_references.py's (models.py in f32 on the stored weights), and drafts
// from it are accepted under greedy with the output unchanged.
TEST(MtpForward, TheTrainedLayersLogitsMatchTheReference) {
  const fs::path dir = kModels / "trained_ds_mtp";
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "reference.json"));
  std::vector<int32_t> seq = j["prompt_ids"].get<std::vector<int32_t>>();
  for (int32_t t : j["greedy_ids"].get<std::vector<int32_t>>()) seq.push_back(t);
  auto m = load(dir);
  const size_t rows = j["mtp"]["n_rows"].get<size_t>(), V = static_cast<size_t>(m->config().vocab_size),
               H = static_cast<size_t>(m->config().hidden_size);
  const std::vector<float> want = read_f32(dir / j["mtp"]["logits_file"].get<std::string>(), rows * V);
  const std::vector<float> hidden = main_hidden(*m, seq, rows);
  auto cache = m->new_mtp_cache();
  std::vector<Row> r;
  for (size_t i = 0; i < rows; ++i) r.push_back(Row{seq[i + 1], static_cast<int64_t>(i), cache.get(), true});
  std::vector<float> logits(rows * V), out(rows * H);
  m->mtp_forward(0, r, hidden.data(), logits.data(), out.data());
  expect_near(want, logits, "trained MTP logits");

  expect_mtp_drafts_kept(*m, j["prompt_ids"].get<std::vector<int32_t>>(), 32);
}

// Streamed, the MTP layer's routed experts come through the expert cache
// like the decoder layers' (read from the drive when routed to) and give the
// same bits as in RAM.
TEST(MtpForward, StreamedExpertsAreReadThroughTheCacheAndGiveTheSameBits) {
  auto ram = load(kFixture);
  LoadOptions o;
  o.stream = true;
  o.cache_slots = static_cast<size_t>(2 * ram->config().num_experts_per_tok);
  auto streamed = load(kFixture, o);
  ASSERT_TRUE(streamed->streaming());
  const MtpReference ref = load_reference(ram->config());
  const size_t V = static_cast<size_t>(ram->config().vocab_size), H = static_cast<size_t>(ram->config().hidden_size);
  const std::vector<float> hidden = main_hidden(*ram, ref.seq, ref.rows);
  EXPECT_EQ(main_hidden(*streamed, ref.seq, ref.rows), hidden);
  auto mtp_logits = [&](Model& m) {
    auto cache = m.new_mtp_cache();
    std::vector<Row> rows;
    for (size_t i = 0; i < ref.rows; ++i) rows.push_back(Row{ref.seq[i + 1], static_cast<int64_t>(i), cache.get(), true});
    std::vector<float> logits(ref.rows * V), out(ref.rows * H);
    m.mtp_forward(0, rows, hidden.data(), logits.data(), out.data());
    return logits;
  };
  const std::vector<float> want = mtp_logits(*ram);
  const uint64_t before = streamed->expert_stats().requests;
  EXPECT_EQ(mtp_logits(*streamed), want);
  EXPECT_GT(streamed->expert_stats().requests, before);  // the MTP layer's experts were asked of the cache
}

TEST(MtpDrafter, TheMtpLayersExpertsStreamOutsideTheTrunk) {
  LoadOptions o;
  o.stream = true;
  auto with = load(kFixture, o), without = load(kModels / "ds_sharded", o);
  const std::string prefix = "model.layers." + std::to_string(with->config().num_layers) + ".";
  uint64_t layer = 0, experts = 0;
  for (const std::string& name : with->tensors().names())
    if (name.starts_with(prefix)) {
      const uint64_t bytes = with->tensors().get(name).nbytes;
      layer += bytes;
      if (name.find(".mlp.experts.") != std::string::npos) experts += bytes;
    }
  ASSERT_GT(experts, 0u);
  // Its attention, norms, router, shared expert and head stay; its routed
  // experts are streamed with the others.
  EXPECT_EQ(with->memory_plan().trunk, without->memory_plan().trunk + layer - experts);
}

TEST(MtpDrafter, AModelWithoutAnMtpLayerIsAClearError) {
  auto m = load(kModels / "ds_sharded");
  try {
    make_mtp_drafter(*m);
    FAIL() << "made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no next-token-prediction (MTP) layer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ds_sharded"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
