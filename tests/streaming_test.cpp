// Streaming experts from drives (issue 4): whatever the cache size, drive
// count, placement, read backend or prefetch setting, tokens and logits are
// bit-identical to the in-RAM run; damaged or missing packs are clear errors.
#include <gtest/gtest.h>

#include "scoped_env.h"

#include <filesystem>
#include <fstream>

#include "model/model.h"
#include "runtime/loader.h"
#include "storage/forwarding_storage.h"
#include "pack/manifest.h"
#include "pack/packer.h"
#include "pack/placement.h"
#include "model/expert_heat.h"
#include "runtime/generator.h"
#include "runtime/route_trace.h"
#include "runtime/scheduler.h"
#include "safetensors_writer.h"
#include "fixture_models.h"
#include "same_bits.h"
#include "synth/synth.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  ExpertStats stats;
};

// Sampling (temperature 1, fixed seed) so that routing varies from token to
// token, as in real text, rather than settling into a greedy loop.
Outcome run(const fs::path& model, LoadOptions o, int n = 6) {
  o.threads = 2;
  if (o.heat.empty()) o.heat = "none";
  auto m = load_model(model, o);
  GenerateOptions g;
  g.max_new_tokens = n;
  g.keep_logits = true;
  g.sampling = {1.0f, 11};
  GenerateResult r = generate(*m, {5, 17, 3, 42, 9}, g);
  EXPECT_EQ(m->save_heat(), "");
  return {r.tokens, r.logits, m->expert_stats()};
}

