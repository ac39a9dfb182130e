// generate --draft: greedy output with any drafter (the MTP layer's too) is
// transformers' greedy continuation (the reference fixture's); a draft
// model's weights and the MTP drafter's caches count in the target's --ram
// budget; bad --draft values are one clear error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace strata::clitest {
namespace {

std::string prompt_ids(const nlohmann::json& ref) {
  std::string ids;
  for (int id : ref["prompt_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return ids;
}

TEST(CliDraft, GreedyWithADrafterIsTheReferenceContinuation) {
  const fs::path dir = fixture("ds_yarn_grouped");
  const nlohmann::json ref = nlohmann::json::parse(read_all(dir / "reference.json"));
  for (const std::string& draft : {std::string("ngram"), dir.string()}) {
    SCOPED_TRACE(draft);
    const CommandResult r = run_strata("generate " + dir.string() + " --prompt-ids " + prompt_ids(ref) +
                                       " -n 16 --json --threads 2 --draft " + draft + " --draft-max 4");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"], ref["greedy_ids"]);
    const nlohmann::json& d = j["stats"]["draft"];
    EXPECT_LE(d["accepted_tokens"].get<int64_t>(), d["drafted_tokens"].get<int64_t>());
    // The model drafting for itself is always right under greedy.
    if (draft != "ngram") {
      EXPECT_GT(d["accepted_tokens"].get<int64_t>(), 0);
    }
  }
}

// ds_mtp: ds_sharded (transformers' reference) with an MTP layer.
TEST(CliDraft, GreedyWithTheMtpLayerIsTheReferenceContinuation) {
  const fs::path dir = fixture("ds_mtp");
  const nlohmann::json ref = nlohmann::json::parse(read_all(dir / "reference.json"));
  const CommandResult r = run_strata("generate " + dir.string() + " --prompt-ids " + prompt_ids(ref) +
                                     " -n 16 --json --threads 2 --draft mtp --draft-max 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], ref["greedy_ids"]);
  EXPECT_GT(j["stats"]["draft"]["drafted_tokens"].get<int64_t>(), 0);
}

TEST(CliDraft, TheMtpDraftersCachesCountInTheBudget) {
  const fs::path dir = fixture("ds_mtp");
  auto kv = [&](const std::string& extra) {
    const CommandResult r =
        run_strata("generate " + dir.string() + " --prompt-ids 1,2,3 -n 2 --json --threads 2 " + kAmpleRam + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["stats"]["memory"]["kv"].get<int64_t>();
  };
  // One MLA layer's rows beside the main model's three, and a step's hidden states.
  const int64_t without = kv(""), with = kv("--draft mtp");
  EXPECT_GT(with - without, without / 3);
}

TEST(CliDraft, ADraftModelCountsInTheTargetsBudget) {
  const fs::path target = fixture("qwen_gqa"), draft = target;  // a draft model of the same vocabulary
  auto baseline = [&](const std::string& extra) {
    const CommandResult r =
        run_strata("generate " + target.string() + " --prompt-ids 1,2,3 -n 2 --json --threads 2 " + kAmpleRam + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["stats"]["memory"]["baseline"].get<int64_t>();
  };
  uint64_t weights = 0;
  for (const auto& e : fs::directory_iterator(draft))
    if (e.path().extension() == ".safetensors") weights += fs::file_size(e.path());
  const int64_t without = baseline(""), with = baseline("--draft " + draft.string());
  // Every weight of the draft model is mapped (bf16 in the file): all but the headers.
  EXPECT_GE(with - without, static_cast<int64_t>(weights * 9 / 10));
}

TEST(CliDraft, BadDraftValuesAreCleanErrors) {
  const std::string target = fixture("qwen_gqa").string() + " --prompt-ids 1,2,3 -n 2 --threads 2 ";
  expect_clean_error(run_strata("generate " + target + "--draft /nonexistent/draft"), "--draft");
  expect_clean_error(run_strata("generate " + target + "--draft ngram --draft-max 99"), "--draft-max");
  // Shaping a drafter that was not asked for is said, not ignored.
  expect_clean_error(run_strata("generate " + target + "--draft-max 4"), "give --draft");
  expect_clean_error(run_strata("generate " + target + "--draft-fixed"), "give --draft");
  // A model without a next-token-prediction layer has nothing to draft with.
  expect_clean_error(run_strata("generate " + target + "--draft mtp"), "no next-token-prediction (MTP) layer");
  // Another vocabulary: not the same tokenizer.
  expect_clean_error(run_strata("generate " + target + "--draft " + fixture("ds_fp8").string()),
                     "must share the tokenizer");
}

}  // namespace
}  // namespace strata::clitest
