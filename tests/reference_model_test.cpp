// Compares strata with Hugging Face transformers on the tiny random-weight
// checkpoints under tests/fixtures/models (made by
// tools/make_reference_fixtures.py on a machine with transformers; Kimi K3's
// by tools/make_k3_fixtures.py's pure-PyTorch reference): greedy tokens must
// be identical and every logit within 1e-3. A fixture whose reference.json
// holds a "synth" request has no weights: the model is what `strata synth`
// writes for that request (so the reference also checks synth's layout).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "fixture_models.h"
#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/generator.h"
#include "synth/synth.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
constexpr float kTolerance = 1e-3f;

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  int64_t vocab = 0;
  std::vector<float> logits;  // [rows × vocab]
};

Reference load_reference(const fs::path& dir) {
  std::ifstream f(dir / "reference.json");
  nlohmann::json j = nlohmann::json::parse(f);
  Reference r;
  r.prompt = j["prompt_ids"].get<std::vector<int32_t>>();
  r.greedy = j["greedy_ids"].get<std::vector<int32_t>>();
  r.vocab = j["vocab_size"].get<int64_t>();
  const int64_t rows = j["n_rows"].get<int64_t>();
  std::ifstream lf(dir / j["logits_file"].get<std::string>(), std::ios::binary);
  r.logits.resize(static_cast<size_t>(rows * r.vocab));
  lf.read(reinterpret_cast<char*>(r.logits.data()), static_cast<std::streamsize>(r.logits.size() * sizeof(float)));
  EXPECT_TRUE(lf.good()) << "short logits file in " << dir;
  return r;
}

// Where the fixture's model is: the folder itself, or a model synthesized
// (once per process) from its reference.json's "synth" request.
fs::path model_dir(const fs::path& dir) {
  std::ifstream f(dir / "reference.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  if (!j.contains("synth")) return dir;
  static std::map<fs::path, fs::path> written;
  if (auto it = written.find(dir); it != written.end()) return it->second;
  const nlohmann::json& q = j["synth"];
  synth::Request r;
  r.preset = q.at("preset").get<std::string>();
  if (q.at("format").get<std::string>() != "safetensors") throw std::runtime_error("synth fixtures are safetensors");
  r.quant = q.at("quant").get<std::string>();
  r.hidden = q.at("hidden").get<int64_t>();
  r.layers = q.at("layers").get<int64_t>();
  r.experts = q.at("experts").get<int64_t>();
  r.vocab = q.at("vocab").get<int64_t>();
  r.seed = q.at("seed").get<uint64_t>();
  const fs::path out = fs::temp_directory_path() /
                       ("strata-reference-" + std::to_string(::getpid()) + "-" + dir.filename().string());
  synth::WriteOptions o;
  o.threads = 2;
  o.force = true;
  synth::write(synth::make_plan(r), out, o);
  written[dir] = out;
  // Removed when the test binary exits.
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      for (const auto& [from, to] : written) fs::remove_all(to, ec);
    }
  } cleanup;
  return out;
}

