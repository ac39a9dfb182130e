// What `strata budget` reads of a model (runtime/budget_model.h) against the
// checkpoint's own bytes, counted here from its safetensors header, and the
// command's outputs (JSON, SVG, a clear error without experts); a remote
// model (nginx serving a hub's layout) from its headers alone.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "local_nginx.h"
#include "model/model.h"
#include "error_message.h"
#include "pack/manifest.h"
#include "pack/packer.h"
#include "runtime/attention_timer.h"
#include "model/expert_heat.h"
#include "runtime/budget.h"
#include "runtime/budget_model.h"
#include "runtime/expert_step_timer.h"
#include "runtime/loader.h"
#include "storage/drive_rates.h"
#include "storage/probe.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using clitest::CommandResult;
using clitest::expect_clean_error;
using clitest::fixture;
using clitest::read_all;
using clitest::run_strata;

// Bytes of every tensor of a one-file safetensors checkpoint, and of the
// routed experts' (HF names model.layers.L.mlp.experts.E.*) by layer below
// and at or above `layers`.
struct Counted {
  uint64_t all = 0, decoder_experts = 0, other_experts = 0, token_table = 0, head = 0;
  uint64_t routers = 0;  // the decoder layers' model.layers.L.mlp.gate.weight
  int64_t trunk_matrices = 0;  // 2-D weights but the token table's and the experts'
};
Counted count_safetensors(const fs::path& file, int64_t layers) {
  std::ifstream in(file, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const nlohmann::json h = nlohmann::json::parse(header);
  const std::regex expert(R"(model\.layers\.(\d+)\.mlp\.experts\.\d+\.)");
  const std::regex router(R"(model\.layers\.(\d+)\.mlp\.gate\.weight)");
  Counted c;
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;
    const uint64_t bytes = t["data_offsets"][1].get<uint64_t>() - t["data_offsets"][0].get<uint64_t>();
    c.all += bytes;
    if (name == "model.embed_tokens.weight") c.token_table = bytes;
    if (name == "lm_head.weight") c.head = bytes;
    std::smatch m;
    if (std::regex_match(name, m, router) && std::stoll(m[1]) < layers) c.routers += bytes;
    if (std::regex_search(name, m, expert))
      (std::stoll(m[1]) < layers ? c.decoder_experts : c.other_experts) += bytes;
    else if (name != "model.embed_tokens.weight" && t["shape"].size() == 2)
      ++c.trunk_matrices;
  }
  return c;
}

TEST(BudgetModel, ACheckpointsBytesAreItsTensorsSplitIntoTrunkAndExperts) {
  const fs::path dir = fixture("ds_mtp");  // one MTP layer after the decoder layers, its experts too
  const BudgetModel b = read_budget_model(dir, {});
  const ModelConfig& c = b.config;
  const Counted want = count_safetensors(dir / "model.safetensors", c.num_layers);
  ASSERT_GT(want.other_experts, 0u);
  EXPECT_EQ(b.kind, "hf");
  EXPECT_EQ(b.shape.total_bytes, want.all);
  // The trunk that stays resident: all but the experts and an untied token
  // table (read a row a token).
  ASSERT_FALSE(c.tie_word_embeddings);
  ASSERT_GT(want.token_table, 0u);
  EXPECT_EQ(b.token_table_bytes, want.token_table);
  EXPECT_EQ(b.shape.trunk_bytes, want.all - want.decoder_experts - want.other_experts - want.token_table);
  // The output head, which a prefill runs for its last position only.
  ASSERT_GT(want.head, 0u);
  EXPECT_EQ(b.head_bytes, want.head);
  EXPECT_EQ(b.shape.experts, c.n_routed_experts);
  EXPECT_EQ(b.shape.experts_per_token, c.num_experts_per_tok);
  int64_t moe = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) moe += c.layer_is_moe(l);
  EXPECT_EQ(b.shape.moe_layers, moe);
  EXPECT_EQ(b.shape.expert_bytes, want.decoder_experts / static_cast<uint64_t>(moe * c.n_routed_experts));
  // A decode token's products: each resident matrix, and gate, up and down of each expert it picks.
  EXPECT_EQ(b.trunk_matrices, want.trunk_matrices);
  EXPECT_EQ(b.expert_matrices, 3);
  // The routers a streamed token's guesses run again (not the MTP layer's).
  ASSERT_GT(want.routers, 0u);
  EXPECT_EQ(b.router_bytes, want.routers);
}

