// Batch invariance across the ways a position can be computed (issue 5): in
// a prefill of any chunk size, in one batch with the tokens after it, or one
// token at a time; and sliding-window layers that keep only a ring of their
// window give the same bits as keeping everything.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "synth/synth.h"
#include "safetensors_writer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> fixtures() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(fs::path(STRATA_FIXTURES_DIR) / "models"))
    if (fs::exists(e.path() / "config.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

LoadOptions opts(int threads, int64_t max_batch = 0) {
  LoadOptions o;
  o.threads = threads;
  o.max_batch = max_batch;
  return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class BatchInvariance : public ::testing::TestWithParam<fs::path> {};

// generate(P, n=8).logits[k] == generate(P + G[:k], n=1).logits[0], bit for
// bit, G being the generated tokens; the short runs use another thread count
// and prefill in chunks of 3.
TEST_P(BatchInvariance, GeneratedLogitsEqualOneStepRunsOnTheExtendedPrompt) {
  const std::vector<int32_t> prompt = {7, 1, 30, 12, 5, 9, 2};
  auto a = load_model(GetParam(), opts(2));
  GenerateOptions g;
  g.max_new_tokens = 8;
  g.keep_logits = true;
  g.sampling = {1.0f, 3};  // sampled, so the continuation is not a greedy loop
  const GenerateResult full = generate(*a, prompt, g);
  ASSERT_EQ(full.logits.size(), 8u);

  auto b = load_model(GetParam(), opts(1, 3));
  GenerateOptions one;
  one.max_new_tokens = 1;
  one.keep_logits = true;
  for (size_t k = 0; k < full.tokens.size(); ++k) {
    std::vector<int32_t> p = prompt;
    p.insert(p.end(), full.tokens.begin(), full.tokens.begin() + static_cast<long>(k));
    const GenerateResult r = generate(*b, p, one);
    ASSERT_TRUE(same_bits(full.logits[k], r.logits[0])) << "k = " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<fs::path>& i) { return i.param.filename().string(); });

TEST(SlidingWindow, RingCacheGivesTheSameBitsAsAFullCache) {
  const fs::path dir = fs::path(STRATA_FIXTURES_DIR) / "models" / "gptoss_bf16";
  auto full = load_model(dir, opts(2));
  auto ring = load_model(dir, opts(2, 2));
  ASSERT_TRUE(full->config().sliding_window.has_value());
  GenerateOptions g;
  g.max_new_tokens = static_cast<int>(*full->config().sliding_window) * 3;  // well past the window
  g.keep_logits = true;
  g.sampling = {1.0f, 9};
  const std::vector<int32_t> prompt = {3, 4, 5, 6, 7, 8, 9};
  const GenerateResult a = generate(*full, prompt, g), b = generate(*ring, prompt, g);
  ASSERT_EQ(a.tokens, b.tokens);
  for (size_t k = 0; k < a.logits.size(); ++k) ASSERT_TRUE(same_bits(a.logits[k], b.logits[k])) << k;
  // The ring really is smaller than the positions written.
  auto cache = ring->new_cache();
  cache->ensure(64);
  auto cache_full = full->new_cache();
  cache_full->ensure(64);
  EXPECT_LT(cache->bytes(), cache_full->bytes());
}

TEST(Context, APromptLongerThanTheContextIsAClearError) {
  LoadOptions o = opts(2);
  o.context = 4;
  auto m = load_model(fs::path(STRATA_FIXTURES_DIR) / "models" / "qwen_gqa", o);
  GenerateOptions g;
  g.max_new_tokens = 4;
  try {
    generate(*m, {1, 2, 3, 4, 5}, g);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("raise --ctx"), std::string::npos) << e.what();
  }
  // A prompt that fits generates until the context is full.
  const GenerateResult r = generate(*m, {1, 2, 3}, g);
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_TRUE(r.context_full);
}

// A prompt that extends the previous sequence reuses its KV, in memory and
// through a session file, with the same bits as computing it afresh.
TEST_P(BatchInvariance, PrefixReuseGivesTheSameBits) {
  testfiles::TempDir tmp("strata-session");
  const fs::path file = tmp / "s.bin";
  auto m = load_model(GetParam(), opts(2));
  GenerateOptions g;
  g.max_new_tokens = 4;
  g.keep_logits = true;
  g.sampling = {1.0f, 5};
  const std::vector<int32_t> first = {4, 8, 15, 16, 23};
  Session s;
  const GenerateResult r1 = generate(*m, first, g, s);
  EXPECT_EQ(r1.reused_tokens, 0);
  save_session(file, *m, s);

  std::vector<int32_t> second = first;
  second.insert(second.end(), r1.tokens.begin(), r1.tokens.end());
  second.push_back(42);
  Session loaded = load_session(file, *m);
  const GenerateResult again = generate(*m, second, g, loaded);
  EXPECT_EQ(again.reused_tokens, static_cast<int64_t>(first.size() + r1.tokens.size() - 1));
  Session fresh;
  const GenerateResult cold = generate(*load_model(GetParam(), opts(1)), second, g, fresh);
  EXPECT_EQ(cold.reused_tokens, 0);
  ASSERT_EQ(again.tokens, cold.tokens);
  for (size_t k = 0; k < cold.logits.size(); ++k) ASSERT_TRUE(same_bits(again.logits[k], cold.logits[k])) << k;
  // A prompt that diverges early reuses only the common part; a recurrent
  // state (Kimi K3's KDA layers) holds only its latest position, so there
  // nothing is reused.
  Session after = std::move(loaded);
  const GenerateResult other = generate(*m, {4, 8, 99, 1}, g, after);
  EXPECT_EQ(other.reused_tokens, m->config().kda_layers.empty() ? 2 : 0);
}

// A real 32k-token context (a long test): the KV cache holds exactly the
// rows the attention kind implies, and the logits at positions 4095, 16383
// and 32767 of one prompt agree with transformers' full forward of it
// (tools/make_long_context_reference.py; GQA and MLA fixtures).
class LongContext : public ::testing::TestWithParam<std::string> {};

TEST_P(LongContext, KvBytesAndLogitsAt32kTokensMatchTransformers) {
  const fs::path ref_dir = fs::path(STRATA_FIXTURES_DIR) / "long_context" / GetParam();
  std::ifstream rf(ref_dir / "reference.json");
  const auto ref = nlohmann::json::parse(rf);
  const int64_t n = ref["n_tokens"].get<int64_t>(), V = ref["vocab_size"].get<int64_t>();
  const auto want_rows = ref["rows"].get<std::vector<int64_t>>();
  std::vector<float> want(want_rows.size() * V);
  std::ifstream lf(ref_dir / ref["logits_file"].get<std::string>(), std::ios::binary);
  lf.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(float)));
  ASSERT_TRUE(lf.good());

  LoadOptions o = opts(2);
  o.context = n;
  auto m = load_model(fs::path(STRATA_FIXTURES_DIR) / "models" / GetParam(), o);
  ASSERT_EQ(m->config().vocab_size, V);
  auto cache = m->new_cache();
  std::vector<float> got(want.size());
  size_t next = 0;
  for (int64_t start = 0; start < n; start += 1024) {
    std::vector<Row> rows;
    for (int64_t i = start; i < std::min(n, start + 1024); ++i) {
      const bool wanted = std::find(want_rows.begin(), want_rows.end(), i) != want_rows.end();
      rows.push_back(Row{static_cast<int32_t>((7919 * i + 13) % V), i, cache.get(), wanted});
    }
    std::vector<float> logits(V * 2);
    m->forward(rows, logits.data());
    for (const Row& r : rows)
      if (r.want_logits) std::memcpy(&got[next++ * V], logits.data(), V * sizeof(float));
  }
  ASSERT_EQ(next, want_rows.size());
  // f32 rows: K and V per KV head (GQA), or the latent and rope key (MLA).
  const ModelConfig& c = m->config();
  const int64_t per_token = c.kv_lora_rank > 0 ? c.kv_lora_rank + c.qk_rope_head_dim : 2 * c.num_kv_heads * c.head_dim;
  EXPECT_EQ(cache->length(), n);
  EXPECT_EQ(cache->bytes(), static_cast<uint64_t>(c.num_layers * n * per_token * 4));
  for (size_t k = 0; k < want_rows.size(); ++k) {
    float worst = 0;
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(got[k * V + v] - want[k * V + v]));
    EXPECT_LE(worst, 1e-3f) << "position " << want_rows[k];
  }
}