// The router traces of a 12-token prompt (a prefill step of more rows than a
// device routes itself) and 6 sampled tokens.
std::string router_trace(const fs::path& model, LoadOptions o) {
  o.threads = 2;
  o.heat = "none";
  auto m = load_model(model, o);
  testfiles::TempDir tmp("strata-trace");
  const fs::path path = tmp.path() / "trace.jsonl";
  {
    RouteTrace trace(path, m->config().num_layers, m->config().n_routed_experts);
    GenerateOptions g;
    g.max_new_tokens = 6;
    g.sampling = {1.0f, 11};
    g.trace = &trace;
    generate(*m, {5, 17, 3, 42, 9, 1, 2, 3, 4, 5, 6, 7}, g);
  }
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void expect_identical(const Outcome& want, const Outcome& got, const std::string& what) {
  SCOPED_TRACE(what);
  expect_same_bits(want.tokens, want.logits, got.tokens, got.logits);
}

LoadOptions streamed(size_t slots, LoadOptions::Prefetch p = LoadOptions::Prefetch::On, const char* io = "") {
  LoadOptions o;
  o.stream = true;
  o.cache_slots = slots;
  o.prefetch = p;
  o.io_backend = io;
  return o;
}

// The qwen_gqa fixture packed into tmp/pack (one drive: the pack directory).
PackOptions pack_qwen_gqa(const fs::path& tmp) {
  PackOptions p;
  p.source = kModels / "qwen_gqa";
  p.out = tmp / "pack";
  pack_model(p);
  return p;
}

class Streaming : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(Streaming, StreamedFromTheCheckpointIsBitIdentical) {
  const fs::path dir = GetParam().dir;
  const Outcome ram = run(dir, on_device(GetParam(), {}));
  const Outcome one = run(dir, on_device(GetParam(), streamed(1)));
  expect_identical(ram, one, "one slot, prefetch on");
  expect_identical(ram, run(dir, on_device(GetParam(), streamed(3, LoadOptions::Prefetch::Off, "pread"))), "three slots, pread");
  // A cache so small that a guess holds a slot the next layer may wait for.
  expect_identical(ram, run(dir, on_device(GetParam(), streamed(5))), "five slots, prefetch on");
  // Room for guesses (a quarter of the cache): some land, some are cancelled.
  // (--vram 0 here and for `big`: a GPU with memory of its own would take
  // every layer whole at load, below, leaving nothing to guess or miss.)
  const auto ram_cache_only = [&](LoadOptions o) {
    o = on_device(GetParam(), o);
    o.device.vram_bytes = 0;
    return o;
  };
  const Outcome guessing = run(dir, ram_cache_only(streamed(12)));
  expect_identical(ram, guessing, "twelve slots, prefetch on");
  EXPECT_GT(guessing.stats.prefetch_issued, 0u);
  EXPECT_LE(guessing.stats.prefetch_used + guessing.stats.prefetch_cancelled, guessing.stats.prefetch_issued);
  // The prompt in one pass of three parts (steps of 2 rows), each layer's
  // parts in turn, with a cache that holds a layer's experts and with one
  // that does not: the same bits, and the same router traces as in RAM.
  for (size_t slots : {5, 12}) {
    LoadOptions o = on_device(GetParam(), streamed(slots));
    o.max_batch = 2;
    o.max_pass = 5;
    expect_identical(ram, run(dir, o), "passes of parts of 2 rows, " + std::to_string(slots) + " slots");
  }
  {
    LoadOptions o = on_device(GetParam(), streamed(12));
    o.max_batch = 5;
    o.max_pass = 12;
    EXPECT_EQ(router_trace(dir, on_device(GetParam(), {})), router_trace(dir, o));
  }
  const Outcome big = run(dir, ram_cache_only(streamed(0)));
  expect_identical(ram, big, "every expert fits");
  EXPECT_GT(big.stats.misses, 0u);
  EXPECT_EQ(big.stats.requests, big.stats.hits + big.stats.misses);
  if (std::string(GetParam().device) != "vulkan") return;
  {
    // The GPU reads the experts it stages from the RAM cache in place (the
    // cache imported as a buffer: VK_EXT_external_memory_host, which
    // lavapipe and NVIDIA's driver offer), each slot done with before a read
    // overwrites it (with one slot, before every read); without the import,
    // through its staging: the same bits either way. (gpt-oss's BF16 experts
    // are converted when the model loads and stay in RAM, outside the cache.)
    if (dir.filename() != "gptoss_bf16") {
      EXPECT_GT(one.stats.device.bytes_in_place, 0u);
    }
    const testenv::ScopedEnv no_import("STRATA_VK_HOST_IMPORT", "0");
    const Outcome copied = run(dir, on_device(GetParam(), streamed(1)));
    expect_identical(ram, copied, "one slot, no import");
    EXPECT_EQ(copied.stats.device.bytes_in_place, 0u);
  }
  {
    // Every expert in RAM and room in VRAM for all: the GPU takes each MoE
    // layer whole at load and routes small steps itself (no round trip to the
    // host): the same bits as the host's routing.
    // Against no expert cache at all (--vram 0: on a GPU with memory of its
    // own the default budget would hold the layers too), where the host
    // routes and groups every step.
    LoadOptions host = on_device(GetParam(), {});
    host.device.vram_bytes = 0;
    const Outcome grouped = run(dir, host);
    EXPECT_EQ(grouped.stats.device.held_routes, 0u);
    LoadOptions whole = on_device(GetParam(), {});
    whole.device.vram_bytes = int64_t{1} << 30;
    const Outcome held = run(dir, whole);
    expect_identical(grouped, held, "every layer held whole");
    EXPECT_GT(held.stats.device.held_routes, 0u);
    EXPECT_EQ(held.stats.device.staged, 0u);
    // The choices that come back at the step's end are the host's: the same
    // router traces (the prompt's rows grouped on the host, then the tokens'
    // routed on the GPU).
    const std::string want = router_trace(dir, host);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(want, router_trace(dir, whole));
  }
  // The GPU's expert cache (--vram): room for every expert, then room for
  // three (experts evicted and copied again): the same bits as without it.
  // With room for all, the streamed experts are read once, at load, and each
  // layer goes to the GPU whole (as an in-RAM model's): no step reads the
  // drive or misses, every expert is uploaded once, none is staged.
  LoadOptions o = on_device(GetParam(), streamed(3));
  o.device.vram_bytes = int64_t{1} << 30;
  const Outcome all = run(dir, o);
  expect_identical(ram, all, "vram cache, all fit");
  EXPECT_GT(all.stats.device.hits, 0u);
  ASSERT_GT(all.stats.device.uploads, 0u);
  EXPECT_EQ(all.stats.device.staged, 0u);
  EXPECT_GT(all.stats.device.held_routes, 0u);
  EXPECT_EQ(all.stats.misses, 0u);
  EXPECT_EQ(all.stats.requests, all.stats.hits);
  {
    // Unless a slot count is given (--cache-experts), the RAM cache keeps the
    // least that works (two tokens' worth of slots), not a copy of every
    // expert; but not where it also serves MTP layers, not taken whole.
    LoadOptions w = on_device(GetParam(), streamed(0));
    w.device.vram_bytes = int64_t{1} << 30;
    w.threads = 2;
    w.heat = "none";
    auto m = load_model(dir, w);
    EXPECT_TRUE(m->experts_held_on_device());
    const ModelConfig& c = m->config();
    int64_t experts = 0, mtp_experts = 0;
    for (int64_t l = 0; l < c.expert_layers(); ++l)
      (l < c.num_layers ? experts : mtp_experts) += m->streams_experts_of(l) ? c.n_routed_experts : 0;
    EXPECT_EQ(m->expert_stats().cache_slots,
              static_cast<uint64_t>(mtp_experts > 0 ? experts + mtp_experts
                                                    : std::min<int64_t>(experts, 2 * c.num_experts_per_tok)));
    EXPECT_EQ(m->expert_stats().device.uploads, static_cast<uint64_t>(experts));  // each once, at load
  }
  {
    // Experts the GPU holds run from their VRAM copies without a fetch: a
    // second pass over the same text (same tokens, so the same experts; the
    // RAM cache holds three) reads nothing from the drive and misses nothing,
    // yet asks for every expert (counted as held), with the first pass's bits.
    LoadOptions h = o;
    h.prefetch = LoadOptions::Prefetch::Off;  // a wrong guess would read an expert no pass uses
    h.threads = 2;
    h.heat = "none";
    auto m = load_model(dir, h);
    GenerateOptions g;
    g.max_new_tokens = 6;
    g.keep_logits = true;
    g.sampling = {1.0f, 11};
    const GenerateResult first = generate(*m, {5, 17, 3, 42, 9}, g);
    const ExpertStats a = m->expert_stats();
    const GenerateResult second = generate(*m, {5, 17, 3, 42, 9}, g);
    const ExpertStats b = m->expert_stats();
    expect_same_bits(first.tokens, first.logits, second.tokens, second.logits);
    ASSERT_GT(a.requests, 0u);
    EXPECT_EQ(b.bytes_read, a.bytes_read);
    EXPECT_EQ(b.misses, a.misses);
    EXPECT_GT(b.requests, a.requests);
    EXPECT_EQ(b.requests, b.hits + b.misses);
    EXPECT_GT(b.device.hits, a.device.hits);
  }
  // An expert's bytes, and room for its arrays' alignment (256 each).
  const uint64_t expert = all.stats.device.bytes_uploaded / all.stats.device.uploads + 12 * 256;
  o.device.vram_bytes = static_cast<int64_t>(3 * expert);
  const Outcome few = run(dir, o);
  expect_identical(ram, few, "vram cache, three fit");
  EXPECT_GT(few.stats.device.uploads, 3u);  // more than the slots: evicted, copied again
  // Every expert run came from one tier: the cache (found or copied there)
  // or, when a step held every slot, host memory; as without the cache, all
  // staged.
  LoadOptions none = o;
  none.device.vram_bytes = 0;
  const Outcome staged = run(dir, none);
  expect_identical(ram, staged, "no vram cache");
  const auto runs = [](const DeviceExpertStats& d) { return d.hits + d.uploads + d.staged; };
  EXPECT_EQ(runs(few.stats.device), runs(staged.stats.device));
}

// The first MoE layer after dense ones gets a guess too (made by the last
// dense layer), so a decode step's reads start before its first MoE layer.
TEST(StreamingPrefetch, EveryMoeLayerIsGuessedForAfterDenseLayers) {
  LoadOptions o = streamed(12);
  o.threads = 2;
  o.heat = "none";
  auto m = load_model(kModels / "ds_noqlora_dense2", o);  // layers 0-1 dense, 2-3 MoE, top-2
  ASSERT_EQ(m->config().first_k_dense_replace, 2);
  ASSERT_EQ(m->config().num_layers, 4);
  GenerateOptions g;
  g.max_new_tokens = 4;
  g.sampling = {1.0f, 11};
  generate(*m, {5}, g);
  // Four steps of one row (the prompt's token and three generated ones), each
  // guessing top-2 for both MoE layers.
  EXPECT_EQ(m->expert_stats().predicted, 4u * 2 * 2);
}

// A prefill step guesses the next layer's experts too, so that the drive
// reads them while this layer computes; a step longer than the guess's rows
// guesses from rows spread over it. Neither changes a bit of the output.
// A 600-token prompt on ds_noqlora_dense2 (MoE layers 2-3, 8 experts top-2)
// in steps of `step` rows and passes of `pass` (0: as the step's), then 3
// sampled tokens.
GenerateResult long_prompt(LoadOptions o, int64_t step, int64_t pass = 0) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 600; ++i) prompt.push_back((i * 37 + 11) % 288);
  o.threads = 2;
  o.heat = "none";
  o.context = 1024;
  o.allow_long_context = true;  // past the fixture's 128 positions: only the bits and reads matter here
  o.max_batch = step;
  o.max_pass = pass;
  auto m = load_model(kModels / "ds_noqlora_dense2", o);
  EXPECT_EQ(m->max_pass_rows(), std::max(step, pass));
  GenerateOptions g;
  g.max_new_tokens = 3;
  g.keep_logits = true;
  g.sampling = {1.0f, 11};
  return generate(*m, prompt, g);
}

