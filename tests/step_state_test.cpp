// The step state (model/step_state.h) and the backend seam (backend/backend.h):
// the forward pass allocates nothing once a model is loaded, what the memory
// plan counts for the step is exactly what was allocated, a budget narrows the
// step to its share, and a step wider than planned runs in parts with the
// same bits. The process-memory probe the budget measures its baseline with
// agrees with the kernel.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "heap_counter.h"
#include "model/model.h"
#include "runtime/loader.h"
#include "same_bits.h"
#include "util/error.h"
#include "util/process_memory.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";

std::unique_ptr<Model> load(const fs::path& dir, int64_t max_batch = 0, uint64_t ram = 0, int64_t max_pass = 0) {
  LoadOptions o;
  o.threads = 2;
  o.max_batch = max_batch;
  o.max_pass = max_pass;
  o.ram_bytes = ram;
  o.heat = "none";
  return load_model(dir, o);
}

// Rows of one sequence at positions from.., the last wanting logits.
std::vector<Row> rows_of(KvCache& cache, int64_t from, int64_t count, bool all_logits = false) {
  std::vector<Row> rows;
  for (int64_t i = 0; i < count; ++i)
    rows.push_back(Row{static_cast<int32_t>(3 + 7 * (from + i)), from + i, &cache, all_logits || i + 1 == count});
  return rows;
}

class StepStateTest : public ::testing::TestWithParam<const char*> {};

// Decode steps and prefill chunks, in RAM, after one warm-up step: not one
// heap allocation on any thread (the step state, the backend's scratch and
// the in-memory provider's fetch are all planned).
TEST_P(StepStateTest, ForwardPassAllocatesNothing) {
  auto m = load(kModels / GetParam());
  auto cache = m->new_cache();
  std::vector<float> logits(8 * static_cast<size_t>(m->config().vocab_size));
  const std::vector<Row> warm = rows_of(*cache, 0, 8, true);
  m->forward(warm, logits.data());  // the cache takes its first positions here
  const uint64_t before = testing::heap_allocations();
  const std::vector<Row> chunk = rows_of(*cache, 8, 6, true);
  const std::vector<Row> decode = rows_of(*cache, 14, 1);
  const uint64_t built = testing::heap_allocations();  // the row vectors themselves
  m->forward(chunk, logits.data());
  m->forward(decode, logits.data());
  EXPECT_EQ(testing::heap_allocations() - built, 0u) << "(the test's own rows took " << built - before << ")";
}

// A pass of several parts (steps of 3 rows, passes of 8) allocates nothing
// either: its residual stream and banked blocks are planned with the step.
TEST_P(StepStateTest, PassOfSeveralPartsAllocatesNothing) {
  auto m = load(kModels / GetParam(), 3, 0, 8);
  ASSERT_EQ(m->max_batch_rows(), 3);
  ASSERT_EQ(m->max_pass_rows(), 8);
  EXPECT_EQ(m->step_bytes(), m->allocated_step_bytes());
  auto cache = m->new_cache();
  std::vector<float> logits(8 * static_cast<size_t>(m->config().vocab_size));
  m->forward(rows_of(*cache, 0, 8, true), logits.data());
  const std::vector<Row> pass = rows_of(*cache, 8, 7, true);
  const uint64_t built = testing::heap_allocations();
  m->forward(pass, logits.data());
  EXPECT_EQ(testing::heap_allocations() - built, 0u);
}

// Handing out hidden states and running the next-token-prediction layer
// (a drafter's work, between steps) allocate nothing either.
TEST(StepStateMtp, HiddenStatesAndTheMtpLayerAllocateNothing) {
  auto m = load(kModels / "ds_mtp");
  auto cache = m->new_cache(), mtp = m->new_mtp_cache();
  const size_t vocab = static_cast<size_t>(m->config().vocab_size), hidden = static_cast<size_t>(m->config().hidden_size);
  std::vector<float> logits(8 * vocab), states(8 * hidden), out(8 * hidden);
  std::vector<Row> warm = rows_of(*cache, 0, 8, true), warm_mtp = rows_of(*mtp, 0, 8, true);
  for (Row& r : warm) r.want_hidden = true;
  m->forward(warm, logits.data(), states.data());
  m->mtp_forward(0, warm_mtp, states.data(), logits.data(), out.data());
  std::vector<Row> chunk = rows_of(*cache, 8, 6, true), chunk_mtp = rows_of(*mtp, 8, 6, true);
  for (Row& r : chunk) r.want_hidden = true;
  const uint64_t built = testing::heap_allocations();
  m->forward(chunk, logits.data(), states.data());
  m->mtp_forward(0, chunk_mtp, states.data(), logits.data(), out.data());
  EXPECT_EQ(testing::heap_allocations() - built, 0u);
}

// What the plan counts for the step is what attach_experts() allocated.
TEST_P(StepStateTest, PlannedBytesAreAllocatedBytes) {
  auto m = load(kModels / GetParam(), 48);
  EXPECT_EQ(m->step_bytes(), m->allocated_step_bytes());
  EXPECT_LT(m->step_bytes(8), m->step_bytes(48));
}