// With tied embeddings the token table is the output head, and resident.
TEST(BudgetModel, ATiedTokenTableIsTheHead) {
  const fs::path dir = fixture("qwen_sparse_step");
  const BudgetModel b = read_budget_model(dir, {});
  ASSERT_TRUE(b.config.tie_word_embeddings);
  const Counted want = count_safetensors(dir / "model.safetensors", b.config.num_layers);
  ASSERT_GT(want.token_table, 0u);
  EXPECT_EQ(want.head, 0u);
  EXPECT_EQ(b.token_table_bytes, 0u);
  EXPECT_EQ(b.head_bytes, want.token_table);
  EXPECT_EQ(b.shape.trunk_bytes, want.all - want.decoder_experts - want.other_experts);
}

// The attention a decode token does over its cached positions, per layer
// kind, from the fixtures' configs (hand-read): GQA heads read their key-value
// head's slice, MLA heads the whole latent row; sliding windows cap what a
// layer sees; Kimi Delta Attention layers read no positions.
TEST(BudgetModel, AttentionWorkFollowsTheLayersKinds) {
  auto work = [](const char* name, int64_t positions) {
    return attention_work(read_budget_model(fixture(name), {}).config, positions);
  };
  auto expect = [](const AttentionWork& a, std::vector<int64_t> want) {
    EXPECT_EQ((std::vector<int64_t>{a.layers, a.heads, a.positions, a.key_floats, a.value_floats, a.key_stride,
                                    a.value_stride}),
              want);
  };
  // qwen_gqa: 3 layers, 4 heads over 2 key-value heads of 24.
  std::vector<AttentionWork> w = work("qwen_gqa", 100);
  ASSERT_EQ(w.size(), 1u);
  expect(w[0], {3, 4, 100, 24, 24, 48, 48});
  // ds_mtp: MLA, kv_lora_rank 32 + rope 8 (the MTP layer is not a decoder layer).
  w = work("ds_mtp", 100);
  ASSERT_EQ(w.size(), 1u);
  expect(w[0], {3, 4, 100, 40, 32, 40, 0});
  // gpt-oss: sliding (window 8) and full layers alternate.
  w = work("gptoss_mxfp4", 100);
  ASSERT_EQ(w.size(), 2u);
  expect(w[0], {2, 4, 8, 32, 32, 64, 64});
  expect(w[1], {2, 4, 100, 32, 32, 64, 64});
  w = work("gptoss_mxfp4", 5);  // within the window: all alike
  ASSERT_EQ(w.size(), 1u);
  expect(w[0], {4, 4, 5, 32, 32, 64, 64});
  // Kimi K3: layers 1-3 are KDA, 4-5 MLA (2 heads, latent 32 + 8).
  w = work("k3_mxfp4", 100);
  ASSERT_EQ(w.size(), 1u);
  expect(w[0], {2, 2, 100, 40, 32, 40, 0});
  EXPECT_TRUE(work("qwen_gqa", 0).empty());
}

// The timing runs every layer kind's walk over the rows (GQA slices of key-
// value heads, windows, MLA's latent) on four threads, each with its own
// scratch (under ASan: no read outside the rows), a decode token's one row
// and a prompt's blocks (steps of five rows: on AVX-512 a group of four and
// one alone; of 70: timed as blocks of 32), and takes some time.
TEST(BudgetModel, AttentionIsTimedForEveryLayerKind) {
  ThreadPool pool(4);
  for (const char* name : {"qwen_gqa", "gptoss_mxfp4", "ds_mtp", "k3_mxfp4"}) {
    const ModelConfig c = read_budget_model(fixture(name), {}).config;
    const double s = attention_seconds(c, 37, pool, 0.01);
    EXPECT_TRUE(std::isfinite(s) && s > 0) << name << ": " << s;
    EXPECT_EQ(attention_seconds(c, 0, pool, 0.01), 0.0) << name;
    for (int64_t step : {5, 70}) {
      const double row = prompt_attention_seconds(c, 37, step, pool, 0.01);
      EXPECT_TRUE(std::isfinite(row) && row > 0) << name << ": " << row;
    }
    EXPECT_EQ(prompt_attention_seconds(c, 0, 5, pool, 0.01), 0.0) << name;
  }
}

// A prompt step's experts are timed by running them: each expert's gate, up,
// activation and down on one thread. Sixty-four experts are sixty-four times
// the work of one (more than eight times the time, on one thread), in Q8_0
// and MXFP4; widths that the kernels cannot take are refused.
TEST(BudgetModel, AStepsExpertsAreTimedByRunningThem) {
  ThreadPool pool(1);
  for (const bool mxfp4 : {false, true}) {
    const ExpertStepTimer timer(mxfp4, 128, 64, 4);
    const double one = timer.seconds(1, 8, pool, 0.01), many = timer.seconds(64, 8, pool, 0.01);
    EXPECT_GT(one, 0.0);
    EXPECT_GT(many, 8 * one);
  }
  EXPECT_THROW(ExpertStepTimer(false, 100, 64, 1), Error);
  EXPECT_THROW(ExpertStepTimer(false, 64, 0, 1), Error);
}