// Minutes each on two cores: one GQA and one MLA model.
INSTANTIATE_TEST_SUITE_P(Fixtures, LongContext, ::testing::Values("qwen_gqa", "ds_yarn_grouped"));

TEST(Session, DamagedOrForeignFilesAreHandled) {
  testfiles::TempDir tmp("strata-session");
  auto m = load_model(fs::path(STRATA_FIXTURES_DIR) / "models" / "qwen_gqa", opts(2));
  std::ofstream(tmp / "junk.bin") << "not a session";
  EXPECT_THROW(load_session(tmp / "junk.bin", *m), Error);
  EXPECT_FALSE(load_session(tmp / "absent.bin", *m).cache);
  // Another model's session is ignored with a note, not an error.
  auto other = load_model(fs::path(STRATA_FIXTURES_DIR) / "models" / "ds_yarn_grouped", opts(2));
  Session s;
  GenerateOptions g;
  g.max_new_tokens = 2;
  generate(*other, {1, 2, 3}, g, s);
  save_session(tmp / "other.bin", *other, s);
  std::string why;
  EXPECT_FALSE(load_session(tmp / "other.bin", *m, &why).cache);
  EXPECT_FALSE(why.empty());
  // Truncated files are errors.
  const auto bytes = fs::file_size(tmp / "other.bin");
  fs::resize_file(tmp / "other.bin", bytes / 2);
  EXPECT_THROW(load_session(tmp / "other.bin", *other), Error);
}

}  // namespace
}  // namespace strata
