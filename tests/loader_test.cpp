// The loader's decisions (runtime/loader.h): the context a model was trained
// for, the KV caches of every sequence in the budget, a budget raised to the
// least that works when asked, and the memory available.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/loader.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";

std::string error_of(const fs::path& dir, const LoadOptions& o) {
  try {
    load_model(dir, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// STRATA_MEMORY_AVAILABLE for the length of a test.
class FakeAvailableMemory {
 public:
  explicit FakeAvailableMemory(uint64_t bytes) { ::setenv("STRATA_MEMORY_AVAILABLE", std::to_string(bytes).c_str(), 1); }
  ~FakeAvailableMemory() { ::unsetenv("STRATA_MEMORY_AVAILABLE"); }
};

TEST(Loader, TheDefaultContextIsTheTrainedLengthWhenShorter) {
  EXPECT_EQ(load_model(kModels / "qwen_gqa")->context(), 128);  // max_position_embeddings 128
  LoadOptions o;
  o.context = 64;
  EXPECT_EQ(load_model(kModels / "qwen_gqa", o)->context(), 64);
}

TEST(Loader, AContextBeyondTheTrainedLengthIsRefusedUnlessAllowed) {
  LoadOptions o;
  o.context = 129;
  const std::string why = error_of(kModels / "qwen_gqa", o);
  EXPECT_NE(why.find("max_position_embeddings"), std::string::npos) << why;
  EXPECT_NE(why.find("--allow-long-ctx"), std::string::npos) << why;
  o.allow_long_context = true;
  EXPECT_EQ(load_model(kModels / "qwen_gqa", o)->context(), 129);
}

// The least budget that works, with one sequence and with eight: the
// difference is seven more KV caches at the full context.
TEST(Loader, TheBudgetHoldsAKvCacheForEverySequence) {
  LoadOptions o;
  o.ram_bytes = 1;
  o.raise_ram_to_least = true;
  o.context = 128;
  const MemoryPlan one = load_model(kModels / "qwen_gqa", o)->memory_plan();
  o.sequences = 8;
  const MemoryPlan eight = load_model(kModels / "qwen_gqa", o)->memory_plan();
  ASSERT_GT(one.kv, 0u);
  EXPECT_EQ(eight.kv, 8 * one.kv);
  // The budget was raised to the least that works (the baselines, measured
  // at each load, may differ).
  EXPECT_EQ((eight.budget - eight.baseline) - (one.budget - one.baseline), 7 * one.kv);
  // Without raising, the same budget is refused and the refusal counts the sequences.
  o.raise_ram_to_least = false;
  o.ram_bytes = one.budget;
  const std::string why = error_of(kModels / "qwen_gqa", o);
  EXPECT_NE(why.find("each of 8 sequences"), std::string::npos) << why;
}

// A model with recurrent state (Kimi K3's KDA layers) keeps copies of its
// states: one for a kept session, and with a drafter one per sequence from
// before each drafted step (rolled back on a rejection). Both count in the
// KV budget; a model without recurrent state keeps none.
TEST(Loader, TheBudgetHoldsTheStateSnapshotsOfSessionsAndDrafting) {
  LoadOptions o;
  o.ram_bytes = 1;
  o.raise_ram_to_least = true;
  o.context = 128;
  o.sequences = 3;
  auto plain = load_model(kModels / "k3_bf16", o);
  const uint64_t snapshot = plain->cache_snapshot_bytes(), kv = plain->memory_plan().kv;
  ASSERT_GT(snapshot, 0u);
  o.drafting = true;
  EXPECT_EQ(load_model(kModels / "k3_bf16", o)->memory_plan().kv, kv + 3 * snapshot);
  o.keep_session = true;
  EXPECT_EQ(load_model(kModels / "k3_bf16", o)->memory_plan().kv, kv + 4 * snapshot);
  o.drafting = false;
  EXPECT_EQ(load_model(kModels / "k3_bf16", o)->memory_plan().kv, kv + snapshot);
  LoadOptions q = o;
  q.keep_session = false;
  const uint64_t qwen = load_model(kModels / "qwen_gqa", q)->memory_plan().kv;
  q.drafting = true;
  EXPECT_EQ(load_model(kModels / "qwen_gqa", q)->memory_plan().kv, qwen);
}

// Too little memory available even to stream it: refused before anything
// is read, naming the least that works. (A model streamed because it does
// not fit: BiggerThanMemory in cli_first_hour_test.cpp, on a model whose
// experts outweigh its buffers, which the fixtures' do not.)
TEST(Loader, TooLittleMemoryAvailableIsRefusedWithTheLeastThatWorks) {
  const FakeAvailableMemory fake(1);
  std::vector<std::string> notices;
  LoadOptions o;
  o.notice = [&](const std::string& s) { notices.push_back(s); };
  const std::string why = error_of(kModels / "qwen_gqa", o);
  EXPECT_NE(why.find("of memory available"), std::string::npos) << why;
  EXPECT_NE(why.find("the least that works is"), std::string::npos) << why;
  EXPECT_TRUE(notices.empty()) << "no 'streaming' line before a refusal: " << notices[0];
}

TEST(Loader, TheMemoryAvailableCanBeFakedForTests) {
  const FakeAvailableMemory fake(12345);
  EXPECT_EQ(available_memory_bytes(), 12345u);
}

TEST(Loader, TheMemoryAvailableIsMeasured) {
  const uint64_t a = available_memory_bytes();
  EXPECT_GT(a, 0u);
  EXPECT_LT(a, UINT64_MAX);  // /proc/meminfo is there on Linux
}

}  // namespace
}  // namespace strata