// A layer whose experts the cache holds all of (in memory or on their way)
// is not guessed at: a guess would read nothing, and its router product
// would be paid each token for nothing. ds_noqlora_dense2 has 2 MoE layers
// of 8 experts; a 600-token prompt picks all 16, which 16 slots keep.
TEST(StreamingPrefetch, NoGuessAtALayerTheCacheHoldsWhole) {
  const GenerateResult ram = long_prompt({}, 600);
  const GenerateResult whole = long_prompt(streamed(16), 600);
  expect_same_bits(ram.tokens, ram.logits, whole.tokens, whole.logits);
  EXPECT_EQ(whole.decode_experts.predicted, 0u);
  EXPECT_EQ(whole.decode_experts.bytes_read, 0u);
  // With a slot fewer, a layer holds 7 of its 8: each decode step (two, the
  // first token came from the prompt's) guesses its top-2 again.
  const GenerateResult short_one = long_prompt(streamed(15), 600);
  expect_same_bits(ram.tokens, ram.logits, short_one.tokens, short_one.logits);
  EXPECT_EQ(short_one.decode_experts.predicted, 2u * 2);
}

TEST(StreamingPrefetch, PrefillStepsGuessTheNextLayerWithTheSameBits) {
  const auto outcome = [](LoadOptions o, int64_t chunk) { return long_prompt(std::move(o), chunk); };
  const GenerateResult ram = outcome({}, 600);
  // 600 rows in one step (guessed from rows spread over it), and steps of 40
  // (each guessed from all its rows). 12 slots: a layer's 8 experts (every
  // step picks all of them) and a quarter of the cache, 3, for guesses, so
  // that the last dense layer reads ahead for the first MoE layer and that
  // MoE layer for the next.
  for (int64_t chunk : {600, 40}) {
    SCOPED_TRACE("prefill steps of " + std::to_string(chunk) + " rows, 12 slots");
    const GenerateResult got = outcome(streamed(12), chunk);
    expect_same_bits(ram.tokens, ram.logits, got.tokens, got.logits);
    const uint64_t steps = static_cast<uint64_t>(600 / chunk);
    // Each step guesses both MoE layers, each guess at least top-2.
    EXPECT_GE(got.prefill_experts.predicted, steps * 2 * 2);
    // The first step's two guesses find nothing of theirs cached: 3 each.
    EXPECT_GE(got.prefill_experts.prefetch_issued, 6u);
    EXPECT_GT(got.prefill_experts.prefetch_used, 0u);
    EXPECT_LE(got.prefill_experts.prefetch_used + got.prefill_experts.prefetch_cancelled,
              got.prefill_experts.prefetch_issued);
  }
  // 5 slots: a layer's experts do not all fit; its requests wait for slots
  // and it guesses nothing for the next (the dense layer before it, with no
  // fetch open, still may). The same bits.
  SCOPED_TRACE("prefill steps of 40 rows, 5 slots");
  const GenerateResult tight = outcome(streamed(5), 40);
  expect_same_bits(ram.tokens, ram.logits, tight.tokens, tight.logits);
}

