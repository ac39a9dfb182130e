// Weights that hold NaN or Inf give non-finite logits; sampled, they would
// give some token (greedy: the first) and a run that ends with exit status 0.
// Instead the sequence ends with one clear error naming the position: `strata
// generate` exits 1, the server answers that request with a 500 (it reports
// any sequence that ends with an error so), and sequences that share its
// steps get their own bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli_support.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/scheduler.h"
#include "same_bits.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Writes a bf16 NaN over element `index` of `tensor` in a safetensors file.
void poke_nan(const fs::path& file, const std::string& tensor, int64_t index) {
  uint64_t at = 0;
  {
    SafetensorsFile f(file);
    const TensorView* t = f.find(tensor);
    ASSERT_NE(t, nullptr) << tensor;
    ASSERT_EQ(t->dtype, DType::BF16);
    ASSERT_LT(index, t->numel());
    at = t->offset + static_cast<uint64_t>(index) * 2;
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  const char nan_bf16[2] = {static_cast<char>(0xc0), 0x7f};  // 0x7fc0, little-endian
  f.write(nan_bf16, 2);
  ASSERT_TRUE(f.good());
}

struct SeqRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  Finish finish = Finish::Running;
  std::string error;
};

SeqRun collect(Job& job) {
  SeqRun r;
  std::vector<TokenEvent> batch;
  while (job.wait(batch, 0)) {
    for (auto& e : batch) {
      r.tokens.push_back(e.token);
      r.logits.push_back(std::move(e.logits));
    }
    batch.clear();
  }
  r.finish = job.finish();
  if (r.finish == Finish::Error) r.error = job.error();
  return r;
}

Request sampled(std::vector<int32_t> prompt, uint64_t seed) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = 6;
  r.sampling = {1.0f, seed};
  r.keep_logits = true;
  return r;
}

std::unique_ptr<Model> load(const fs::path& dir) {
  LoadOptions o(2);
  o.heat = "none";
  return load_model(dir, o);
}

class NonFiniteLogits : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(clitest::fixture("qwen_gqa"), dir_.path(), fs::copy_options::recursive);
    // The clean model's run of the bystander; the poisoned token is one it
    // never sees, so poisoning leaves its run as it is.
    auto m = load(dir_.path());
    Scheduler s(*m);
    auto job = s.submit(sampled(bystander_, 7));
    while (s.step()) {
    }
    clean_ = collect(*job);
    ASSERT_EQ(clean_.finish, Finish::Length);
    while (std::count(bystander_.begin(), bystander_.end(), poisoned_) ||
           std::count(clean_.tokens.begin(), clean_.tokens.end(), poisoned_))
      ++poisoned_;
    // One weight: the first element of the poisoned token's embedding row.
    poke_nan(dir_.path() / "model.safetensors", "model.embed_tokens.weight",
             static_cast<int64_t>(poisoned_) * m->config().hidden_size);
  }

  testfiles::TempDir dir_{"strata-nan"};
  const std::vector<int32_t> bystander_ = {5, 17, 3, 42, 9};
  int32_t poisoned_ = 20;
  SeqRun clean_;
};

TEST_F(NonFiniteLogits, EndOnlyTheirSequenceWithAClearError) {
  auto m = load(dir_.path());
  Scheduler s(*m);
  const std::vector<int32_t> prompt = {5, 11, poisoned_, 2};
  auto hit = s.submit(sampled(prompt, 3));
  auto beside = s.submit(sampled(bystander_, 7));
  while (s.step()) {
  }
  const SeqRun bad = collect(*hit), good = collect(*beside);
  EXPECT_EQ(bad.finish, Finish::Error);
  EXPECT_TRUE(bad.tokens.empty());
  EXPECT_NE(bad.error.find("non-finite logits at position 3 "), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("the model's weights or config hold NaN/Inf"), std::string::npos) << bad.error;
  EXPECT_EQ(good.finish, Finish::Length);
  expect_same_bits(clean_.tokens, clean_.logits, good.tokens, good.logits);
}

TEST_F(NonFiniteLogits, GenerateExitsWithOneClearError) {
  const clitest::CommandResult r =
      clitest::run_strata("generate " + dir_.path().string() + " --prompt-ids 5,11," + std::to_string(poisoned_) +
                          " -n 4 --temperature 0 --threads 2 --heat none");
  clitest::expect_clean_error(r, "non-finite logits at position 2 ");
}

}  // namespace
}  // namespace strata