// Under a budget, the step's buffers (beyond a one-row step's) get a
// sixteenth of it and 128 MiB at least: the widest step within that (16 to
// 4096 rows); a pass's residual stream beyond the step's gets a
// thirty-second and 64 MiB at least: a pass over the whole context where
// that holds it. Both are counted in the memory plan with the process's
// measured baseline.
TEST_P(StepStateTest, BudgetNarrowsTheStepToItsShare) {
  auto m = load(kModels / GetParam(), 0, uint64_t{1} << 30);
  const uint64_t share = uint64_t{128} << 20;
  const int64_t rows = m->max_batch_rows(), pass = m->max_pass_rows();
  EXPECT_EQ(rows, widest_step_within(*m, share));
  // The fixtures' streams are small: the pass spans the context (and is
  // never narrower than the step).
  EXPECT_EQ(pass, std::max(m->context(), rows));
  const size_t r = static_cast<size_t>(rows);
  EXPECT_LE(m->step_bytes() - m->step_bytes(r, r), uint64_t{64} << 20);
  EXPECT_EQ(m->memory_plan().step, m->step_bytes());
  EXPECT_GT(m->memory_plan().baseline, 0u);
  // The search, on shares that end between two step sizes (steps alone: passes as wide).
  const uint64_t one_row = m->step_bytes(1);
  for (size_t rows : {16, 17, 100, 1000, 4095}) {
    EXPECT_EQ(widest_step_within(*m, m->step_bytes(rows) - one_row), static_cast<int64_t>(rows));
    EXPECT_EQ(widest_step_within(*m, m->step_bytes(rows + 1) - one_row - 1), static_cast<int64_t>(rows));
  }
  EXPECT_EQ(widest_step_within(*m, 0), 16);
  EXPECT_EQ(widest_step_within(*m, m->step_bytes(4096) - one_row), 4096);
}

// The plan's search on a pass share that cannot span the context: the
// widest step within the step's share, then the widest pass whose stream
// beyond that step's fits the pass's share.
TEST_P(StepStateTest, PassAndStepEachGetTheirShare) {
  auto m = load(kModels / GetParam());
  auto bytes = [&](size_t rows, size_t span) { return m->step_bytes(rows, span); };
  const uint64_t share = bytes(40, 40) - bytes(1, 1);  // a step of 40 rows
  const uint64_t pass_share = bytes(40, 100) - bytes(40, 40);  // and a pass of 100
  const StepPlan plan = plan_step_within(bytes, share, pass_share, 4096, 0);
  EXPECT_EQ(plan.rows, 40);
  EXPECT_EQ(plan.pass, 100);
  // A context shorter than that: the pass spans it, never narrower than the step.
  EXPECT_EQ(plan_step_within(bytes, share, pass_share, 60, 0).pass, 60);
  EXPECT_EQ(plan_step_within(bytes, share, pass_share, 20, 0).pass, 40);
  // A cap holds the step's rows; the pass then gets the share beside the narrower step.
  const StepPlan capped = plan_step_within(bytes, share, pass_share, 4096, 20);
  EXPECT_EQ(capped.rows, 20);
  EXPECT_LE(bytes(20, static_cast<size_t>(capped.pass)) - bytes(20, 20), pass_share);
  EXPECT_GT(bytes(20, static_cast<size_t>(capped.pass) + 1) - bytes(20, 20), pass_share);
  // A pass given (--prefill-pass): that many rows, up to the context; 1: steps alone.
  EXPECT_EQ(plan_step_within(bytes, share, pass_share, 4096, 0, 1).pass, 40);
  EXPECT_EQ(plan_step_within(bytes, share, pass_share, 4096, 0, 1000).pass, 1000);
  EXPECT_EQ(plan_step_within(bytes, share, pass_share, 500, 0, 1000).pass, 500);
}

// Five sequences decoding in one call on a model planned for steps of two
// rows: run as three steps, the logits are those of the same rows in one step.
TEST_P(StepStateTest, WiderStepRunsInPartsWithTheSameBits) {
  auto narrow = load(kModels / GetParam(), 2);
  auto wide = load(kModels / GetParam());
  const size_t vocab = static_cast<size_t>(wide->config().vocab_size);
  auto run = [&](Model& m) {
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<Row> rows;
    std::vector<float> scratch(vocab);
    for (int s = 0; s < 5; ++s) {
      caches.push_back(m.new_cache());
      m.prefill(std::vector<int32_t>{1, 2 + s, 3}, 0, *caches.back(), scratch.data());
      rows.push_back(Row{7 + s, 3, caches.back().get(), s != 2});  // one row without logits
    }
    std::vector<float> logits(4 * vocab);
    m.forward(rows, logits.data());
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < 4; ++i) out.emplace_back(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
    return out;
  };
  expect_same_logits(run(*wide), run(*narrow));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepStateTest,
                         ::testing::Values("qwen_gqa", "ds_yarn_grouped", "ds_noqlora_dense2", "gptoss_mxfp4",
                                           "ds_fp8", "ds_mtp"),
                         [](const auto& info) { return std::string(info.param); });