// A drive is rated at the reads an expert is read in: a pack's 2.09 MiB
// expert (the budget check's model b) is two reads of 1.05 MiB with the
// storage's pieces, one whole read with a tuned piece of 4 MiB, and its size
// is rounded up to whole pages; a GGUF's is three unaligned ranges, one a
// matrix, each read with the pages around it; a safetensors checkpoint's
// one unaligned range.
TEST(BudgetModel, DrivesAreRatedAtTheReadsAnExpertIsReadIn) {
  LoadOptions load;
  BudgetModel m;
  m.kind = "pack";
  m.shape.expert_bytes = 2195456;
  EXPECT_EQ(expert_read_bytes(m, load), 2195456u / 2);
  m.shape.expert_bytes = 1105000;
  EXPECT_EQ(expert_read_bytes(m, load), 1105920u);
  m.shape.expert_bytes = 2195456;
  m.kind = "gguf";  // 731818.67 bytes a matrix: 179 pages, and one more
  m.expert_matrices = 3;
  EXPECT_EQ(expert_read_bytes(m, load), 180u * 4096);
  m.expert_matrices = 2;  // gate and up fused: the two ranges' mean, 268 pages and one more
  EXPECT_EQ(expert_read_bytes(m, load), 269u * 4096);
  m.shape.expert_bytes = 3 * (8u << 20);  // 8 MiB a matrix and a page: eight pieces of a page over 1 MiB
  m.expert_matrices = 3;
  EXPECT_EQ(expert_read_bytes(m, load), 257u * 4096);
  m.shape.expert_bytes = 2195456;
  m.kind = "hf";  // 536 pages and one more: still two pieces, of 268.5 pages each rounded up
  EXPECT_EQ(expert_read_bytes(m, load), 269u * 4096);
  load.piece_bytes = 4u << 20;
  m.kind = "pack";
  EXPECT_EQ(expert_read_bytes(m, load), 2195456u);
}

// The resident trunk, the KV cache and the step's buffers are what the
// loader plans for the model streamed under a budget at the same context and
// thread count: at a small budget (the step narrowed to fit a sixteenth of
// it, 128 MiB at least), a large one and a context so long that even the
// narrowest step is large; and the pass the loader plans, of the budget's
// share or as --prefill-pass gives it.
TEST(BudgetModel, TrunkKvAndStepBytesAreTheLoadersPlan) {
  struct Case {
    int64_t context;
    uint64_t ram;
    int threads;  // 0: the default count
    int64_t cap;  // a tuned profile's prefill rows (0: none)
    int64_t pass = 0;  // --prefill-pass (0: the budget's)
  };
  for (const char* name : {"qwen_gqa", "ds_mtp", "k3_mxfp4"}) {
    std::set<int64_t> rows_seen, passes_seen;
    for (const Case& k : std::vector<Case>{{64, 1ull << 30, 2, 0},
                                           {64, 8ull << 30, 0, 0},
                                           {64, 1ull << 30, 3, 100},
                                           {1 << 16, 1ull << 30, 2, 0},
                                           {1 << 20, 1ull << 30, 2, 0},
                                           {1 << 16, 1ull << 30, 2, 0, 1},
                                           {1 << 16, 1ull << 30, 2, 0, 6000}}) {
      LoadOptions o;
      o.context = k.context;
      o.allow_long_context = true;
      o.ram_bytes = k.ram;
      o.threads = k.threads;
      o.max_batch_cap = k.cap;
      o.max_pass = k.pass;
      o.raise_ram_to_least = true;  // the long context's KV alone is past the budget
      const BudgetModel b = read_budget_model(fixture(name), o);
      const std::unique_ptr<Model> m = load_model(fixture(name), o);
      const std::string at = std::string(name) + " at " + std::to_string(k.context) + ", " + std::to_string(k.ram);
      EXPECT_EQ(b.context, k.context);
      EXPECT_EQ(b.kv_bytes, m->memory_plan().kv) << at;
      EXPECT_EQ(b.shape.trunk_bytes, m->memory_plan().trunk) << at;
      const PlannedStep step = planned_step(b, k.ram, k.threads, k.cap, k.pass);
      EXPECT_EQ(step.bytes, m->memory_plan().step) << at;
      EXPECT_EQ(step.rows, m->max_batch_rows()) << at;
      EXPECT_EQ(step.pass, m->max_pass_rows()) << at;
      rows_seen.insert(step.rows);
      passes_seen.insert(step.pass - step.rows);
    }
    // The widest step (4096 rows), the cap, and steps narrowed by the
    // context's scratch: the search was exercised, not only its ends.
    EXPECT_TRUE(rows_seen.count(4096) && rows_seen.count(100)) << name;
    EXPECT_GE(rows_seen.size(), 3u) << name;
    // Passes of a step's rows (--prefill-pass 1) and wider, as given and as
    // the budget's share allows.
    EXPECT_TRUE(passes_seen.count(0)) << name;
    EXPECT_GE(passes_seen.size(), 3u) << name;
  }
}

