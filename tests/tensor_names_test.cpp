// The one tensor-name table (model/tensor_names.h) and the architectures'
// declared tensors (model/arch.h), checked against the names real files
// contain: the reference fixture checkpoints (made by transformers,
// tools/make_*), GGUF files strata synthesizes as llama.cpp's converter
// names them (tests/synth_test.cpp checks those names against llama.cpp's
// loader), and synth's Hugging Face tensor plans.
#include "model/tensor_names.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <utility>

#include <unistd.h>

#include "formats/gguf.h"
#include "model/arch.h"
#include "model/checkpoint.h"
#include "model/gguf_model.h"
#include "synth/synth.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Declared = std::set<std::pair<TensorKind, int64_t>>;

Declared declared(const ModelConfig& c, Naming naming) {
  Declared out;
  for (const auto& t : declared_tensors(c, naming)) out.insert(t);
  return out;
}

std::string describe(const Declared& d) {
  std::string s;
  for (const auto& [kind, layer] : d) {
    const TensorName& t = tensor_name(kind);
    s += std::string(t.hf ? t.hf : t.gguf) + " (layer " + std::to_string(layer) + ")\n";
  }
  return s;
}

// The (kind, layer) of every name; every name must parse, and a routed
// expert's index must be one the config has.
Declared parsed(const std::vector<std::string>& names, Naming naming, const ModelConfig& c,
                std::span<const TensorKind> kinds = {}) {
  Declared out;
  for (const std::string& n : names) {
    auto id = parse_tensor_name(n, naming, kinds);
    EXPECT_TRUE(id.has_value()) << n << " is not in the name table";
    if (!id) continue;
    EXPECT_LT(id->layer, c.num_layers + c.num_nextn_predict_layers) << n;  // MTP layers after the decoder's
    EXPECT_LT(id->expert, c.n_routed_experts) << n;
    out.emplace(id->kind, id->layer);
  }
  return out;
}

synth::Request request(const std::string& preset, synth::Format f) {
  synth::Request r;
  r.preset = preset;
  r.format = f;
  r.size_gb = 0.02;
  r.quant = f == synth::Format::Gguf ? "q8_0+mxfp4" : "";
  r.seed = 7;
  return r;
}

