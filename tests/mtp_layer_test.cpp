// DeepSeek-V3's next-token-prediction (MTP) layer (model/mtp_layer.h): read
// and kept, never run. A fixture checkpoint gets an MTP layer appended as
// DeepSeek-V3's release stores it (model.layers.N.*, N = num_hidden_layers):
// strata binds its weights as the file holds them, its logits are those of
// the same model without the layer, and pack + a streamed load keep it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/hf_checkpoint.h"
#include "formats/safetensors_writer.h"
#include "model/arch.h"
#include "model/checkpoint.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/tensor_names.h"
#include "pack/manifest.h"
#include "pack/packer.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "safetensors_writer.h"
#include "synth/synth.h"
#include "same_bits.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testfiles::TempDir;

const fs::path kFixture = fs::path(STRATA_FIXTURES_DIR) / "models" / "ds_yarn_grouped";

// The MTP layer's own tensors, as f32 values the test knows.
struct MtpValues {
  std::vector<float> enorm, hnorm, eh_proj, embed, head_norm, head;
};

struct Options {
  bool mtp_config = true;   // config.json names one MTP layer
  bool mtp_tensors = true;  // the checkpoint holds it
  std::string drop;         // a tensor of the MTP layer left out
};

// The fixture with an MTP layer N = num_hidden_layers: its decoder part a copy
// of layer N-1 (as model.layers.N.*), its own tensors random.
MtpValues write_with_mtp(const fs::path& dir, const Options& o) {
  fs::create_directories(dir);
  for (const char* f : {"generation_config.json"}) fs::copy_file(kFixture / f, dir / f);
  nlohmann::json config;
  std::ifstream(kFixture / "config.json") >> config;
  const int64_t N = config["num_hidden_layers"], hidden = config["hidden_size"], vocab = config["vocab_size"];
  if (o.mtp_config) config["num_nextn_predict_layers"] = 1;
  std::ofstream(dir / "config.json") << config.dump(2);

  HfCheckpoint src(kFixture);
  std::vector<SafetensorsOut> out;
  std::vector<std::string> names;  // keeps the renamed names alive
  names.reserve(1000);
  const std::string last = "model.layers." + std::to_string(N - 1) + ".";
  for (const std::string& name : src.names()) {
    const TensorView& t = src.get(name);
    out.push_back({name, t.dtype, t.shape, t.data, t.nbytes});
    if (o.mtp_tensors && name.starts_with(last)) {
      names.push_back("model.layers." + std::to_string(N) + "." + name.substr(last.size()));
      out.push_back({names.back(), t.dtype, t.shape, t.data, t.nbytes});
    }
  }
  MtpValues v;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.5f);
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(static_cast<size_t>(n));
    for (float& f : x) f = d(rng);
  };
  fill(v.enorm, hidden);
  fill(v.hnorm, hidden);
  fill(v.eh_proj, hidden * 2 * hidden);
  fill(v.embed, vocab * hidden);
  fill(v.head_norm, hidden);
  fill(v.head, vocab * hidden);
  auto add = [&](TensorKind k, const std::vector<float>& x, std::vector<int64_t> shape) {
    const std::string name = tn(Naming::Hf, k, "weight", N);
    if (!o.mtp_tensors || name == o.drop) return;
    names.push_back(name);
    out.push_back({names.back(), DType::F32, std::move(shape), x.data(), x.size() * sizeof(float)});
  };
  using enum TensorKind;
  add(NextnENorm, v.enorm, {hidden});
  add(NextnHNorm, v.hnorm, {hidden});
  add(NextnEhProj, v.eh_proj, {hidden, 2 * hidden});
  add(NextnEmbedTokens, v.embed, {vocab, hidden});
  add(NextnSharedHeadNorm, v.head_norm, {hidden});
  add(NextnSharedHeadHead, v.head, {vocab, hidden});
  write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}});
  return v;
}

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Generated generate_with(Model& m) {
  GenerateOptions g;
  g.max_new_tokens = 5;
  g.keep_logits = true;
  g.sampling = {1.0f, 3};
  GenerateResult r = generate(m, {5, 17, 3, 42, 9}, g);
  return {r.tokens, r.logits};
}

LoadOptions quiet(bool stream = false) {
  LoadOptions o;
  o.threads = 2;
  o.heat = "none";
  o.stream = stream;
  if (stream) o.cache_slots = 8;
  return o;
}