// The ds_mtp fixture packed into tmp/pack.
PackOptions packed_ds_mtp(const testfiles::TempDir& tmp) {
  PackOptions p;
  p.source = fixture("ds_mtp");
  p.out = tmp / "pack";
  pack_model(p);
  return p;
}

TEST(BudgetModel, APacksExpertsAreItsBlobs) {
  testfiles::TempDir tmp("strata-budget");
  const PackOptions p = packed_ds_mtp(tmp);
  const BudgetModel packed = read_budget_model(p.out, {}), source = read_budget_model(p.source, {});
  EXPECT_EQ(packed.kind, "pack");
  EXPECT_EQ(packed.shape.moe_layers, source.shape.moe_layers);
  EXPECT_EQ(packed.shape.experts, source.shape.experts);
  // A blob holds an expert's tensors and a header, aligned for O_DIRECT.
  EXPECT_GE(packed.shape.expert_bytes, source.shape.expert_bytes);
  EXPECT_LT(packed.shape.expert_bytes, source.shape.expert_bytes + 3 * 4096 + 4096);
  // Its experts are read from its drive file; the checkpoint's from its one shard.
  const Manifest man = Manifest::load(p.out);
  ASSERT_EQ(packed.expert_files.size(), 1u);
  EXPECT_EQ(packed.expert_files[0], fs::absolute(man.drive_file(p.out, 0)));
  ASSERT_EQ(source.expert_files.size(), 1u);
  EXPECT_EQ(source.expert_files[0], fs::absolute(p.source / "model.safetensors"));
  // The identity the loader gives it: `generate`'s heat is found under it.
  EXPECT_EQ(packed.identity, load_model(p.out, {})->identity());
  EXPECT_EQ(source.identity, load_model(p.source, {})->identity());
}

// A pack whose drive file is cut short, missing or a folder gets no
// prediction (nor a probe inside that folder): the error a run gives.
TEST(BudgetModel, APackThatCannotRunIsTheErrorARunGives) {
  testfiles::TempDir tmp("strata-budget-damaged");
  const PackOptions p = packed_ds_mtp(tmp);
  const fs::path blob = Manifest::load(p.out).drive_file(p.out, 0);
  auto both_refuse = [&](const std::string& phrase) {
    testfiles::expect_phrase(testfiles::error_message([&] { read_budget_model(p.out, {}); }), phrase);
    testfiles::expect_phrase(testfiles::error_message([&] { load_model(p.out, {}); }), phrase);
  };
  fs::resize_file(blob, fs::file_size(blob) - 4096);
  both_refuse("a damaged or truncated pack");
  fs::rename(blob, tmp / "kept");
  both_refuse("is not available");
  fs::create_directory(blob);
  both_refuse("is a directory");
}

