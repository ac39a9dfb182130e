// `generate --device vulkan --json` as a user runs it: the commands each
// phase recorded on the GPU (docs/vulkan.md), which the H200 machine's
// profiles set against a token's time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace strata {
namespace {

using namespace clitest;

nlohmann::json generate(const std::string& device, int tokens) {
  const CommandResult r = run_strata("generate --model " + fixture("qwen_gqa").string() +
                                     " --prompt-ids 5,6,7 --temperature 0 --ignore-eos --json --threads 2 --device " + device +
                                     " -n " + std::to_string(tokens));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// Every decode token records the same ops, so the same dispatches and
// barriers however many tokens; the prompt's step records its own. The CPU
// records none and says nothing of them.
TEST(VulkanCli, GenerateCountsTheDispatchesEachTokenRecords) {
  const nlohmann::json three = generate("vulkan", 3), seven = generate("vulkan", 7);
  ASSERT_TRUE(three["stats"].contains("device")) << three.dump();
  const nlohmann::json& a = three["stats"]["device"], &b = seven["stats"]["device"];
  EXPECT_GT(a["prefill"]["dispatches"].get<uint64_t>(), 0u);
  EXPECT_EQ(a["prefill"], b["prefill"]);
  EXPECT_GT(a["decode"]["dispatches_per_token"].get<double>(), 0.0);
  EXPECT_EQ(a["decode"]["dispatches_per_token"], b["decode"]["dispatches_per_token"]);
  EXPECT_EQ(a["decode"]["barriers_per_token"], b["decode"]["barriers_per_token"]);
  EXPECT_EQ(b["decode"]["dispatches"].get<uint64_t>(), 3 * a["decode"]["dispatches"].get<uint64_t>());
  EXPECT_FALSE(generate("cpu", 3)["stats"].contains("device"));
}

}  // namespace
}  // namespace strata
