// What was computed from a model's weights (a session's KV cache, the expert
// heat of earlier runs) is kept under the identity of the weights
// (model/weights_identity.h), not their path: a model replaced at the same
// path (issue 16: re-synthesized with other weights of the same shape, so
// only the files' times tell) drops both; one moved or copied with its file
// times kept keeps both.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "model/expert_heat.h"
#include "model/model.h"
#include "model/weights_identity.h"
#include "pack/packer.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "runtime/session.h"
#include "safetensors_writer.h"
#include "scoped_env.h"
#include "synth/synth.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";

// The same shape whatever the seed: a re-synthesized model differs from the
// first only in its values (and so in its files' times).
fs::path synth_model(const fs::path& out, uint64_t seed, synth::Format format = synth::Format::Safetensors) {
  synth::Request r;
  r.preset = "qwen3-30b-a3b";
  r.size_gb = 0.01;
  r.format = format;
  r.seed = seed;
  synth::WriteOptions o;
  o.threads = 2;
  o.force = true;
  // File times tick with the kernel's clock (a few milliseconds): a rewrite
  // within the same tick would keep them, which no real re-synthesis does.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  synth::write(synth::make_plan(r), out, o);
  return out;
}

// `cp -a`: the files and their modification times.
void copy_keeping_times(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  if (fs::is_regular_file(from)) {
    fs::last_write_time(to, fs::last_write_time(from));
    return;
  }
  for (const auto& e : fs::recursive_directory_iterator(from))
    fs::last_write_time(to / fs::relative(e.path(), from), fs::last_write_time(e.path()));
}

std::unique_ptr<Model> load_streamed(const fs::path& path) {
  LoadOptions o(2);
  o.stream = true;  // heat is kept by the streaming provider
  return load_model(path, o);
}

// What the model's heat file holds (the heat of earlier runs, as this load
// found it, once save_heat() wrote it back without a run in between).
double saved_heat(const Model& m) {
  return ExpertHeat::load(default_heat_path(m.identity()), m.identity(), m.config().num_layers,
                          m.config().n_routed_experts)
      .total();
}

TEST(WeightsIdentity, AReplacedModelDropsSessionAndHeatAMovedOneKeepsThem) {
  testfiles::TempDir tmp("strata-identity");
  // The expert heat goes to $STRATA_HOME: a folder of the test's own.
  testenv::ScopedEnv home("STRATA_HOME", (tmp / "home").string());
  const fs::path model = tmp / "m", moved = tmp / "moved", session = tmp / "s.bin";
  const std::vector<int32_t> first = {5, 9, 2, 7}, longer = {5, 9, 2, 7, 11, 3};
  GenerateOptions g;
  g.max_new_tokens = 3;

  synth_model(model, 1);
  std::string id;
  {
    auto m = load_streamed(model);
    id = m->identity();
    EXPECT_EQ(id.size(), 16u);
    Session s;
    generate(*m, first, g, s);
    save_session(session, *m, s);
    EXPECT_EQ(m->save_heat(), "");
    ASSERT_GT(saved_heat(*m), 0);
  }

  // Moved with its times: the same weights, so the session and the heat hold.
  copy_keeping_times(model, moved);
  {
    auto m = load_streamed(moved);
    EXPECT_EQ(m->identity(), id);
    std::string why;
    Session s = load_session(session, *m, &why);
    ASSERT_TRUE(s.cache) << why;
    EXPECT_EQ(generate(*m, longer, g, s).reused_tokens, static_cast<int64_t>(first.size()));
    EXPECT_EQ(m->save_heat(), "");  // before any run: what it found
  }
  {
    auto m = load_streamed(moved);
    EXPECT_EQ(m->save_heat(), "");
    EXPECT_GT(saved_heat(*m), 0);
  }

  // Other weights of the same shape at the same path: same tensor index,
  // same config.json, only the files' times differ.
  synth_model(model, 2);
  {
    auto m = load_streamed(model);
    EXPECT_NE(m->identity(), id);
    std::string why;
    const Session s = load_session(session, *m, &why);
    EXPECT_FALSE(s.cache);
    EXPECT_NE(why.find("starting afresh"), std::string::npos) << why;
    EXPECT_EQ(m->save_heat(), "");
    EXPECT_EQ(saved_heat(*m), 0);
  }
}

// Any weight file's time or size changes it; the path does not.
TEST(WeightsIdentity, ChangesWithAFileTimeNotWithThePath) {
  testfiles::TempDir tmp("strata-identity");
  copy_keeping_times(kModels / "k3_bf16", tmp / "k3");
  const std::string id = open_checkpoint(tmp / "k3").identity;
  EXPECT_EQ(open_checkpoint(kModels / "k3_bf16").identity, id);
  const fs::path shard = tmp / "k3" / "model-00002-of-00002.safetensors";
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(1));
  EXPECT_NE(open_checkpoint(tmp / "k3").identity, id);
  fs::last_write_time(shard, fs::last_write_time(kModels / "k3_bf16" / "model-00002-of-00002.safetensors"));
  EXPECT_EQ(open_checkpoint(tmp / "k3").identity, id);
}

TEST(WeightsIdentity, GgufFileMovedKeepsItRewrittenChangesIt) {
  testfiles::TempDir tmp("strata-identity");
  const fs::path gguf = synth_model(tmp / "m.gguf", 1, synth::Format::Gguf);
  const std::string id = open_checkpoint(gguf).identity;
  copy_keeping_times(gguf, tmp / "renamed.gguf");
  EXPECT_EQ(open_checkpoint(tmp / "renamed.gguf").identity, id);
  synth_model(gguf, 2, synth::Format::Gguf);
  EXPECT_NE(open_checkpoint(gguf).identity, id);
}

// A pack: its manifest, trunk and expert drive files.
TEST(WeightsIdentity, PackMovedKeepsItATouchedDriveFileChangesIt) {
  testfiles::TempDir tmp("strata-identity");
  PackOptions p;
  p.source = kModels / "ds_noqlora_dense2";
  p.out = tmp / "pack";
  pack_model(p);
  const std::string id = open_checkpoint(p.out).identity;
  EXPECT_NE(id, open_checkpoint(p.source).identity);
  copy_keeping_times(p.out, tmp / "moved");
  EXPECT_EQ(open_checkpoint(tmp / "moved").identity, id);
  bool touched = false;
  for (const auto& e : fs::directory_iterator(tmp / "moved"))
    if (e.path().extension() == ".bin") {
      fs::last_write_time(e.path(), fs::last_write_time(e.path()) + std::chrono::seconds(1));
      touched = true;
    }
  ASSERT_TRUE(touched);
  EXPECT_NE(open_checkpoint(tmp / "moved").identity, id);
}

// A pack whose drive folder is outside it, moved together with that folder:
// it loads through the manifest's relative path, and keeps its identity.
TEST(WeightsIdentity, PackMovedWithAnOutsideDriveKeepsIt) {
  testfiles::TempDir tmp("strata-identity");
  fs::create_directories(tmp / "a" / "drive");
  PackOptions p;
  p.source = kModels / "ds_noqlora_dense2";
  p.out = tmp / "a" / "pack";
  p.drives = {tmp / "a" / "drive"};
  pack_model(p);
  const std::string id = open_checkpoint(p.out).identity;
  copy_keeping_times(tmp / "a", tmp / "b");
  fs::remove_all(tmp / "a");
  EXPECT_EQ(open_checkpoint(tmp / "b" / "pack").identity, id);
}

}  // namespace
}  // namespace strata
