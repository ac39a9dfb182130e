// Router traces and `strata heat`: a trace line per computed row with each
// MoE layer's k distinct experts (dense layers empty); tracing changes no
// bit; a sequence's routing is the same alone, beside another and with
// drafting (the traced choices of its kept rows); the summary follows its
// definitions; bad files are one clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_support.h"
#include "model/model.h"
#include "runtime/drafter.h"
#include "runtime/generator.h"
#include "runtime/heat_summary.h"
#include "runtime/loader.h"
#include "runtime/route_trace.h"
#include "runtime/scheduler.h"
#include "same_bits.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using clitest::fixture;

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& name)
      : path(fs::temp_directory_path() / ("strata_trace_" + std::to_string(::getpid()) + "_" + name)) {}
  ~TempFile() { fs::remove(path); }
};

std::vector<nlohmann::json> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::unique_ptr<Model> load(const fs::path& dir) {
  LoadOptions o;
  o.threads = 2;
  o.heat = "none";
  return load_model(dir, o);
}

const std::vector<int32_t> kPrompt = {5, 17, 3, 42, 9};

// Proposes the sequence's last token again, `max` times: mostly wrong.
class RepeatDrafter final : public Drafter {
 public:
  std::string name() const override { return "repeat"; }
  std::unique_ptr<DraftStream> start(const SamplingParams&) override { return std::make_unique<Stream>(); }

 private:
  struct Stream final : DraftStream {
    void propose(std::span<const int32_t> tokens, uint64_t, int max, std::vector<int32_t>& out) override {
      out.assign(static_cast<size_t>(max), tokens.back());
    }
  };
};

TEST(RouteTrace, ALinePerRowWithKDistinctExpertsPerMoeLayerAndNoBitChanged) {
  auto m = load(fixture("ds_noqlora_dense2"));  // two dense layers first
  const ModelConfig& c = m->config();
  GenerateOptions g;
  g.max_new_tokens = 6;
  g.keep_logits = true;
  g.sampling = {1.0f, 3};
  const GenerateResult plain = generate(*m, kPrompt, g);
  TempFile f("a.jsonl");
  GenerateResult traced;
  {
    RouteTrace trace(f.path, c.num_layers, c.n_routed_experts);
    g.trace = &trace;
    traced = generate(*m, kPrompt, g);
  }
  expect_same_bits(plain.tokens, plain.logits, traced.tokens, traced.logits);
  const auto lines = read_lines(f.path);
  // The prompt's rows, then one row per token fed back (all but the last).
  ASSERT_EQ(lines.size(), kPrompt.size() + traced.tokens.size() - 1);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& j = lines[i];
    EXPECT_EQ(j["seq"], 1);
    EXPECT_EQ(j["pos"], i);
    EXPECT_EQ(j["token"], i < kPrompt.size() ? kPrompt[i] : traced.tokens[i - kPrompt.size()]);
    EXPECT_EQ(j["n_experts"], c.n_routed_experts);
    ASSERT_EQ(j["experts"].size(), static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const auto ids = j["experts"][l].get<std::vector<int32_t>>();
      if (!c.layer_is_moe(l)) {
        EXPECT_TRUE(ids.empty());
        continue;
      }
      ASSERT_EQ(ids.size(), static_cast<size_t>(c.num_experts_per_tok));
      EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), ids.size());
      for (int32_t e : ids) EXPECT_TRUE(e >= 0 && e < c.n_routed_experts);
    }
  }
}

// (seq, pos) -> the experts of its line.
std::map<std::pair<int, int>, nlohmann::json> by_position(const fs::path& p) {
  std::map<std::pair<int, int>, nlohmann::json> out;
  for (const auto& j : read_lines(p)) out[{j["seq"].get<int>(), j["pos"].get<int>()}] = j["experts"];
  return out;
}

// Kimi K3 too: its recurrent state is rolled back and kept rows fed again.
class RouteTraceOf : public ::testing::TestWithParam<std::string> {};