// gpt-oss ships its experts as MXFP4 (U8 blocks beside biases and scales):
// the compute is timed in MXFP4, not in the format of whichever expert
// tensor sorts first (a bias).
TEST(BudgetModel, TheExpertsFormatIsTheirLargestTensors) {
  const BudgetModel b = read_budget_model(fixture("gptoss_mxfp4"), {});
  EXPECT_EQ(b.expert_dtype, "U8");
  EXPECT_STREQ(timed_format(b.expert_dtype), "MXFP4");
  EXPECT_STREQ(timed_format(read_budget_model(fixture("qwen_gqa"), {}).expert_dtype), "Q8_0");
  // The trunk's format is its largest matrix's (here lm_head, BF16, by the header).
  EXPECT_EQ(b.trunk_dtype, "BF16");
  // A GGUF of Q8_0 trunk and MXFP4 experts: each timed in its own.
  testfiles::TempDir tmp("strata-budget-formats");
  const fs::path gguf = tmp / "m.gguf";
  const CommandResult r = run_strata("synth --preset kimi-k2 --size 0.01 --quant q8_0+mxfp4 --format gguf --seed 3 --out " +
                                     gguf.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const BudgetModel mixed = read_budget_model(gguf, {});
  EXPECT_STREQ(timed_format(mixed.expert_dtype), "MXFP4");
  EXPECT_EQ(mixed.trunk_dtype, "Q8_0");
}

TEST(BudgetModel, ADenseModelIsAClearError) {
  EXPECT_THROW(read_budget_model(fixture("trained_draft_dense"), {}), Error);
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Without --drive the model's own expert file is probed, read only (nothing
// is written beside the model).
TEST(CliBudget, JsonAndSvgCarryThePrediction) {
  testfiles::TempDir tmp("strata-budget-cli");
  const fs::path svg = tmp / "chart.svg", model = fixture("ds_mtp");
  const std::vector<std::string> before = listing(model);
  const CommandResult r = run_strata("budget " + model.string() + " --ram 1 --probe-seconds 0.2 --threads 1 --json --svg " +
                                         svg.string(),
                                     "STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + tmp.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(listing(model), before);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["machine"]["drives"].size(), 1u);
  EXPECT_EQ(j["machine"]["drives"][0]["path"], fs::absolute(model / "model.safetensors").string());
  EXPECT_EQ(j["machine"]["drives"][0]["source"].get<std::string>().rfind("measured now", 0), 0u);
  EXPECT_GT(j["machine"]["drives"][0]["gbps"].get<double>(), 0.0);
  EXPECT_GT(j["machine"]["decode_compute_s"].get<double>(), 0.0);
  // What a token adds to its products: its guesses, the pick of its token;
  // a checkpoint's experts carry no checksums to hash.
  EXPECT_GT(j["machine"]["guess_compute_s"].get<double>(), 0.0);
  EXPECT_GT(j["machine"]["sample_s"].get<double>(), 0.0);
  EXPECT_EQ(j["machine"]["hash_s_per_byte"].get<double>(), 0.0);
  EXPECT_EQ(j["by_drives"].size(), 1u);
  EXPECT_GT(j["by_drives"][0]["token_compute_s"].get<double>(), 0.0);
  EXPECT_GT(j["by_drives"][0]["decode_tok_s"].get<double>(), 0.0);
  EXPECT_EQ(j["model"]["kind"], "hf");
  EXPECT_FALSE(j["verdict"].get<std::string>().empty());
  // The chart is a well-formed SVG document with one curve per drive count.
  const std::string check = "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
                            "assert d.documentElement.tagName == 'svg'; "
                            "assert len(d.getElementsByTagName('polyline')) == 1\" " + svg.string();
  EXPECT_EQ(std::system(check.c_str()), 0) << read_all(svg);
}

// A pack's reads are checksummed as the runs' --verify says: hashing them
// is compute a reading token pays (and with always, its cache hits too).
TEST(CliBudget, APacksReadsAreHashedAsTheRunsVerifyThem) {
  testfiles::TempDir tmp("strata-budget-verify");
  const PackOptions p = packed_ds_mtp(tmp);
  for (const std::string verify : {"", "off", "always"}) {
    SCOPED_TRACE("--verify " + verify);
    const CommandResult r =
        run_strata("budget " + p.out.string() + " --ram 1 --probe-seconds 0.2 --threads 1 --json" +
                       (verify.empty() ? "" : " --verify " + verify),
                   "STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + tmp.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json m = nlohmann::json::parse(r.out)["machine"];
    if (verify == "off")
      EXPECT_EQ(m["hash_s_per_byte"].get<double>(), 0.0);
    else
      EXPECT_GT(m["hash_s_per_byte"].get<double>(), 0.0);
    EXPECT_EQ(m["hash_hits"].get<bool>(), verify == "always");
  }
}

// A saved probe of the drive serves when it measured reads no larger than
// the reads an expert is read in and at least three quarters of them, at the
// depth strata reads at (16 in flight, or the deepest measured below it),
// not at the depth the drive liked best; one that measured only larger reads,
// or only far smaller ones, does not.
TEST(CliBudget, ASavedProbeOfTheDriveAtTheExpertsReadSizeIsUsed) {
  const fs::path model = fixture("ds_mtp"), file = model / "model.safetensors";
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  const uint64_t read = expert_read_bytes(read_budget_model(model, {}), {});
  ASSERT_GE(read, 4 * 4096u);  // a page less is still three quarters of it
  for (const uint64_t block : {read, read - 4096, uint64_t{4096}, uint64_t{16} << 20}) {
    testfiles::TempDir tmp("strata-budget-probe");
    ProbeResult saved;
    saved.backend = "io_uring";
    ProbeDrive d;
    d.path = model.string();
    d.device = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    // Faster at 4 than at strata's 16; depth 32: beyond strata's reads.
    d.results = {{block, 4, 3.0, {3.0}}, {block, 16, 1.5, {1.5}}, {block, 32, 9.0, {9.0}}};
    d.best_gbps = 9.0;
    saved.drives = {d};
    saved.combined = d;
    save_probe(saved, tmp / "probe.json");
    const CommandResult r = run_strata("budget " + model.string() + " --ram 1 --probe-seconds 0.2 --threads 1 --json",
                                       "STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + tmp.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json drive = nlohmann::json::parse(r.out)["machine"]["drives"][0];
    EXPECT_EQ(drive["depth"], 16);
    if (block == read || block == read - 4096) {
      EXPECT_EQ(drive["source"], "saved probe");
      EXPECT_EQ(drive["gbps"], 1.5);
    } else {
      EXPECT_EQ(drive["source"].get<std::string>().rfind("measured now", 0), 0u);
    }
  }
}

// A prompt step's experts are timed as the CPU runs them: one per thread
// where the step has enough of them for two threads (expert_threading, by
// the shapes alone: qwen_gqa's 128-token prompt), spread over the threads
// with one; either way a part of the prompt token's compute.
TEST(CliBudget, APromptsExpertsAreTimedAsTheStepRunsThem) {
  testfiles::TempDir tmp("strata-budget-experts");
  for (const auto& [threads, timed_as] : {std::pair{2, "one per thread"}, std::pair{1, "spread"}}) {
    SCOPED_TRACE(threads);
    const CommandResult r =
        run_strata("budget " + fixture("qwen_gqa").string() + " --ram 1 --probe-seconds 0.2 --prompt 128 --json --threads " +
                       std::to_string(threads),
                   "STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + tmp.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json m = nlohmann::json::parse(r.out)["machine"];
    EXPECT_EQ(m["prefill_experts_timed_as"], timed_as);
    EXPECT_GT(m["prefill_experts_s_per_token"].get<double>(), 0.0);
    EXPECT_LT(m["prefill_experts_s_per_token"].get<double>(), m["prefill_compute_s_per_token"].get<double>());
  }
}

// What earlier runs' reads got from the drive rates it, a decode's and a
// prompt's apart (storage/drive_rates.h): 400 MB in 0.3 s of busy time is
// 1.333 GB/s, 200 MB in 0.25 s 0.8; the saved probe's 1.5 only where no run
// of that phase is on record, or with --drive-rate probe, or when the file
// is not one (said on stderr).
TEST(CliBudget, TheRunsRatesOfTheDriveAreUsedOverItsProbe) {
  const fs::path model = fixture("ds_mtp"), file = model / "model.safetensors";
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  const uint64_t read = expert_read_bytes(read_budget_model(model, {}), {});
  testfiles::TempDir tmp("strata-budget-rates");
  ProbeResult saved;
  saved.backend = "io_uring";
  ProbeDrive d;
  d.path = model.string();
  d.device = device_string(st.st_dev);
  d.results = {{read, 16, 1.5, {1.5}}};
  d.best_gbps = 1.5;
  saved.drives = {d};
  saved.combined = d;
  save_probe(saved, tmp / "probe.json");
  const std::string env = "STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + tmp.path().string();
  const std::string args = "budget " + model.string() + " --ram 1 --probe-seconds 0.2 --threads 1 --json";
  DriveRates rates;
  rates.add(d.device, "x", ReadPhase::Decode, {300'000'000, 0.2, 5, ""});
  rates.add(d.device, "x", ReadPhase::Decode, {100'000'000, 0.1, 5, ""});
  save_drive_rates(rates, tmp / "drive_rates.json");
  struct Case {
    std::string flags;
    bool prefill_on_record;
    double decode, prompt;
    size_t decode_runs, prompt_runs;
  };
  for (const Case& c : {Case{"", false, 0.4 / 0.3, 1.5, 2, 0}, Case{"", true, 0.4 / 0.3, 0.8, 2, 1},
                        Case{" --drive-rate probe", true, 1.5, 1.5, 0, 0}}) {
    SCOPED_TRACE(c.flags + (c.prefill_on_record ? " with a prompt on record" : ""));
    if (c.prefill_on_record) {
      rates.add(d.device, "x", ReadPhase::Prefill, {200'000'000, 0.25, 14, ""});
      save_drive_rates(rates, tmp / "drive_rates.json");
    }
    const CommandResult r = run_strata(args + c.flags, env);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json drive = j["machine"]["drives"][0];
    EXPECT_DOUBLE_EQ(drive["gbps"].get<double>(), c.decode);
    EXPECT_DOUBLE_EQ(drive["prompt_gbps"].get<double>(), c.prompt);
    EXPECT_EQ(drive["probe_gbps"], 1.5);
    EXPECT_EQ(drive["decode_runs"], c.decode_runs);
    EXPECT_EQ(drive["prompt_runs"], c.prompt_runs);
    EXPECT_DOUBLE_EQ(j["by_drives"][0]["gbps"].get<double>(), c.decode);
    EXPECT_DOUBLE_EQ(j["by_drives"][0]["prompt_gbps"].get<double>(), c.prompt);
  }
  std::ofstream(tmp / "drive_rates.json") << "{broken";
  const CommandResult broken = run_strata(args, env);
  ASSERT_EQ(broken.exit_code, 0) << broken.err;
  EXPECT_NE(broken.err.find("drive_rates.json"), std::string::npos) << broken.err;
  EXPECT_EQ(nlohmann::json::parse(broken.out)["machine"]["drives"][0]["gbps"], 1.5);
  expect_clean_error(run_strata(args + " --drive-rate best", env), "--drive-rate");
}

// The model's guesses on record (the heat file's) set the factor its
// misses are read by: 2 − right ÷ predicted; fewer than 2048 guesses, the
// assumed one; without prefetch, no wrong guesses at all.
TEST(CliBudget, TheHeatsGuessesSetThePrefetchsReadFactor) {
  testfiles::TempDir tmp("strata-budget-guesses");
  const fs::path model = fixture("ds_mtp");
  const BudgetModel b = read_budget_model(model, {});
  struct Case {
    double predicted, right;
    std::string flags;
    double factor;
    std::string from;
  };
  for (const Case& c : {Case{5000, 3000, "", 1.4, "heat"}, Case{1000, 600, "", kPrefetchReadFactor, "default"},
                        Case{5000, 3000, " --prefetch off", 1.0, "no prefetch"}}) {
    SCOPED_TRACE(std::to_string(c.predicted) + c.flags);
    ExpertHeat heat(b.config.num_layers, b.config.n_routed_experts);
    heat.add(1, 0, 5);
    heat.add_guesses(c.predicted, c.right);
    heat.save(tmp / "heat.json", b.identity);
    const CommandResult r = run_strata("budget " + model.string() + " --ram 1 --probe-seconds 0.2 --threads 1 --json --heat " +
                                           (tmp / "heat.json").string() + c.flags,
                                       "STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + tmp.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json m = nlohmann::json::parse(r.out)["machine"];
    EXPECT_DOUBLE_EQ(m["prefetch_read_factor"].get<double>(), c.factor);
    EXPECT_EQ(m["prefetch_read_factor_from"], c.from);
    EXPECT_EQ(m["guesses"]["predicted"].get<double>(), c.predicted);
    EXPECT_EQ(m["guesses"]["right"].get<double>(), c.right);
  }
}

TEST(CliBudget, BadArgumentsAreCleanErrors) {
  // (Each of these stops before any measurement.)
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram -1"), "--ram");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --prompt 0"), "--prompt");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --prefill-pass 0"), "--prefill-pass");
  expect_clean_error(run_strata("budget " + fixture("trained_draft_dense").string() + " --ram 1"), "no routed experts");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram 1 --heat /nonexistent/h.json"),
                     "--heat");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram inf"), "--ram");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram 1 --drive /nonexistent/d"),
                     "not a folder");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram 1 --ctx 100000"), "--allow-long-ctx");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram 1 --prompt 129"),
                     "a prompt longer than the context of 128 tokens");
  // The parser's own refusals are one line too.
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram abc"), "--ram");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --threads 100000"), "--threads");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --temperature -1"), "--temperature");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --verify sometimes"), "--verify");
  expect_clean_error(run_strata("budget " + fixture("ds_mtp").string() + " --ram 1 --svg /nonexistent/dir/x.svg"),
                     "--svg");
  // A name longer than the filesystem takes: its path and the system's reason.
  const std::string too_long = "/tmp/" + std::string(300, 'a');
  const CommandResult r = run_strata("budget " + too_long);
  expect_clean_error(r, too_long + ": File name too long");
  EXPECT_EQ(r.err.find("filesystem error"), std::string::npos) << r.err;
}