TEST(TensorNames, SpellingsAreLlamaCppsAndTransformers) {
  using enum TensorKind;
  EXPECT_EQ(tn(Naming::Gguf, FfnGateExps, "weight", 7), "blk.7.ffn_gate_exps.weight");
  EXPECT_EQ(tn(Naming::Hf, FfnGateExps, "weight", 7, 3), "model.layers.7.mlp.experts.3.gate_proj.weight");
  EXPECT_EQ(tn(Naming::Gguf, TokenEmbd, "weight"), "token_embd.weight");
  EXPECT_EQ(tn(Naming::Hf, Output, "weight"), "lm_head.weight");
  // As model.cpp binds the trunk's ends.
  EXPECT_EQ(tn(Naming::Hf, TokenEmbd, "weight"), "model.embed_tokens.weight");
  EXPECT_EQ(tn(Naming::Hf, OutputNorm, "weight"), "model.norm.weight");
  EXPECT_EQ(hf_name(Output), "lm_head");
  // HF names with no ".weight"/".bias" of their own keep none.
  EXPECT_EQ(tn(Naming::Gguf, ExpProbsB, "bias", 2), "blk.2.exp_probs_b.bias");
  EXPECT_EQ(tn(Naming::Hf, ExpProbsB, "bias", 2), "model.layers.2.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(tn(Naming::Hf, AttnSinks, "weight", 0), "model.layers.0.self_attn.sinks");
  EXPECT_EQ(hf_name(FfnGateUpExpsFused, 4), "model.layers.4.mlp.experts.gate_up_proj");
  EXPECT_THROW(tn(Naming::Hf, AttnQkv, "weight", 0), Error);  // GGUF only: cut into q, k, v
}

TEST(ArchSpecs, EveryArchitectureIsCompleteAndFoundByItsNames) {
  std::set<std::string> gguf_names;
  for (const ArchSpec* s : all_archs()) {
    SCOPED_TRACE(s->name);
    EXPECT_EQ(&arch_spec(s->arch), s);
    EXPECT_EQ(std::string(arch_name(s->arch)), s->name);
    // An architecture strata reads no GGUF of (Kimi K3) is not found by its GGUF name.
    EXPECT_EQ(arch_for_gguf(s->gguf_arch), s->gguf.read ? s : nullptr);
    EXPECT_EQ(s->gguf.read != nullptr, s->gguf.write != nullptr);
    EXPECT_TRUE(gguf_names.insert(s->gguf_arch).second);
    ASSERT_FALSE(s->hf_model_types.empty());
    for (const char* t : s->hf_model_types) EXPECT_EQ(arch_for_model_type(t), s);
    EXPECT_TRUE(s->hf.read && s->hf.validate && s->hf.write);
    EXPECT_TRUE(s->layer_is_moe && s->attention_scale && s->cache_widths && s->attention_widths && s->declare_layer &&
                s->bind_layer && s->bind_experts);
    // Every kind a GGUF file of it may hold has a GGUF spelling.
    for (TensorKind k : s->gguf_tensors) EXPECT_NE(tensor_name(k).gguf, nullptr);
  }
  EXPECT_EQ(arch_for_model_type("llama"), nullptr);
  EXPECT_EQ(supported_gguf_archs(), "deepseek2, qwen3moe, gpt-oss");
}

TEST(TensorNames, ParsingIsTheInverseOfNaming) {
  for (const TensorName& row : tensor_names()) {
    const TensorKind kind = row.kind;
    EXPECT_EQ(&tensor_name(kind), &row);
    for (Naming naming : {Naming::Hf, Naming::Gguf}) {
      if (!(naming == Naming::Hf ? row.hf : row.gguf)) continue;
      for (const char* suffix : {"weight", "bias", "weight_scale_inv"}) {
        const std::string name = tn(naming, kind, suffix, 12, 34);
        auto id = parse_tensor_name(name, naming);
        ASSERT_TRUE(id.has_value()) << name;
        // Two kinds may share a spelling in one naming (gpt-oss's router and
        // post-attention norm); the name must come back the same.
        EXPECT_EQ(tn(naming, id->kind, suffix, id->layer, id->expert), name);
        const std::span<const TensorKind> only(&kind, 1);
        EXPECT_EQ(parse_tensor_name(name, naming, only)->kind, kind) << name;
      }
    }
  }
  // The longest base wins; a longer name is not a suffix of a shorter one.
  EXPECT_EQ(parse_tensor_name("blk.3.attn_q_a_norm.weight", Naming::Gguf)->kind, TensorKind::AttnQANorm);
  EXPECT_EQ(parse_tensor_name("model.layers.1.mlp.gate_proj.weight", Naming::Hf)->kind, TensorKind::FfnGate);
  EXPECT_EQ(parse_tensor_name("model.layers.1.mlp.experts.down_proj_blocks", Naming::Hf)->suffix, "_blocks");
  EXPECT_FALSE(parse_tensor_name("blk.0.ffn_gate_inp_shexp.weight", Naming::Gguf).has_value());
  EXPECT_FALSE(parse_tensor_name("rope_freqs.weight", Naming::Gguf).has_value());
}

TEST(TensorNames, EveryFixtureTensorIsDeclaredByItsArchitectureAndViceVersa) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(STRATA_FIXTURES_DIR) / "models")) {
    if (!fs::exists(entry.path() / "config.json")) continue;
    SCOPED_TRACE(entry.path().string());
    Checkpoint ck = open_checkpoint(entry.path());
    const Declared got = parsed(ck.source->names(), Naming::Hf, ck.config);
    const Declared want = declared(ck.config, Naming::Hf);
    EXPECT_EQ(got, want) << "in the checkpoint:\n" << describe(got) << "declared:\n" << describe(want);
    // Routed experts are what the name table says they are, and what their
    // HF spelling says independently of the table (model.layers.L.mlp.experts.E.*,
    // Kimi K3's model.layers.L.block_sparse_moe.experts.E.*).
    for (const std::string& n : ck.source->names()) {
      const auto id = parse_tensor_name(n, Naming::Hf);
      ASSERT_TRUE(id.has_value()) << n;
      const bool spelled_expert =
          n.find(".mlp.experts.") != std::string::npos || n.find(".block_sparse_moe.experts.") != std::string::npos;
      EXPECT_EQ(tensor_name(id->kind).role == TensorRole::Expert, spelled_expert) << n;
      EXPECT_EQ(is_routed_expert_tensor(n), spelled_expert) << n;
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

TEST(TensorNames, SynthesizedGgufTensorsAreDeclaredByTheirArchitectureAndViceVersa) {
  const fs::path dir = fs::temp_directory_path() / ("strata-tensor-names-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* preset : {"kimi-k2", "qwen3-30b-a3b", "gpt-oss-20b"}) {
    SCOPED_TRACE(preset);
    synth::Plan plan = synth::make_plan(request(preset, synth::Format::Gguf));
    const fs::path out = dir / (std::string(preset) + ".gguf");
    synth::WriteOptions o;
    o.threads = 2;
    o.force = true;
    synth::write(plan, out, o);
    GgufFile f(out);
    const ModelConfig c = config_from_gguf(f);
    const ArchSpec& spec = arch_spec(c.arch);
    ASSERT_EQ(f.architecture(), spec.gguf_arch);
    std::vector<std::string> names;
    for (const TensorView& t : f.tensors()) names.push_back(t.name);
    const Declared got = parsed(names, Naming::Gguf, c, spec.gguf_tensors);
    const Declared want = declared(c, Naming::Gguf);
    EXPECT_EQ(got, want) << "in the file:\n" << describe(got) << "declared:\n" << describe(want);
    for (const std::string& n : names)
      EXPECT_EQ(is_routed_expert_tensor(n), n.find("_exps.") != std::string::npos) << n;
    // The HF view maps every tensor, under names the table parses.
    GgufHfView view(f, f.architecture(), c, out.string());
    EXPECT_TRUE(view.unmapped().empty());
    for (const std::string& n : view.names()) EXPECT_TRUE(parse_tensor_name(n, Naming::Hf).has_value()) << n;
  }
  fs::remove_all(dir);
}

TEST(TensorNames, SynthsHfPlansHoldExactlyTheDeclaredTensors) {
  for (const char* preset : {"deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b"}) {
    SCOPED_TRACE(preset);
    synth::Plan plan = synth::make_plan(request(preset, synth::Format::Safetensors));
    std::vector<std::string> names;
    for (const synth::TensorSpec& t : plan.tensors) names.push_back(t.name);
    EXPECT_EQ(parsed(names, Naming::Hf, plan.config), declared(plan.config, Naming::Hf));
  }
}

}  // namespace
}  // namespace strata