// A 600-token prompt in steps of 40 rows: as steps of their own, each step
// reads its layers' experts again (12 slots hold one layer's 8 but not both
// MoE layers'); as one pass of 15 parts, each layer's parts run in turn and
// its experts are read once: the prefill reads each distinct expert once.
// The same bits either way.
TEST(StreamingPass, APassReadsEachLayersExpertsOnce) {
  const auto outcome = [](LoadOptions o, int64_t pass) { return long_prompt(std::move(o), 40, pass); };
  const GenerateResult ram = outcome({}, 600);
  const GenerateResult steps = outcome(streamed(12), 40), pass = outcome(streamed(12), 600);
  expect_same_bits(ram.tokens, ram.logits, steps.tokens, steps.logits);
  expect_same_bits(ram.tokens, ram.logits, pass.tokens, pass.logits);
  const ExpertStats& a = steps.prefill_experts;
  const ExpertStats& b = pass.prefill_experts;
  ASSERT_GT(b.requests, 0u);
  EXPECT_EQ(a.unique_bytes, b.unique_bytes);
  // Reads: one per miss and one per guess read ahead (a read's bytes are the
  // expert's blob, header and alignment included, not its payload alone).
  const uint64_t expert = b.bytes_needed / b.requests, distinct = b.unique_bytes / expert;
  EXPECT_EQ(distinct, 16u);  // both MoE layers' 8 experts: 600 rows pick every one
  EXPECT_EQ(b.misses + b.prefetch_issued, distinct);
  EXPECT_EQ(b.prefetch_cancelled, 0u);
  EXPECT_GT(a.misses + a.prefetch_issued, 2 * distinct);
  EXPECT_GT(a.bytes_read, 2 * b.bytes_read);
  // A cache smaller than a layer's experts: the parts read again what the
  // cache could not keep, with the same bits.
  const GenerateResult tight = outcome(streamed(5), 600);
  expect_same_bits(ram.tokens, ram.logits, tight.tokens, tight.logits);
}