// A model on a hub (nginx in a hub's layout, HF_ENDPOINT at it) and a GGUF
// file on a plain server are described from their headers alone: the same
// figures as the local copies, and for the sharded checkpoint exactly its
// config, index and each shard's 8 + header bytes fetched (counted here from
// the files).
TEST(CliBudget, ARemoteModelIsDescribedFromItsHeadersAlone) {
  testfiles::TempDir tmp("strata-budget-remote");
  constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
  const fs::path resolve = tmp / "srv" / "org" / "sharded" / "resolve", drive = tmp / "drive";
  fs::create_directories(resolve);
  fs::create_directories(tmp / "srv" / "files");
  fs::create_directories(drive);
  fs::create_directory_symlink(fixture("ds_sharded"), resolve / kCommit);
  fs::create_directory_symlink(kCommit, resolve / "main");
  const fs::path gguf = tmp / "srv" / "files" / "m.gguf";
  const CommandResult synth = run_strata("synth --preset qwen3-30b-a3b --size 0.01 --format gguf --seed 8 --out " +
                                         gguf.string());
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  testnet::LocalNginx nginx(tmp / "srv", "    location /org/ { add_header X-Repo-Commit " + std::string(kCommit) + "; }\n");
  ASSERT_TRUE(nginx.running()) << nginx.log();
  // Nothing of the machine's own setup reaches the runs; their temporary
  // folders go to one of the test's own, which must be empty after each.
  const fs::path scratch = tmp / "scratch";
  fs::create_directories(scratch);
  const std::string home = (tmp / "home").string();
  const std::string env = "env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_TOKEN_PATH -u AWS_PROFILE "
                          "-u AWS_ENDPOINT_URL STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + home + " HOME=" + home +
                          " HF_HOME=" + home + "/hf XDG_CACHE_HOME=" + home + "/cache TMPDIR=" + scratch.string() +
                          " HF_ENDPOINT=" + nginx.url();
  const auto scratch_is_empty = [&] { return fs::is_empty(scratch); };
  const std::string args = " --ram 1 --probe-seconds 0.2 --threads 1 --json --drive " + drive.string();
  const nlohmann::json::array_t same = {"total_bytes", "trunk_bytes", "expert_bytes", "moe_layers", "experts",
                                        "experts_per_token", "trunk_matrices", "expert_matrices", "context", "kv_bytes"};
  for (const auto& [remote, local] : {std::pair<std::string, fs::path>{"hf://org/sharded", fixture("ds_sharded")},
                                      {nginx.url() + "/files/m.gguf", gguf}}) {
    SCOPED_TRACE(remote);
    const CommandResult r = run_strata("budget " + remote + args, env);
    const CommandResult l = run_strata("budget " + local.string() + args, env);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(l.exit_code, 0) << l.err;
    const nlohmann::json rm = nlohmann::json::parse(r.out)["model"], lm = nlohmann::json::parse(l.out)["model"];
    for (const auto& key : same) EXPECT_EQ(rm[key.get<std::string>()], lm[key.get<std::string>()]) << key;
    EXPECT_EQ(rm["head_bytes"], lm["head_bytes"]);
    EXPECT_EQ(rm["kind"], lm["kind"]);
    EXPECT_EQ(rm["remote"], remote);
    EXPECT_EQ(rm["remote_commit"], remote.starts_with("hf://") ? kCommit : "");
    EXPECT_TRUE(lm["remote"].is_null());
    EXPECT_TRUE(scratch_is_empty());
    if (local.extension() == ".gguf") {
      // Its header in doubling prefixes from 1 MiB: far less than the file.
      EXPECT_LT(rm["headers_fetched_bytes"].get<uint64_t>(), fs::file_size(local) / 2);
      continue;
    }
    uint64_t headers = fs::file_size(local / "config.json") + fs::file_size(local / "model.safetensors.index.json");
    for (int i = 1; i <= 5; ++i) {
      std::ifstream in(local / ("model-0000" + std::to_string(i) + "-of-00005.safetensors"), std::ios::binary);
      uint64_t n = 0;
      in.read(reinterpret_cast<char*>(&n), 8);
      headers += 8 + n;
    }
    EXPECT_EQ(rm["headers_fetched_bytes"].get<uint64_t>(), headers);
  }
  // Its experts are on no drive here; a source that is not there; a file
  // that is not GGUF (said at once, not after 256 MiB of doubling).
  expect_clean_error(run_strata("budget hf://org/sharded --ram 1 --json", env), "give --drive");
  expect_clean_error(run_strata("budget hf://org/absent" + args, env), "org/absent");
  expect_clean_error(run_strata("budget " + nginx.url() + "/files/absent.gguf" + args, env), "absent.gguf");
  std::ofstream(tmp / "srv" / "files" / "not.gguf") << std::string(4096, 'x');
  expect_clean_error(run_strata("budget " + nginx.url() + "/files/not.gguf" + args, env), "not a GGUF file");
  EXPECT_TRUE(scratch_is_empty());
}

}  // namespace
}  // namespace strata