// A snapshot brings a sequence back (a speculative step rolled back): after
// decoding three tokens and restoring, the next token's logits are the bits
// it had straight after the snapshot, recurrent states (Kimi K3) included;
// a snapshot from another cache, or ahead of the cache, is refused.
TEST(KvCacheSnapshot, RestoreGivesTheSameBitsAgain) {
  for (const char* name : {"k3_bf16", "k3_mxfp4", "qwen_gqa", "gptoss_mxfp4", "ds_yarn_grouped"}) {
    SCOPED_TRACE(name);
    auto m = load(kModels / name);
    const size_t vocab = static_cast<size_t>(m->config().vocab_size);
    auto cache = m->new_cache();
    std::vector<float> first(vocab), again(vocab), scratch(vocab);
    ASSERT_TRUE(m->prefill(std::vector<int32_t>{3, 9, 27, 81, 5}, 0, *cache, scratch.data()));
    const auto snap = cache->snapshot();
    EXPECT_EQ(snap->length(), 5);
    const Row next{11, 5, cache.get(), true};
    m->forward(std::span<const Row>(&next, 1), first.data());
    for (int32_t t : {12, 13}) {
      const Row r{t, cache->length(), cache.get(), true};
      m->forward(std::span<const Row>(&r, 1), scratch.data());
    }
    EXPECT_EQ(cache->length(), 8);
    cache->restore(*snap);
    EXPECT_EQ(cache->length(), 5);
    m->forward(std::span<const Row>(&next, 1), again.data());
    EXPECT_EQ(0, std::memcmp(first.data(), again.data(), vocab * sizeof(float)));
    auto other = m->new_cache();
    EXPECT_THROW(other->restore(*snap), Error);
    const auto ahead = cache->snapshot();
    cache->restore(*snap);
    EXPECT_THROW(cache->restore(*ahead), Error);
  }
}

// A bad row anywhere in a step wider than planned (run in parts) is refused
// before any part runs: no cache moves.
TEST(StepState, BadRowChangesNoCache) {
  auto m = load(kModels / "qwen_gqa", 2);
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<Row> rows;
  for (int s = 0; s < 5; ++s) {
    caches.push_back(m->new_cache());
    rows.push_back(Row{3 + s, 0, caches.back().get(), true});
  }
  rows.back().token = static_cast<int32_t>(m->config().vocab_size);
  std::vector<float> logits(5 * static_cast<size_t>(m->config().vocab_size));
  EXPECT_THROW(m->forward(rows, logits.data()), Error);
  for (const auto& c : caches) EXPECT_EQ(c->length(), 0);
}

// The CPU backend refuses a row past the context it was planned for (with a
// cache that would take it) instead of reading past its scratch.
TEST(CpuBackend, RefusesPositionsPastThePlannedContext) {
  auto b = make_cpu_backend(2);
  StepLimits l;
  l.rows = 4;
  l.context = 16;
  l.widest_in = 64;
  l.hidden = 32;
  b->plan(l);
  auto cache = b->new_cache(CacheShape{1, 16, 16, 4096, {}, 4});
  cache->ensure(2001);
  const Tensor q = b->allocate(16), k = b->allocate(16), v = b->allocate(16), out = b->allocate(16);
  const Rope rope(RopeConfig{}, 16, false);
  const std::vector<Row> rows{Row{1, 2000, cache.get(), true}};
  GqaAttend op;
  op.rows = rows;
  op.q = q;
  op.k = k;
  op.v = v;
  op.out = out;
  op.heads = op.kv_heads = 1;
  op.head_dim = 16;
  op.rope = &rope;
  EXPECT_THROW(b->gqa_attention(op), Error);
  const std::vector<Row> inside{Row{1, 10, cache.get(), true}};
  op.rows = inside;
  EXPECT_NO_THROW(b->gqa_attention(op));
}

// An exception in one range of a parallel loop reaches the caller after every
// range has run, and the pool keeps working.
TEST(ThreadPool, ExceptionReachesTheCallerAfterTheLoop) {
  ThreadPool pool(4);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for_indexed(64,
                                         [&](int, size_t b, size_t e) {
                                           ran += static_cast<int>(e - b);
                                           if (b == 0) throw Error("range 0 failed");
                                         }),
               Error);
  EXPECT_EQ(ran.load(), 64);
  std::atomic<int> again{0};
  pool.parallel_for(64, [&](size_t b, size_t e) { again += static_cast<int>(e - b); });
  EXPECT_EQ(again.load(), 64);
}

TEST(ProcessMemory, CountsTouchedAnonymousMemory) {
  const uint64_t before = resident_anonymous_bytes();
  ASSERT_GT(before, 0u);
  const size_t bytes = size_t{64} << 20;
  std::unique_ptr<char[]> block(new char[bytes]);
  std::memset(block.get(), 1, bytes);
  const uint64_t after = resident_anonymous_bytes();
  EXPECT_GE(after, before + bytes * 9 / 10);
  EXPECT_EQ(block[bytes - 1], 1);
}

}  // namespace
}  // namespace strata
