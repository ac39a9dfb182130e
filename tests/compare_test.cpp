// strata compare's measures on real checkpoints: identical models agree
// exactly; a perturbed copy shows a positive divergence.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/compare.h"
#include "safetensors_writer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::vector<std::vector<int32_t>> kPrompts = {{5, 6, 7, 8, 9, 10}, {11, 12, 13, 14}};

fs::path fixture(const std::string& name) { return fs::path(STRATA_FIXTURES_DIR) / "models" / name; }

TEST(Compare, ModelAgainstItselfIsExact) {
  auto a = load_model(fixture("qwen_gqa"), LoadOptions{2});
  auto b = load_model(fixture("qwen_gqa"), LoadOptions{1});
  CompareReport r = compare_models(*a, *b, kPrompts);
  EXPECT_EQ(r.sequences, 2);
  EXPECT_EQ(r.positions, 10);
  EXPECT_EQ(r.mean_kl, 0.0);
  EXPECT_EQ(r.max_kl, 0.0);
  EXPECT_EQ(r.top1_agreement, 1.0);
  EXPECT_EQ(r.perplexity_a, r.perplexity_b);
  EXPECT_GT(r.perplexity_a, 1.0);
}

TEST(Compare, PerturbedModelDiverges) {
  testfiles::TempDir dir("strata-compare");
  fs::copy(fixture("qwen_gqa"), dir.path(), fs::copy_options::recursive);
  std::ifstream in(dir.path() / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["rms_norm_eps"] = 0.5;  // a visible but bounded change
  testfiles::write_file(dir.path() / "config.json", config.dump());
  auto a = load_model(fixture("qwen_gqa"), LoadOptions{2});
  auto b = load_model(dir.path(), LoadOptions{2});
  CompareReport r = compare_models(*a, *b, kPrompts);
  EXPECT_GT(r.mean_kl, 0.0);
  EXPECT_GE(r.max_kl, r.p99_kl);
  EXPECT_NE(r.perplexity_a, r.perplexity_b);
}

TEST(Compare, RejectsDifferentVocabularies) {
  auto a = load_model(fixture("qwen_gqa"), LoadOptions{1});
  auto b = load_model(fixture("ds_yarn_grouped"), LoadOptions{1});
  EXPECT_THROW(compare_models(*a, *b, kPrompts), Error);
}

}  // namespace
}  // namespace strata