// Forwards to a real backend and keeps the extents of every submit().
class RecordingStorage final : public ForwardingStorage {
 public:
  RecordingStorage(std::unique_ptr<Storage> inner, std::vector<std::vector<Extent>>& log)
      : ForwardingStorage(std::move(inner)), log_(log) {}
  void submit(std::span<const Extent> x) override {
    log_.emplace_back(x.begin(), x.end());
    inner_->submit(x);
  }

 private:
  std::vector<std::vector<Extent>>& log_;
};

// Streamed in place from published shards, where "experts.10" sorts before
// "experts.2": each batch of reads goes to the drives in file-offset order,
// whatever order the router picked the experts in.
TEST(StreamingOrder, ReadsGoOutInFileOffsetOrder) {
  std::vector<std::vector<Extent>> log;
  LoadOptions o = streamed(6);
  o.storage = [&](const StorageOptions& so) { return std::make_unique<RecordingStorage>(make_storage(so), log); };
  const Outcome got = run(kModels / "k3_mxfp4", o);
  expect_identical(run(kModels / "k3_mxfp4", {}), got, "recorded");
  size_t multi = 0;
  for (const auto& batch : log) {
    multi += batch.size() > 1;
    for (size_t i = 1; i < batch.size(); ++i)
      EXPECT_LE(std::tie(batch[i - 1].file, batch[i - 1].offset), std::tie(batch[i].file, batch[i].offset));
  }
  EXPECT_GT(multi, 3u);  // batches of several experts were seen
}

// --io-depth: the drives get that many reads in flight (the default
// otherwise), and the output does not change with it.
TEST(StreamingIoDepth, ReadsInFlightAreTheOptionsAndTheOutputIsTheSame) {
  const Outcome ram = run(kModels / "k3_mxfp4", {});
  for (unsigned depth : {0u, 1u, 3u}) {
    LoadOptions o = streamed(6);
    o.io_depth = depth;
    unsigned seen = 0;
    o.storage = [&](const StorageOptions& so) {
      seen = so.queue_depth;
      return make_storage(so);
    };
    const Outcome got = run(kModels / "k3_mxfp4", o);
    expect_identical(ram, got, "io depth " + std::to_string(depth));
    EXPECT_EQ(seen, depth == 0 ? StorageOptions{}.queue_depth : depth);
    EXPECT_GT(got.stats.bytes_read, 0u);
  }
}

// A tuned piece size (strata tune) reaches the storage, and changes nothing
// but how reads are cut.
TEST(StreamingPieceBytes, ReadPiecesAreTheOptionsAndTheOutputIsTheSame) {
  const Outcome ram = run(kModels / "k3_mxfp4", {});
  for (uint64_t piece : {uint64_t{0}, uint64_t{4096}, uint64_t{64} << 10}) {
    LoadOptions o = streamed(6);
    o.piece_bytes = piece;
    uint64_t seen = 0;
    o.storage = [&](const StorageOptions& so) {
      seen = so.piece_bytes;
      return make_storage(so);
    };
    const Outcome got = run(kModels / "k3_mxfp4", o);
    expect_identical(ram, got, "pieces of " + std::to_string(piece));
    EXPECT_EQ(seen, piece == 0 ? kDefaultPieceBytes : piece);
    EXPECT_GT(got.stats.bytes_read, 0u);
  }
}

TEST_P(Streaming, PackedOnTwoDrivesIsBitIdentical) {
  const fs::path dir = GetParam().dir;
  testfiles::TempDir tmp("strata-pack");
  fs::create_directories(tmp / "a");
  fs::create_directories(tmp / "b");
  PackOptions p;
  p.source = dir;
  p.out = tmp / "pack";
  p.drives = {tmp / "a", tmp / "b"};
  pack_model(p);
  const Outcome ram = run(dir, on_device(GetParam(), {}));
  expect_identical(ram, run(p.out, on_device(GetParam(), {})), "packed, all cached");
  const Outcome small = run(p.out, on_device(GetParam(), streamed(2)));
  expect_identical(ram, small, "packed, two slots");
  // Both drives served reads.
  ASSERT_EQ(small.stats.drives.size(), 1u);  // one device here, but two files
  EXPECT_GT(small.stats.bytes_read, 0u);
}

// Ends the job at the first MoE layer it sees routed.
class CancelAtFirstLayer : public RouteObserver {
 public:
  explicit CancelAtFirstLayer(Job& job) : job_(job) {}
  void routed(int64_t layer, size_t, std::span<const Row>, std::span<const int32_t>, size_t) override {
    if (at < 0) at = layer;
    job_.cancel();
  }
  void step_done(std::span<const Row>) override {}
  int64_t at = -1;  // the layer