std::vector<float> row_values(const kernels::WeightMatrix& m) {
  EXPECT_EQ(m.dtype, DType::F32);
  std::vector<float> v(static_cast<size_t>(m.out * m.in));
  std::memcpy(v.data(), m.data, v.size() * sizeof(float));
  return v;
}

void expect_bound_as_written(const Model& m, const MtpValues& v) {
  const ModelConfig& c = m.config();
  ASSERT_EQ(c.num_nextn_predict_layers, 1);
  ASSERT_EQ(m.mtp_layers().size(), 1u);
  const MtpLayer& mtp = m.mtp_layers()[0];
  const size_t h = static_cast<size_t>(c.hidden_size);
  EXPECT_EQ(std::vector<float>(mtp.head.enorm, mtp.head.enorm + h), v.enorm);
  EXPECT_EQ(std::vector<float>(mtp.head.hnorm, mtp.head.hnorm + h), v.hnorm);
  EXPECT_EQ(std::vector<float>(mtp.head.head_norm, mtp.head.head_norm + h), v.head_norm);
  EXPECT_EQ(mtp.head.eh_proj.in, 2 * c.hidden_size);
  EXPECT_EQ(row_values(mtp.head.eh_proj), v.eh_proj);
  EXPECT_EQ(row_values(mtp.head.embed), v.embed);
  EXPECT_EQ(row_values(mtp.head.head), v.head);
  // The decoder part: a whole MoE layer, its routed experts bound too.
  ASSERT_TRUE(mtp.layer.moe);
  ASSERT_TRUE(mtp.layer.attention);
  EXPECT_NE(mtp.layer.attn_norm, nullptr);
}

TEST(MtpLayer, IsDeclaredUnderBothSpellings) {
  using enum TensorKind;
  EXPECT_EQ(tn(Naming::Hf, NextnEhProj, "weight", 61), "model.layers.61.eh_proj.weight");
  EXPECT_EQ(tn(Naming::Hf, NextnSharedHeadHead, "weight", 61), "model.layers.61.shared_head.head.weight");
  EXPECT_EQ(tn(Naming::Gguf, NextnSharedHeadHead, "weight", 61), "blk.61.nextn.shared_head_head.weight");
  EXPECT_EQ(tn(Naming::Gguf, NextnEmbedTokens, "weight", 61), "blk.61.nextn.embed_tokens.weight");
  // Not routed experts: the layer's experts are; they stream in a model that has the layer.
  Checkpoint ck = open_checkpoint(kFixture);
  EXPECT_FALSE(is_routed_expert_tensor("model.layers.3.embed_tokens.weight"));
  EXPECT_TRUE(is_streamed_expert_tensor("model.layers.2.mlp.experts.1.up_proj.weight", ck.config));
  EXPECT_TRUE(is_routed_expert_tensor("model.layers.3.mlp.experts.1.up_proj.weight"));
  EXPECT_FALSE(is_streamed_expert_tensor("model.layers.3.mlp.experts.1.up_proj.weight", ck.config));  // no such layer
  EXPECT_FALSE(is_streamed_expert_tensor("blk.3.ffn_up_exps.weight", ck.config));
  // A model with an MTP layer streams that layer's experts too.
  const Checkpoint with = open_checkpoint(fs::path(STRATA_FIXTURES_DIR) / "models" / "ds_mtp");
  const std::string n = std::to_string(with.config.num_layers);
  ASSERT_EQ(with.config.num_nextn_predict_layers, 1);
  EXPECT_TRUE(is_streamed_expert_tensor("model.layers." + n + ".mlp.experts.1.up_proj.weight", with.config));
  EXPECT_FALSE(is_streamed_expert_tensor("model.layers." + n + ".eh_proj.weight", with.config));
}

