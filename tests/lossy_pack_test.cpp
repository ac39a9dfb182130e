// A re-quantized pack says so everywhere its output appears, with figures
// measured against its source (pack/lossy.h, runtime/pack_fidelity.h), and
// `strata compare` gates a conversion on thresholds. The expected figures
// come from compare_models on the same built-in prompts: the manifest must
// hold exactly what compare measures, not a figure of its own.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "model/model.h"
#include "pack/lossy.h"
#include "pack/manifest.h"
#include "util/error.h"
#include "runtime/compare.h"
#include "runtime/loader.h"
#include "runtime/pack_fidelity.h"

namespace strata {
namespace {

using namespace clitest;

nlohmann::json manifest_of(const fs::path& pack) { return nlohmann::json::parse(read_all(pack / "manifest.json")); }

// One int4 pack of the fixture for the whole suite (packing and measuring
// are the slow part).
class LossyPack : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testfiles::TempDir("strata-lossy");
    const CommandResult r = run_strata("pack " + fixture("qwen_gqa").string() + " --out " + pack().string() +
                                       " --experts int4 --threads 2 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    pack_json_ = new nlohmann::json(nlohmann::json::parse(r.out));
  }
  static void TearDownTestSuite() {
    delete pack_json_;
    delete dir_;
  }
  static fs::path pack() { return dir_->path() / "int4"; }
  static inline testfiles::TempDir* dir_ = nullptr;
  static inline nlohmann::json* pack_json_ = nullptr;
};

TEST_F(LossyPack, ManifestHoldsWhatCompareMeasuresOnTheBuiltInPrompts) {
  const nlohmann::json m = manifest_of(pack());
  EXPECT_EQ(m["lossy"], nlohmann::json({{"experts", "int4"}}));
  const nlohmann::json& f = m["fidelity"];
  ASSERT_TRUE(f.is_object()) << m.dump();
  EXPECT_EQ(f["prompt_set"], kBuiltinPromptSet);

  LoadOptions o(2);
  o.heat = "none";
  auto source = load_model(fixture("qwen_gqa"), o);
  auto packed = load_model(pack(), o);
  const CompareReport r =
      compare_models(*source, *packed, builtin_fidelity_prompts(source->config().vocab_size, source->context()));
  EXPECT_EQ(f["prompts"].get<int64_t>(), r.sequences);
  EXPECT_EQ(f["positions"].get<int64_t>(), r.positions);
  EXPECT_EQ(f["top1_agreement"].get<double>(), r.top1_agreement);
  EXPECT_EQ(f["mean_kl"].get<double>(), r.mean_kl);
  EXPECT_EQ(f["p99_kl"].get<double>(), r.p99_kl);
  EXPECT_EQ(f["max_kl"].get<double>(), r.max_kl);
  EXPECT_GT(r.mean_kl, 0.0);  // int4 changed something
  EXPECT_EQ((*pack_json_)["fidelity"], f);

  // `strata compare` without --prompts runs the same set.
  const CommandResult c = run_strata("compare " + fixture("qwen_gqa").string() + " " + pack().string() + " --json");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const nlohmann::json cj = nlohmann::json::parse(c.out);
  EXPECT_EQ(cj["top1_agreement"].get<double>(), r.top1_agreement);
  EXPECT_EQ(cj["mean_kl"].get<double>(), r.mean_kl);
  EXPECT_EQ(cj["prompt_set"], kBuiltinPromptSet);
}

TEST_F(LossyPack, LoadedPackCarriesItsLabelInGenerateTextAndJson) {
  const std::string label = "approximation: experts re-quantized to int4 (top-1 agreement ";
  const CommandResult j = run_strata("generate " + pack().string() + " --prompt-ids 1,2,3 -n 2 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json out = nlohmann::json::parse(j.out);
  ASSERT_TRUE(out["approximation"].is_string()) << j.out;
  EXPECT_EQ(out["approximation"].get<std::string>().rfind(label, 0), 0u) << out["approximation"];
  EXPECT_NE(out["approximation"].get<std::string>().find("vs the source on 8 built-in prompts)"), std::string::npos);

  const CommandResult t = run_strata("generate " + pack().string() + " --prompt-ids 1,2,3 -n 2");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.err.find(out["approximation"].get<std::string>() + "\n"), std::string::npos) << t.err;
  EXPECT_EQ(t.out.find("approximation"), std::string::npos);  // stdout is the continuation only
}

TEST_F(LossyPack, CompareExitsNonZeroBelowMinTop1AndAboveMaxKl) {
  const nlohmann::json f = manifest_of(pack())["fidelity"];
  const double top1 = f["top1_agreement"].get<double>(), kl = f["mean_kl"].get<double>();
  const std::string models = fixture("qwen_gqa").string() + " " + pack().string();
  auto arg = [](double v) { return std::to_string(v); };

  ASSERT_LT(top1, 1.0) << "the fixture's int4 pack must disagree somewhere for this test";
  const CommandResult fail = run_strata("compare " + models + " --min-top1 " + arg(std::min(1.0, top1 + 0.01)));
  EXPECT_EQ(fail.exit_code, 3) << fail.err;
  EXPECT_EQ(std::count(fail.err.begin(), fail.err.end(), '\n'), 1) << fail.err;
  EXPECT_NE(fail.err.find("is below --min-top1"), std::string::npos) << fail.err;
  EXPECT_NE(fail.out.find("top-1 agreement"), std::string::npos);  // the figures are still printed

  EXPECT_EQ(run_strata("compare " + models + " --min-top1 " + arg(top1 - 0.01)).exit_code, 0);

  const CommandResult kl_fail = run_strata("compare " + models + " --json --max-kl " + arg(kl / 2));
  EXPECT_EQ(kl_fail.exit_code, 3) << kl_fail.err;
  EXPECT_NE(kl_fail.err.find("is above --max-kl"), std::string::npos) << kl_fail.err;
  EXPECT_EQ(nlohmann::json::parse(kl_fail.out)["gate"]["passed"], false);
  const CommandResult kl_pass = run_strata("compare " + models + " --json --max-kl " + arg(kl * 2 + 1e-6) +
                                           " --min-top1 " + arg(top1 - 0.01));
  EXPECT_EQ(kl_pass.exit_code, 0) << kl_pass.err;
  EXPECT_EQ(nlohmann::json::parse(kl_pass.out)["gate"]["passed"], true);
}

TEST(ExactPack, CarriesNoLabelAnywhere) {
  testfiles::TempDir tmp("strata-exact");
  const fs::path pack = tmp.path() / "exact";
  const CommandResult p = run_strata("pack " + fixture("qwen_gqa").string() + " --out " + pack.string() + " --json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const nlohmann::json m = manifest_of(pack);
  EXPECT_FALSE(m.contains("lossy"));
  EXPECT_FALSE(m.contains("fidelity"));
  EXPECT_EQ(nlohmann::json::parse(p.out)["approximation"], "");
  const CommandResult g = run_strata("generate " + pack.string() + " --prompt-ids 1,2,3 -n 2 --json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_TRUE(nlohmann::json::parse(g.out)["approximation"].is_null());
  const CommandResult t = run_strata("generate " + pack.string() + " --prompt-ids 1,2,3 -n 2");
  EXPECT_EQ(t.err.find("approximation"), std::string::npos) << t.err;
}

TEST(SkippedFidelity, IsRecordedWithItsFlagAndMeasuredOnALaterRunWithoutIt) {
  testfiles::TempDir tmp("strata-skip");
  const fs::path pack = tmp.path() / "int8";
  const std::string cmd = "pack " + fixture("qwen_gqa").string() + " --out " + pack.string() + " --trunk int8 -q";
  const CommandResult p = run_strata(cmd + " --skip-fidelity");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.err.find("approximation: trunk re-quantized to int8 (fidelity not measured: packed with --skip-fidelity)"),
            std::string::npos)
      << p.err;
  nlohmann::json m = manifest_of(pack);
  EXPECT_EQ(m["lossy"], nlohmann::json({{"trunk", "int8"}}));
  EXPECT_EQ(m["fidelity"], nlohmann::json({{"skipped", true}, {"flag", "--skip-fidelity"}}));
  const CommandResult g = run_strata("generate " + pack.string() + " --prompt-ids 1,2,3 -n 1 --json");
  EXPECT_EQ(nlohmann::json::parse(g.out)["approximation"],
            "approximation: trunk re-quantized to int8 (fidelity not measured: packed with --skip-fidelity)");

  // The same pack again, without the flag: nothing is re-packed, the figures are added.
  const CommandResult again = run_strata(cmd);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  m = manifest_of(pack);
  EXPECT_EQ(m["fidelity"]["prompt_set"], kBuiltinPromptSet);
  EXPECT_EQ(m["fidelity"]["prompts"], 8);
}

TEST(ApproximationLabel, SaysWhatWasRequantizedAndWhetherItWasMeasured) {
  EXPECT_EQ(approximation_label(PackLossy::from_options("keep", "keep"), std::nullopt), "");
  EXPECT_EQ(approximation_label(PackLossy::from_options("int8", "mxfp4"), std::nullopt),
            "approximation: trunk re-quantized to int8, experts re-quantized to mxfp4 (fidelity not measured)");
  PackFidelity f;
  f.prompts = 8;
  f.top1_agreement = 0.96875;
  f.mean_kl = 0.0123;
  EXPECT_EQ(approximation_label(PackLossy::from_options("keep", "q8"), f),
            "approximation: experts re-quantized to q8 (top-1 agreement 0.969, mean KL 0.0123 vs the source on 8 "
            "built-in prompts)");
}

TEST(BuiltinFidelityPrompts, AreFixedForAVocabularyAndFitIt) {
  const auto a = builtin_fidelity_prompts(352), b = builtin_fidelity_prompts(352);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 8u);
  for (const auto& p : a) {
    EXPECT_EQ(p.size(), 16u);
    for (int32_t id : p) EXPECT_TRUE(id >= 0 && id < 352);
  }
  EXPECT_NE(a, builtin_fidelity_prompts(163840));
  for (const auto& p : builtin_fidelity_prompts(352, 5)) EXPECT_EQ(p.size(), 5u);
}

TEST(ManifestLossy, OldPacksWithLossyOptionsAreStillLabelled) {
  // Written before "lossy" existed: the options say it.
  nlohmann::json j = {{"format", "strata-pack"}, {"version", 1}, {"source", "/m"}, {"trunk", "trunk"},
                      {"options", {{"trunk", "keep"}, {"experts", "int4"}}}, {"drives", {{{"path", "."}, {"file", "x"}}}},
                      {"layouts", nlohmann::json::array()}, {"experts", nlohmann::json::array()}};
  EXPECT_EQ(Manifest::from_json(j, "m.json").approximation(),
            "approximation: experts re-quantized to int4 (fidelity not measured)");
  j["lossy"] = {{"experts", "int5"}};
  EXPECT_THROW(Manifest::from_json(j, "m.json"), Error);
}

}  // namespace
}  // namespace strata