 private:
  Job& job_;
};

// A long prompt's pass stopped after its first MoE layer (its request
// cancelled; the next layer's guesses in flight, the layer's experts kept
// for its parts) leaves the streamed model as it was: the next request gets
// the in-RAM bits.
TEST_P(Streaming, AStoppedPassLeavesTheNextRequestItsBits) {
  const fs::path dir = GetParam().dir;
  const Outcome ram = run(dir, on_device(GetParam(), {}));
  LoadOptions o = on_device(GetParam(), streamed(5));
  o.threads = 2;
  o.heat = "none";
  o.max_batch = 3;
  o.max_pass = 16;
  o.allow_long_context = true;
  auto m = load_model(dir, o);
  Scheduler s(*m);
  Request first;
  first.prompt = {7, 1, 30, 12, 5, 9, 2, 44, 17, 3, 6, 21};  // four parts
  first.max_tokens = 2;
  auto stopped = s.submit(std::move(first));
  CancelAtFirstLayer cancel(*stopped);
  m->set_route_observer(&cancel);
  s.step();
  m->set_route_observer(nullptr);
  ASSERT_EQ(stopped->finish(), Finish::Cancelled);
  // Where a layer follows that MoE layer, the pass stopped before its end
  // (ds_mtp_trained's only MoE layer is its last: its pass ran to the end).
  ASSERT_GE(cancel.at, 0);
  if (cancel.at + 1 < m->config().num_layers) {
    EXPECT_EQ(stopped->completion_tokens(), 0);
  }
  Request next;
  next.prompt = {5, 17, 3, 42, 9};  // run()'s
  next.max_tokens = 6;
  next.sampling = {1.0f, 11};
  next.keep_logits = true;
  auto job = s.submit(std::move(next));
  while (s.step()) {
  }
  Outcome got;
  std::vector<TokenEvent> events;
  while (job->wait(events)) {
    for (auto& e : events) {
      got.tokens.push_back(e.token);
      got.logits.push_back(std::move(e.logits));
    }
    events.clear();
  }
  expect_identical(ram, got, "after a stopped pass");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Streaming, ::testing::ValuesIn(on_each_device(fixture_moe_model_dirs())),
                         [](const auto& i) { return device_case_name(i.param); });

#if STRATA_HAVE_VULKAN
// Under a RAM budget a GPU's host staging is part of it: the plan counts
// what the backend may hold, the expert cache gets the rest, and the staging
// never holds more, while every expert is read from it (no VRAM cache); the
// bits are those of the same device without a budget. On the CPU there is
// none.
TEST(StreamingVulkan, TheHostStagingIsInTheRamBudget) {
  const fs::path dir = kModels / "ds_mtp";
  LoadOptions gpu;
  gpu.device = parse_device("vulkan");
  gpu.device.vram_bytes = 0;
  const Outcome in_ram = run(dir, gpu);
  LoadOptions o = gpu;
  o.ram_bytes = 1;  // raised to the least that works: two tokens' experts
  o.raise_ram_to_least = true;
  o.heat = "none";
  auto m = load_model(dir, o);
  const MemoryPlan p = m->memory_plan();
  EXPECT_GT(p.staging, 0u);
  EXPECT_EQ(p.staging, m->backend().staging_bytes());
  EXPECT_LE(p.trunk + p.kv + p.step + p.staging + p.baseline + p.cache, p.budget);
  m.reset();
  const Outcome budgeted = run(dir, o);
  expect_identical(in_ram, budgeted, "staging within the budget");
  EXPECT_GT(budgeted.stats.device.staged, 0u);
  EXPECT_GT(budgeted.stats.device.host_staging_bytes, 0u);
  EXPECT_LE(budgeted.stats.device.host_staging_bytes, p.staging);

  LoadOptions cpu = o;
  cpu.device = parse_device("cpu");
  EXPECT_EQ(load_model(dir, cpu)->memory_plan().staging, 0u);
}
#endif

TEST(Pack, GgufSourceStreamsBitIdentical) {
  testfiles::TempDir tmp("strata-pack");
  synth::Request r;
  r.preset = "deepseek-v3";
  r.format = synth::Format::Gguf;
  r.size_gb = 0.02;
  r.quant = "q8_0+mxfp4";
  r.seed = 3;
  const fs::path gguf = tmp / "m.gguf";
  synth::WriteOptions wo;
  wo.threads = 2;
  synth::write(synth::make_plan(r), gguf, wo);
  PackOptions p;
  p.source = gguf;
  p.out = tmp / "pack";
  pack_model(p);
  EXPECT_TRUE(fs::exists(p.out / "trunk.gguf"));
  // Its Q8_0 / MXFP4 experts are stored interleaved, while in place they are
  // interleaved as they land, and in RAM at load: all three give the same bits.
  EXPECT_NE(Manifest::load(p.out).to_json().dump().find("\"interleaved16\""), std::string::npos);
  const Outcome ram = run(gguf, {}, 4);
  expect_identical(ram, run(gguf, streamed(2), 4), "GGUF streamed in place");
  expect_identical(ram, run(p.out, streamed(2), 4), "GGUF packed");
}