std::vector<fs::path> fixture_dirs() {
  std::vector<fs::path> dirs;
  // STRATA_REFERENCE_MODELS points the suite at other checkpoints made the
  // same way (e.g. a held-out set that is not in the repository).
  const char* env = std::getenv("STRATA_REFERENCE_MODELS");
  fs::path root = env ? fs::path(env) : fs::path(STRATA_FIXTURES_DIR) / "models";
  if (fs::exists(root))
    for (const auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "reference.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// NaN anywhere makes the difference NaN, which fails every `<=` check.
float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

LoadOptions options(const DeviceCase& c, int threads) { return on_device(c, LoadOptions{threads}); }

class ReferenceModel : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(ReferenceModel, PromptLogitsMatchTransformers) {
  const fs::path dir = GetParam().dir;
  Reference ref = load_reference(dir);
  auto model = load_model(model_dir(dir), options(GetParam(), 2));
  ASSERT_EQ(model->config().vocab_size, ref.vocab);
  auto cache = model->new_cache();
  std::vector<Row> rows;
  for (size_t i = 0; i < ref.prompt.size(); ++i) rows.push_back(Row{ref.prompt[i], int64_t(i), cache.get(), true});
  std::vector<float> logits(rows.size() * ref.vocab);
  model->forward(rows, logits.data());
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_LE(max_abs_diff(&logits[i * ref.vocab], &ref.logits[i * ref.vocab], ref.vocab), kTolerance)
        << "prompt position " << i;
}

TEST_P(ReferenceModel, GreedyContinuationMatchesTransformers) {
  const fs::path dir = GetParam().dir;
  Reference ref = load_reference(dir);
  auto model = load_model(model_dir(dir), options(GetParam(), 2));
  GenerateOptions opt;
  opt.max_new_tokens = static_cast<int>(ref.greedy.size());
  opt.keep_logits = true;
  GenerateResult r = generate(*model, ref.prompt, opt);
  ASSERT_EQ(r.tokens, ref.greedy);
  const size_t first = ref.prompt.size() - 1;
  for (size_t k = 0; k < r.logits.size(); ++k)
    EXPECT_LE(max_abs_diff(r.logits[k].data(), &ref.logits[(first + k) * ref.vocab], ref.vocab), kTolerance)
        << "generated token " << k;
}

// A position's logits are the same bits whether computed inside a prefill
// batch or one token at a time, at any thread count.
TEST_P(ReferenceModel, PrefillAndStepwiseDecodeAreBitIdentical) {
  const fs::path dir = GetParam().dir;
  Reference ref = load_reference(dir);
  auto batched_model = load_model(model_dir(dir), options(GetParam(), 2));
  auto single_model = load_model(model_dir(dir), options(GetParam(), 1));
  const int64_t V = ref.vocab;
  std::vector<int32_t> tokens = ref.prompt;
  tokens.insert(tokens.end(), ref.greedy.begin(), ref.greedy.end() - 1);

  auto cache = batched_model->new_cache();
  std::vector<Row> rows;
  for (size_t i = 0; i < tokens.size(); ++i) rows.push_back(Row{tokens[i], int64_t(i), cache.get(), true});
  std::vector<float> batched(rows.size() * V);
  batched_model->forward(rows, batched.data());

  auto step_cache = single_model->new_cache();
  std::vector<float> one(V);
  for (size_t i = 0; i < tokens.size(); ++i) {
    Row r{tokens[i], int64_t(i), step_cache.get(), true};
    single_model->forward(std::span<const Row>(&r, 1), one.data());
    ASSERT_EQ(0, std::memcmp(one.data(), &batched[i * V], V * sizeof(float))) << "position " << i;
  }
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ReferenceModel);
INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceModel, ::testing::ValuesIn(on_each_device(fixture_dirs())),
                         [](const auto& info) { return device_case_name(info.param); });

#if STRATA_HAVE_VULKAN
// The Vulkan backend against the CPU's on every fixture: the same greedy
// tokens, and every logit of the prompt and the continuation within 1e-4
// (vulkan_backend.h says why not the same bits).
class VulkanAgainstCpu : public ::testing::TestWithParam<fs::path> {};

TEST_P(VulkanAgainstCpu, SameTokensAndLogitsWithin1e4) {
  const fs::path dir = GetParam();
  Reference ref = load_reference(dir);
  GenerateOptions opt;
  opt.max_new_tokens = static_cast<int>(ref.greedy.size());
  opt.keep_logits = true;
  auto cpu = load_model(model_dir(dir), options(DeviceCase{dir, "cpu"}, 2));
  auto gpu = load_model(model_dir(dir), options(DeviceCase{dir, "vulkan"}, 2));
  const GenerateResult a = generate(*cpu, ref.prompt, opt), b = generate(*gpu, ref.prompt, opt);
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  float worst = 0;
  bool same = true;
  for (size_t k = 0; k < a.logits.size(); ++k) {
    const float d = max_abs_diff(a.logits[k].data(), b.logits[k].data(), ref.vocab);
    EXPECT_LE(d, 1e-4f) << "token " << k;
    worst = std::max(worst, d);
    same = same && std::memcmp(a.logits[k].data(), b.logits[k].data(), ref.vocab * sizeof(float)) == 0;
  }
  // For the record (docs/PERFORMANCE.md): how far this driver's logits are from the CPU's.
  std::printf("  %s: max |vulkan - cpu| = %g%s\n", dir.filename().c_str(), worst, same ? " (the same bits)" : "");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VulkanAgainstCpu, ::testing::ValuesIn(fixture_dirs()),
                         [](const auto& info) { return info.param.filename().string(); });
#endif

TEST(ReferenceFixtures, ArePresent) { EXPECT_GE(fixture_dirs().size(), 4u); }

}  // namespace
}  // namespace strata