TEST_P(RouteTraceOf, ASequencesRoutingIsTheSameAloneBesideAnotherAndDrafted) {
  auto m = load(fixture(GetParam()));
  const ModelConfig& c = m->config();
  TempFile alone("alone.jsonl"), pair("pair.jsonl"), drafted("drafted.jsonl");
  GenerateOptions g;
  g.max_new_tokens = 8;
  {
    RouteTrace t(alone.path, c.num_layers, c.n_routed_experts);
    g.trace = &t;
    generate(*m, kPrompt, g);
  }
  {
    RouteTrace t(drafted.path, c.num_layers, c.n_routed_experts);
    RepeatDrafter repeat;
    g.trace = &t;
    g.drafter = &repeat;
    g.draft_adaptive = false;
    const GenerateResult r = generate(*m, kPrompt, g);
    EXPECT_GT(r.drafted_tokens, r.accepted_tokens);  // some drafted rows were not kept
    g.drafter = nullptr;
  }
  {
    RouteTrace t(pair.path, c.num_layers, c.n_routed_experts);
    SchedulerOptions o;
    o.trace = &t;
    Scheduler s(*m, o);
    Request other;
    other.prompt = {9, 8, 7, 6, 5, 4, 3};
    other.max_tokens = 8;
    Request same;
    same.prompt = kPrompt;
    same.max_tokens = 8;
    auto a = s.submit(std::move(other));
    auto b = s.submit(std::move(same));  // sequence 2
    while (s.step()) {
    }
  }
  const auto want = by_position(alone.path);
  const auto with_draft = by_position(drafted.path);
  // Only kept rows are traced: a line per position, as many as alone.
  EXPECT_EQ(read_lines(drafted.path).size(), read_lines(alone.path).size());
  EXPECT_EQ(with_draft.size(), want.size());
  const auto beside = by_position(pair.path);
  for (const auto& [key, experts] : want) {
    EXPECT_EQ(with_draft.at(key), experts) << "pos " << key.second;
    EXPECT_EQ(beside.at({2, key.second}), experts) << "pos " << key.second;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RouteTraceOf, ::testing::Values("qwen_gqa", "k3_bf16"));

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(HeatSummary, FollowsItsDefinitions) {
  TempFile trace("t.jsonl"), heat("h.json");
  // Layer 1 of 4 experts: expert 0 chosen 3 times, 1 twice, 2 once (k = 2, 3 tokens); layer 0 dense.
  write(trace.path,
        "{\"seq\": 1, \"pos\": 0, \"token\": 7, \"n_experts\": 4, \"experts\": [[], [0, 1]]}\n"
        "{\"seq\": 1, \"pos\": 1, \"token\": 8, \"n_experts\": 4, \"experts\": [[], [0, 2]]}\n"
        "{\"seq\": 1, \"pos\": 2, \"token\": 9, \"n_experts\": 4, \"experts\": [[], [1, 0]]}\n");
  HeatSummary s = summarise_heat({trace.path});
  ASSERT_EQ(s.layers.size(), 1u);
  const LayerHeatSummary& l = s.layers[0];
  EXPECT_EQ(s.experts, 4);
  EXPECT_EQ(s.tokens, 3u);
  EXPECT_EQ(l.layer, 1);
  EXPECT_EQ(l.selections, 6);
  EXPECT_EQ(l.distinct, 3);
  // Frequencies 1/2, 1/3, 1/6 of 4 experts.
  const double h = -(0.5 * std::log(0.5) + std::log(1.0 / 3) / 3 + std::log(1.0 / 6) / 6);
  EXPECT_NEAR(l.concentration, 1 - h / std::log(4.0), 1e-12);
  EXPECT_EQ(l.cover50, 1);  // 3 of 6
  EXPECT_EQ(l.cover90, 3);  // 5 of 6 < 5.4
  EXPECT_EQ(l.cover99, 3);
  // A heat file adds its counts: expert 3 chosen 6 times in layer 1.
  write(heat.path, "{\"version\": 1, \"model\": \"x\", \"layers\": [[], [0, 0, 0, 6]]}");
  s = summarise_heat({trace.path, heat.path});
  EXPECT_EQ(s.layers[0].selections, 12);
  EXPECT_EQ(s.layers[0].distinct, 4);
  EXPECT_EQ(s.layers[0].cover50, 1);  // 6 of 12: half
  EXPECT_EQ(s.layers[0].cover90, 3);  // 6 + 3 + 2 = 11 of 12 >= 10.8
  const std::string svg = heat_svg(s);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 4u);
}

TEST(HeatSummary, BadFilesAreOneClearError) {
  TempFile f("bad.jsonl");
  for (const std::string& text :
       {std::string("{\"experts\": [[1, 2]]}\nnot json\n"), std::string("{\"experts\": [[1, -2]]}\n"),
        std::string("{\"experts\": [[1, 99999999]]}\n"), std::string("{\"pos\": 1}\n"), std::string("[]\n"),
        std::string("{\"experts\": [[1.5]]}\n"), std::string("")}) {
    write(f.path, text);
    try {
      summarise_heat({f.path});
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text.empty() ? "no expert choices" : f.path.string()), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(summarise_heat({f.path.string() + ".missing"}), Error);
  // An id at or past the line's n_experts.
  write(f.path, "{\"n_experts\": 8, \"experts\": [[1, 8]]}\n");
  EXPECT_THROW(summarise_heat({f.path}), Error);
}

// Memory follows what the file holds, not the ids it names: the largest id
// in each of 4096 layers (a dense table would be 32 GiB) is summarised.
TEST(HeatSummary, LargeIdsInManyLayersCostWhatTheFileHolds) {
  TempFile f("wide.jsonl");
  std::string line = "{\"experts\": [";
  for (int l = 0; l < 4096; ++l) line += std::string(l ? ", " : "") + "[1048575]";
  write(f.path, line + "]}\n");
  const HeatSummary s = summarise_heat({f.path});
  EXPECT_EQ(s.layers.size(), 4096u);
  EXPECT_EQ(s.experts, 1048576);
  EXPECT_EQ(s.layers[0].cover99, 1);
}

TEST(HeatCli, PrintsTheTableAndWritesTheChart) {
  TempFile trace("cli.jsonl"), svg("cli.svg");
  auto r = clitest::run_strata("generate " + fixture("qwen_gqa").string() + " --prompt-ids 1,2,3 -n 4 --threads 2 --trace " +
                               trace.path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = clitest::run_strata("heat " + trace.path.string() + " --svg " + svg.path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("MoE layers"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::file_size(svg.path) > 0);
  write(trace.path, "garbage\n");
  clitest::expect_clean_error(clitest::run_strata("heat " + trace.path.string()), trace.path.string() + ":1");
}

}  // namespace
}  // namespace strata