TEST(Pack, InterruptedPackResumesToTheSameBytes) {
  const fs::path src = kModels / "ds_noqlora_dense2";
  testfiles::TempDir tmp("strata-pack");
  PackOptions p;
  p.source = src;
  p.out = tmp / "straight";
  pack_model(p);

  PackOptions q = p;
  q.out = tmp / "resumed";
  q.stop_after_layers = 3;
  EXPECT_THROW(pack_model(q), Error);
  EXPECT_FALSE(fs::exists(q.out / "manifest.json"));  // never a half-written manifest
  EXPECT_TRUE(fs::exists(q.out / "pack.progress.json"));
  q.stop_after_layers = -1;
  const PackReport r = pack_model(q);
  EXPECT_EQ(r.layers_resumed, 3);
  EXPECT_FALSE(fs::exists(q.out / "pack.progress.json"));

  const Manifest a = Manifest::load(p.out), b = Manifest::load(q.out);
  EXPECT_EQ(a.to_json()["experts"], b.to_json()["experts"]);
  expect_identical(run(p.out, {}), run(q.out, {}), "resumed pack");
  // Packing again with the same options is a no-op.
  EXPECT_TRUE(pack_model(q).already_packed);
}

TEST(Pack, CorruptBlobIsAClearErrorNamingFileAndOffset) {
  testfiles::TempDir tmp("strata-pack");
  const PackOptions p = pack_qwen_gqa(tmp.path());
  const Manifest m = Manifest::load(p.out);
  const fs::path file = m.drive_file(p.out, 0);
  // Flip one byte inside some expert's weights.
  size_t layer = 0;
  while (m.experts.at(layer).empty()) ++layer;
  const PackedExpert& victim = m.experts[layer].at(1);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(victim.offset + 100));
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(static_cast<std::streamoff>(victim.offset + 100));
    f.write(&c, 1);
  }
  LoadOptions o = streamed(0);
  try {
    // Every expert of every layer is asked for sooner or later with a long enough run.
    auto model = load_model(p.out, o);
    for (int32_t t = 0; t < 40; ++t) {
      GenerateOptions g;
      g.max_new_tokens = 2;
      g.sampling = {1.0f, static_cast<uint64_t>(t)};
      generate(*model, {t, t + 1, t + 2}, g);
    }
    FAIL() << "the corrupt blob was never detected";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file.filename().string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset " + std::to_string(victim.offset)), std::string::npos) << msg;
  }
}

// --verify first hashes every read from the drive (a blob read again may
// have changed since), always hashes cache hits too, off hashes nothing.
TEST(Pack, ChecksumsOnEveryReadFromTheDriveOrEveryUse) {
  testfiles::TempDir tmp("strata-pack");
  const PackOptions p = pack_qwen_gqa(tmp.path());
  LoadOptions o = streamed(2, LoadOptions::Prefetch::Off);
  const Outcome always = run(p.out, [&] { auto a = o; a.verify = LoadOptions::Verify::Always; return a; }(), 12);
  const Outcome first = run(p.out, o, 12);
  const Outcome off = run(p.out, [&] { auto a = o; a.verify = LoadOptions::Verify::Off; return a; }(), 12);
  expect_identical(always, first, "verify first");
  expect_identical(always, off, "verify off");
  EXPECT_EQ(off.stats.bytes_verified, 0u);
  // Two slots: experts are read again and again, and hashed each time.
  const Manifest m = Manifest::load(p.out);
  uint64_t all_blobs = 0;
  for (const auto& layer : m.experts)
    for (const auto& e : layer) all_blobs += e.length;
  EXPECT_GT(first.stats.bytes_read, all_blobs);
  EXPECT_EQ(first.stats.bytes_verified, first.stats.bytes_read);
  EXPECT_GE(always.stats.bytes_verified, always.stats.bytes_read);  // and cache hits (streaming_faults_test.cpp)
}

TEST(Pack, MissingDriveIsAClearError) {
  testfiles::TempDir tmp("strata-pack");
  fs::create_directories(tmp / "drive");
  PackOptions p;
  p.source = kModels / "qwen_gqa";
  p.out = tmp / "pack";
  p.drives = {tmp / "drive"};
  pack_model(p);
  fs::remove_all(tmp / "drive");
  try {
    load_model(p.out, {});
    FAIL() << "loaded without its drive";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pack drive 0"), std::string::npos) << e.what();
  }
}