TEST(MtpLayer, IsBoundAsTheFileHoldsItAndChangesNoLogits) {
  TempDir tmp("strata-mtp");
  const MtpValues v = write_with_mtp(tmp.path() / "mtp", {});
  Checkpoint ck = open_checkpoint(tmp.path() / "mtp");
  EXPECT_TRUE(ck.notes.empty());
  // Every tensor of the file is declared, the MTP layer's too, and every
  // declared tensor is in the file.
  std::set<std::pair<TensorKind, int64_t>> declared, held;
  for (const auto& t : declared_tensors(ck.config, Naming::Hf)) declared.insert(t);
  for (const std::string& name : ck.source->names()) {
    const auto id = parse_tensor_name(name, Naming::Hf);
    ASSERT_TRUE(id) << name;
    held.emplace(id->kind, id->layer);
  }
  EXPECT_EQ(declared, held);
  EXPECT_TRUE(declared.contains({TensorKind::NextnEhProj, 3}));
  EXPECT_TRUE(declared.contains({TensorKind::FfnGateExps, 3}));

  auto with = load_model(tmp.path() / "mtp", quiet());
  expect_bound_as_written(*with, v);
  auto without = load_model(kFixture, quiet());
  EXPECT_TRUE(without->mtp_layers().empty());
  const Generated a = generate_with(*without), b = generate_with(*with);
  expect_same_bits(a.tokens, a.logits, b.tokens, b.logits);

  // Streamed in place: the MTP experts are in the catalog, the logits the same.
  auto streamed = load_model(tmp.path() / "mtp", quiet(true));
  expect_bound_as_written(*streamed, v);
  const Generated s = generate_with(*streamed);
  expect_same_bits(a.tokens, a.logits, s.tokens, s.logits);
}

TEST(MtpLayer, PackStreamsItsExpertsAndAStreamedLoadBindsIt) {
  TempDir tmp("strata-mtp");
  const MtpValues v = write_with_mtp(tmp.path() / "mtp", {});
  PackOptions p;
  p.source = tmp.path() / "mtp";
  p.out = tmp.path() / "pack";
  pack_model(p);
  const Manifest manifest = Manifest::load(p.out);
  // The MTP layer's experts are blobs after the decoder layers'; the rest
  // of the layer is in the trunk.
  ASSERT_EQ(manifest.experts.size(), 4u);
  EXPECT_EQ(manifest.experts[3].size(), manifest.experts[2].size());
  EXPECT_FALSE(manifest.tensors.contains("model.layers.3.mlp.experts.0.gate_proj.weight"));
  EXPECT_TRUE(manifest.tensors.contains("model.layers.3.eh_proj.weight"));
  EXPECT_FALSE(manifest.tensors.contains("model.layers.2.mlp.experts.0.gate_proj.weight"));

  auto packed = load_model(p.out, quiet(true));
  expect_bound_as_written(*packed, v);
  auto without = load_model(kFixture, quiet());
  const Generated a = generate_with(*without), b = generate_with(*packed);
  expect_same_bits(a.tokens, a.logits, b.tokens, b.logits);
}

TEST(MtpLayer, ConfigNamingAnAbsentLayerLoadsWithoutItAndSaysSo) {
  TempDir tmp("strata-mtp");
  write_with_mtp(tmp.path() / "none", {.mtp_config = true, .mtp_tensors = false, .drop = ""});
  Checkpoint ck = open_checkpoint(tmp.path() / "none");
  EXPECT_EQ(ck.config.num_nextn_predict_layers, 0);
  ASSERT_EQ(ck.notes.size(), 1u);
  EXPECT_NE(ck.notes[0].find("model.layers.3.eh_proj.weight is absent"), std::string::npos) << ck.notes[0];
  LoadOptions o = quiet();
  std::vector<std::string> notices;
  o.notice = [&](const std::string& s) { notices.push_back(s); };
  auto m = load_model(tmp.path() / "none", o);
  EXPECT_TRUE(m->mtp_layers().empty());
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0], ck.notes[0]);
}

TEST(MtpLayer, APartLayerIsAClearErrorNamingTheMissingTensor) {
  TempDir tmp("strata-mtp");
  write_with_mtp(tmp.path() / "part", {.mtp_config = true, .mtp_tensors = true, .drop = "model.layers.3.hnorm.weight"});
  try {
    load_model(tmp.path() / "part", quiet());
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.3.hnorm.weight"), std::string::npos) << e.what();
  }
}