TEST(Pack, DamagedManifestIsAClearError) {
  testfiles::TempDir tmp("strata-pack");
  const PackOptions p = pack_qwen_gqa(tmp.path());
  const std::string text = [&] {
    std::ifstream f(p.out / "manifest.json");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  for (size_t cut : {size_t{10}, text.size() / 2, text.size() - 3}) {
    std::ofstream(p.out / "manifest.json") << text.substr(0, cut);
    EXPECT_THROW(load_model(p.out, {}), Error) << "cut at " << cut;
  }
}

TEST(Budget, TooSmallARamBudgetSaysWhatItNeeds) {
  LoadOptions o;
  o.ram_bytes = 1 << 20;
  try {
    load_model(kModels / "qwen_gqa", o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the least that works is"), std::string::npos) << e.what();
  }
}

TEST(Placement, SplitsEachLayerByDriveBandwidth) {
  const std::vector<uint32_t> even = place_layer({1, 1}, std::vector<double>(64, 1.0));
  EXPECT_EQ(std::count(even.begin(), even.end(), 0u), 32);
  const std::vector<uint32_t> fast_slow = place_layer({3, 1}, std::vector<double>(64, 1.0));
  EXPECT_EQ(std::count(fast_slow.begin(), fast_slow.end(), 0u), 48);
  // With heat, the expected reads (not the expert counts) split evenly.
  std::vector<double> heat(64, 0.0);
  heat[0] = 100;
  heat[1] = 100;
  const std::vector<uint32_t> hot = place_layer({1, 1}, heat);
  EXPECT_NE(hot[0], hot[1]);
}

// The run counts a one-token step's guesses (a decode token's, and a
// one-token prompt's) into the heat as its own stats count them, the wrong
// ones by expert, and not a
// step of several rows' (`strata budget` predicts a decode token's reads
// from them); a second run adds its own.
TEST(Heat, AOneTokenStepsGuessesAreCountedInIt) {
  testfiles::TempDir tmp("strata-heat-guesses");
  const fs::path dir = kModels / "ds_yarn_grouped";
  uint64_t before = 0, before_right = 0;
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{5}, std::vector<int32_t>{5}, std::vector<int32_t>{5, 17, 3, 42, 9}}) {
    SCOPED_TRACE(prompt.size());
    const fs::path path = tmp / (prompt.size() == 1 ? "one.json" : "five.json");
    LoadOptions o = streamed(4);
    o.threads = 2;
    o.heat = path.string();
    auto m = load_model(dir, o);
    GenerateOptions g;
    g.max_new_tokens = 8;
    g.sampling = {1.0f, 11};
    generate(*m, prompt, g);
    ASSERT_EQ(m->save_heat(), "");
    const ExpertStats s = m->expert_stats();
    const ExpertHeat heat =
        ExpertHeat::load(path, m->identity(), m->config().num_layers, m->config().n_routed_experts);
    const ExpertHeat::Guesses h = heat.guesses();
    ASSERT_GT(s.predicted, 0u);
    // The wrong ones by expert: each guess the layer's router did not pick,
    // in MoE layers only.
    EXPECT_EQ(heat.wrong_total(), h.predicted - h.right);
    for (int64_t l = 0; l < m->config().num_layers; ++l)
      if (!m->config().layer_is_moe(l)) {
        for (int64_t e = 0; e < m->config().n_routed_experts; ++e) EXPECT_EQ(heat.wrong(l, e), 0);
      }
    if (prompt.size() == 1) {
      EXPECT_EQ(h.predicted, static_cast<double>(before + s.predicted));
      EXPECT_EQ(h.right, static_cast<double>(before_right + s.predicted_right));
      EXPECT_GT(s.predicted_right, 0u);
      EXPECT_GT(heat.wrong_total(), 0);
      before += s.predicted;
      before_right += s.predicted_right;
    } else {
      EXPECT_GT(h.predicted, 0);
      EXPECT_LT(h.predicted, static_cast<double>(s.predicted));  // the five-row prompt step's are not
      EXPECT_LT(h.right, static_cast<double>(s.predicted_right));
    }
  }
}

TEST(Heat, PinnedRunsStayBitIdentical) {
  testfiles::TempDir tmp("strata-heat");
  const fs::path dir = kModels / "ds_yarn_grouped";
  LoadOptions o = streamed(4);
  o.heat = (tmp / "heat.json").string();
  const Outcome first = run(dir, o);
  ASSERT_TRUE(fs::exists(tmp / "heat.json")) ;
  const Outcome second = run(dir, o);  // starts with pinned hot experts
  expect_identical(first, second, "second run with heat");
  EXPECT_GT(second.stats.pinned, 0u);
}

}  // namespace
}  // namespace strata