// A synthesized DeepSeek-V3 GGUF, rewritten with an MTP layer as llama.cpp's
// converters write one: blk.N holding a copy of blk.N-1 plus blk.N.nextn.*,
// block_count counting it and nextn_predict_layers = 1 (`tensors`: false
// writes only the metadata, as a file whose layer was dropped).
void write_gguf_with_mtp(const fs::path& from, const fs::path& to, bool tensors, std::vector<float>& enorm) {
  GgufFile src(from);
  const ModelConfig c = config_from_gguf(src);
  const int64_t N = c.num_layers, hidden = c.hidden_size;
  GgufWriter w(static_cast<uint32_t>(src.alignment()));
  for (const auto& [key, value] : src.metadata())
    if (key != "general.alignment" && key != "deepseek2.block_count") w.set(key, GgufMeta::copy_of(value));
  w.set_u32("deepseek2.block_count", static_cast<uint32_t>(N + 1));
  w.set_u32("deepseek2.nextn_predict_layers", 1);
  std::vector<std::pair<const void*, size_t>> pieces;
  const std::string last = "blk." + std::to_string(N - 1) + ".";
  std::vector<TensorView> copies;
  for (const TensorView& t : src.tensors()) {
    w.add_tensor(t.name, t.dtype, t.shape);
    pieces.emplace_back(t.data, t.nbytes);
    if (tensors && t.name.starts_with(last)) copies.push_back(t);
  }
  for (const TensorView& t : copies) {
    w.add_tensor("blk." + std::to_string(N) + "." + t.name.substr(last.size()), t.dtype, t.shape);
    pieces.emplace_back(t.data, t.nbytes);
  }
  static std::vector<std::vector<float>> keep;
  keep.clear();
  keep.reserve(8);
  auto add = [&](TensorKind k, std::vector<int64_t> shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    keep.emplace_back(n);
    for (size_t i = 0; i < n; ++i) keep.back()[i] = 0.01f * static_cast<float>((i * 7 + keep.size()) % 13) - 0.05f;
    w.add_tensor(tn(Naming::Gguf, k, "weight", N), DType::F32, shape);
    pieces.emplace_back(keep.back().data(), n * sizeof(float));
  };
  if (tensors) {
    using enum TensorKind;
    add(NextnENorm, {hidden});
    enorm = keep.back();
    add(NextnHNorm, {hidden});
    add(NextnEhProj, {hidden, 2 * hidden});
    add(NextnEmbedTokens, {c.vocab_size, hidden});
    add(NextnSharedHeadNorm, {hidden});
    add(NextnSharedHeadHead, {c.vocab_size, hidden});
  }
  std::ofstream out(to, std::ios::binary);
  w.write_header(out);
  for (const auto& [data, bytes] : pieces) w.write_data(out, data, bytes);
  w.finish(out);
}

TEST(MtpLayer, GgufNextnTensorsAreBoundAndChangeNoLogits) {
  TempDir tmp("strata-mtp");
  synth::Request r;
  r.preset = "deepseek-v3";
  r.format = synth::Format::Gguf;
  r.size_gb = 0.02;
  r.seed = 7;
  synth::WriteOptions wo;
  wo.threads = 2;
  wo.force = true;
  synth::write(synth::make_plan(r), tmp.path() / "plain.gguf", wo);
  std::vector<float> enorm;
  write_gguf_with_mtp(tmp.path() / "plain.gguf", tmp.path() / "mtp.gguf", true, enorm);

  Checkpoint ck = open_checkpoint(tmp.path() / "mtp.gguf");
  const int64_t N = open_checkpoint(tmp.path() / "plain.gguf").config.num_layers;
  EXPECT_EQ(ck.config.num_layers, N);  // block_count less the MTP layer
  EXPECT_EQ(ck.config.num_nextn_predict_layers, 1);
  EXPECT_TRUE(ck.notes.empty());
  EXPECT_TRUE(ck.source->find("model.layers." + std::to_string(N) + ".eh_proj.weight"));
  EXPECT_TRUE(ck.source->find("model.layers." + std::to_string(N) + ".mlp.experts.1.up_proj.weight"));

  auto with = load_model(tmp.path() / "mtp.gguf", quiet());
  ASSERT_EQ(with->mtp_layers().size(), 1u);
  const MtpHead& head = with->mtp_layers()[0].head;
  EXPECT_EQ(std::vector<float>(head.enorm, head.enorm + with->config().hidden_size), enorm);
  auto without = load_model(tmp.path() / "plain.gguf", quiet());
  const Generated a = generate_with(*without), b = generate_with(*with);
  expect_same_bits(a.tokens, a.logits, b.tokens, b.logits);

  // The key without the tensors: loaded without, said so.
  write_gguf_with_mtp(tmp.path() / "plain.gguf", tmp.path() / "dropped.gguf", false, enorm);
  Checkpoint dropped = open_checkpoint(tmp.path() / "dropped.gguf");
  EXPECT_EQ(dropped.config.num_layers, N);
  EXPECT_EQ(dropped.config.num_nextn_predict_layers, 0);
  EXPECT_FALSE(dropped.notes.empty());
}

}  // namespace
}  // namespace strata
