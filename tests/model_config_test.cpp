// Config reading for both families: both rope spellings, optional fields,
// and clear errors for contradictory configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "bounded_child.h"
#include "model/model_config.h"
#include "safetensors_writer.h"
#include "util/error.h"

namespace strata {
namespace {

using nlohmann::json;

json deepseek() {
  return json::parse(R"({
    "model_type": "deepseek_v3", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
    "moe_intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
    "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1, "n_group": 4, "topk_group": 2,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": true,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "q_lora_rank": null, "kv_lora_rank": 16,
    "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "max_position_embeddings": 163840,
    "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
      "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},
    "eos_token_id": 1, "bos_token_id": 0})");
}

json qwen() {
  return json::parse(R"({
    "model_type": "qwen3_moe", "vocab_size": 500, "hidden_size": 64, "intermediate_size": 96,
    "moe_intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 24, "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 2,
    "mlp_only_layers": [0], "norm_topk_prob": false, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "eos_token_id": [5, 6]})");
}

TEST(ModelConfig, ReadsLegacyRopeScalingSpelling) {
  ModelConfig c = ModelConfig::from_json(deepseek(), "config.json");
  EXPECT_EQ(c.arch, Arch::DeepseekV3);
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c.layer_is_moe(0));
  EXPECT_TRUE(c.layer_is_moe(1));
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{1});
  // YaRN mscale sharpens the softmax: (0.1·ln 40 + 1)² / sqrt(24).
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.attention_scale(), m * m / std::sqrt(24.0), 1e-12);
}

TEST(ModelConfig, ReadsRopeParametersSpelling) {
  json j = deepseek();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 50000.0}, {"factor", 4.0},
                          {"original_max_position_embeddings", 64}};
  ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
}

TEST(ModelConfig, QwenSparseStepAndDenseLayers) {
  ModelConfig c = ModelConfig::from_json(qwen(), "config.json");
  EXPECT_EQ(c.arch, Arch::Qwen3Moe);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_FALSE(c.layer_is_moe(0));  // mlp_only_layers
  EXPECT_TRUE(c.layer_is_moe(1));
  EXPECT_FALSE(c.layer_is_moe(2));  // (2 + 1) % 2 != 0
  EXPECT_TRUE(c.layer_is_moe(3));
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{5, 6}));
}

TEST(ModelConfig, GptOssReleaseSpellingAndDefaults) {
  json j = json::parse(R"({
    "model_type": "gpt_oss", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "num_local_experts": 8, "experts_per_token": 2, "sliding_window": 8, "rms_norm_eps": 1e-5,
    "rope_theta": 150000, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
      "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": false},
    "quantization_config": {"quant_method": "mxfp4"}})");
  ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.arch, Arch::GptOss);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 96);
  EXPECT_TRUE(c.mxfp4_experts);
  EXPECT_TRUE(c.attention_sinks);
  EXPECT_FALSE(c.rope.truncate);
  // Without layer_types, even layers slide and odd layers see everything.
  EXPECT_EQ(c.layer_window(0), std::optional<int64_t>(8));
  EXPECT_EQ(c.layer_window(1), std::nullopt);
  EXPECT_EQ(c.layer_window(2), std::optional<int64_t>(8));
  EXPECT_NEAR(c.attention_scale(), 1.0 / std::sqrt(32.0), 1e-12);
  j["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_THROW(ModelConfig::from_json(j, "config.json"), Error);
}

void expect_error(const json& j, const std::string& phrase) {
  try {
    ModelConfig::from_json(j, "dir/config.json");
    FAIL() << "expected an error mentioning '" << phrase << "'";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("dir/config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(phrase), std::string::npos) << msg;
  }
}

TEST(ModelConfig, ContradictionsAreClearErrors) {
  json j = deepseek();
  j["n_group"] = 3;
  expect_error(j, "multiple of n_group");
  j = deepseek();
  j["topk_group"] = 5;
  expect_error(j, "topk_group");
  j = deepseek();
  j["num_experts_per_tok"] = 17;
  expect_error(j, "num_experts_per_tok");
  j = deepseek();
  j["num_experts_per_tok"] = 9;  // only 2 groups of 4 can be chosen
  expect_error(j, "selected groups");
  j = deepseek();
  j["first_k_dense_replace"] = 9;
  expect_error(j, "first_k_dense_replace");
  j = deepseek();
  j["num_key_value_heads"] = 2;
  expect_error(j, "num_key_value_heads");
  j = qwen();
  j["num_key_value_heads"] = 3;
  expect_error(j, "multiple of num_key_value_heads");
  j = qwen();
  j.erase("head_dim");
  j["hidden_size"] = 66;
  expect_error(j, "head_dim");
  j = deepseek();
  j["model_type"] = "llama";
  expect_error(j, "unsupported model_type");
  j = deepseek();
  j.erase("kv_lora_rank");
  expect_error(j, "kv_lora_rank");
  j = deepseek();
  j["hidden_size"] = "64";
  expect_error(j, "must be an integer");
  j = deepseek();
  j["rope_scaling"]["type"] = "dynamic";
  expect_error(j, "unsupported rope type");
  j = deepseek();
  j["quantization_config"] = {{"quant_method", "gptq"}};
  expect_error(j, "quant_method");
  j = deepseek();
  j["vocab_size"] = -1;
  expect_error(j, "vocab_size");
}

// Kimi K3's published config.json (moonshotai/Kimi-K3, as quoted field for
// field by the public implementations that load it; docs/kimi_k3.md), its
// text_config read as the text model: the layer lists are 1-based.
json kimi_k3() {
  json kda = json::array(), full = {4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93};
  for (int l = 1; l <= 93; ++l)
    if (std::find(full.begin(), full.end(), l) == full.end()) kda.push_back(l);
  json text = json::parse(R"({
    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "attn_res_block_size": 12,
    "eos_token_id": 163586, "first_k_dense_replace": 1, "hidden_act": "situ", "hidden_size": 7168,
    "intermediate_size": 33792, "kv_lora_rank": 512, "latent_moe_use_norm": true,
    "linear_attn_config": {"gate_lower_bound": -5.0, "head_dim": 128, "num_heads": 96, "short_conv_kernel_size": 4,
                           "use_full_rank_gate": true},
    "max_position_embeddings": 1048576, "mla_use_nope": true, "mla_use_output_gate": true,
    "model_type": "kimi_linear", "moe_intermediate_size": 3072, "moe_layer_freq": 1, "moe_renormalize": true,
    "moe_router_activation_func": "sigmoid", "num_attention_heads": 96, "num_expert_group": 1,
    "num_experts": 896, "num_experts_per_token": 16, "num_hidden_layers": 93, "num_key_value_heads": 96,
    "num_nextn_predict_layers": 0, "num_shared_experts": 2, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"format": "mxfp4-pack-quantized", "quant_method": "compressed-tensors"},
    "rms_norm_eps": 1e-05, "routed_expert_hidden_size": 3584, "routed_scaling_factor": 1.0,
    "tie_word_embeddings": false, "topk_group": 1, "use_grouped_topk": true, "v_head_dim": 128,
    "vocab_size": 163840})");
  text["linear_attn_config"]["kda_layers"] = kda;
  text["linear_attn_config"]["full_attn_layers"] = full;
  return {{"architectures", {"KimiK3ForConditionalGeneration"}}, {"bos_token_id", 163584}, {"eos_token_id", 163586},
          {"model_type", "kimi_k3"}, {"pad_token_id", 163839}, {"tie_word_embeddings", false}, {"text_config", text}};
}

TEST(ModelConfig, ReadsKimiK3AsPublished) {
  const ModelConfig c = ModelConfig::from_json(kimi_k3(), "config.json");
  EXPECT_EQ(c.arch, Arch::KimiK3);
  EXPECT_EQ(c.num_layers, 93);
  int64_t kda = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) kda += c.layer_is_kda(l);
  EXPECT_EQ(kda, 69);
  EXPECT_TRUE(c.layer_is_kda(0));
  EXPECT_TRUE(c.layer_is_kda(2));
  EXPECT_FALSE(c.layer_is_kda(3));   // "4" in full_attn_layers
  EXPECT_FALSE(c.layer_is_kda(91));  // "92"
  EXPECT_FALSE(c.layer_is_kda(92));  // "93"
  EXPECT_FALSE(c.layer_is_moe(0));
  EXPECT_TRUE(c.layer_is_moe(1));
  EXPECT_TRUE(c.layer_is_moe(92));
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.kda_heads * c.kda_head_dim, 12288);
  EXPECT_EQ(c.n_routed_experts, 896);
  EXPECT_EQ(c.num_experts_per_tok, 16);
  EXPECT_EQ(c.latent_width, 3584);
  EXPECT_TRUE(c.mxfp4_experts);
  EXPECT_TRUE(c.mla_nope && c.mla_output_gate);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{163586});
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 1.0 / std::sqrt(192.0));
}

// `base` edited by `edit` is refused with an error naming `phrase`.
void expect_refused(const json& base, const std::function<void(json&)>& edit, const std::string& phrase) {
  json j = base;
  edit(j);
  try {
    ModelConfig::from_json(j, "config.json");
    ADD_FAILURE() << "accepted: " << phrase;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, KimiK3RefusesWhatItDoesNotRun) {
  auto refuses = [](const std::function<void(json&)>& edit, const std::string& phrase) {
    expect_refused(kimi_k3(), edit, phrase);
  };
  refuses([](json& j) { j.erase("text_config"); }, "text_config");
  refuses([](json& j) { j["text_config"]["linear_attn_config"].erase("gate_lower_bound"); }, "gate_lower_bound");
  refuses([](json& j) { j["text_config"]["linear_attn_config"]["full_attn_layers"].push_back(1); }, "listed twice");
  refuses([](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].push_back(94); }, "layer 94");
  refuses([](json& j) { j["text_config"]["hidden_act"] = "gelu"; }, "hidden_act");
  refuses([](json& j) { j["text_config"]["mla_use_nope"] = false; }, "mla_use_nope");
  refuses([](json& j) { j["text_config"]["quantization_config"]["format"] = "int4-pack-quantized"; }, "int4-pack-quantized");
  refuses([](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"][1] = 1; }, "listed twice");
  refuses([](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].erase(0); }, "neither");
  refuses([](json& j) { j["text_config"]["attn_res_block_size"] = int64_t{1} << 62; }, "attn_res_block_size");
  refuses([](json& j) { j["text_config"]["num_hidden_layers"] = int64_t{1} << 40; }, "num_hidden_layers");
  refuses([](json& j) { j["text_config"].erase("activation_situ_linear_beta"); }, "activation_situ");
  refuses([](json& j) { j["text_config"]["linear_attn_config"]["head_dim"] = 1024; }, "head_dim");
}

// compressed-tensors as the fixtures ds_int4_ct / qwen_mxfp4_ct hold it
// (tools/make_reference_fixtures.py: Kimi-K2-Thinking's config, the MXFP4
// format only in its group), and what is refused with the field named.
TEST(ModelConfig, CompressedTensorsConfigs) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  const fs::path models = fs::path(STRATA_FIXTURES_DIR) / "models";
  const ModelConfig k2 = ModelConfig::from_file((models / "ds_int4_ct" / "config.json").string());
  EXPECT_EQ(k2.compressed_format, "pack-quantized");
  EXPECT_FALSE(k2.mxfp4_experts);
  const ModelConfig q = ModelConfig::from_file((models / "qwen_mxfp4_ct" / "config.json").string());
  EXPECT_EQ(q.compressed_format, "mxfp4-pack-quantized");
  EXPECT_TRUE(q.mxfp4_experts);
  std::ifstream f(models / "ds_int4_ct" / "config.json");
  const json base = json::parse(f);
  auto refuses = [&](const std::function<void(json&)>& edit, const std::string& phrase) {
    expect_refused(base, edit, phrase);
  };
  auto weights = [](json& j) -> json& { return j["quantization_config"]["config_groups"]["group_0"]["weights"]; };
  refuses([&](json& j) { weights(j)["num_bits"] = 8; }, "num_bits");
  refuses([&](json& j) { weights(j)["symmetric"] = false; }, "symmetric");
  refuses([&](json& j) { weights(j)["group_size"] = 48; }, "group_size");
  refuses([](json& j) { j["quantization_config"]["format"] = "float-quantized"; }, "float-quantized");
  refuses(
      [](json& j) {
        j["quantization_config"]["config_groups"]["group_1"] = {{"format", "mxfp4-pack-quantized"}};
      },
      "group_1");
  json oss = json::parse(std::ifstream(models / "gptoss_bf16" / "config.json"));
  oss["quantization_config"] = base["quantization_config"];
  EXPECT_THROW(ModelConfig::from_json(oss, "config.json"), Error);
}

// Numbers that enter arithmetic are finite and in range for every
// architecture (issue 17): zero heads, a rope_theta of 0, a negative limit,
// an infinite or NaN value (a GGUF's f32 metadata can hold them) are one
// clear error, not a division by zero or non-finite logits.
TEST(ModelConfig, NumbersThatEnterArithmeticAreChecked) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  const fs::path models = fs::path(STRATA_FIXTURES_DIR) / "models";
  auto load = [&](const char* name) { return json::parse(std::ifstream(models / name / "config.json")); };
  const json oss = load("gptoss_bf16"), ds = load("ds_yarn_grouped"), qwen = load("qwen_gqa");
  expect_refused(oss, [](json& j) { j["num_attention_heads"] = 0; j.erase("head_dim"); }, "num_attention_heads");
  expect_refused(oss, [](json& j) { j["swiglu_limit"] = -1.0; }, "swiglu_limit");
  expect_refused(ds, [](json& j) { j["routed_scaling_factor"] = std::numeric_limits<double>::infinity(); }, "routed_scaling_factor");
  expect_refused(ds, [](json& j) { j["routed_scaling_factor"] = 0.0; }, "routed_scaling_factor");
  expect_refused(ds, [](json& j) { j["rope_scaling"]["mscale_all_dim"] = std::numeric_limits<double>::quiet_NaN(); }, "mscale_all_dim");
  expect_refused(qwen, [](json& j) { j["rope_parameters"]["rope_theta"] = 0.0; }, "rope_theta");
  expect_refused(qwen, [](json& j) { j["rms_norm_eps"] = 2.0; }, "rms_norm_eps");
  expect_refused(kimi_k3(), [](json& j) { j["text_config"]["activation_situ_beta"] = std::numeric_limits<double>::infinity(); },
                 "activation_situ_beta");
}

// Integer sizes past any real model's are refused before anything is sized
// or multiplied by them: 2^40 heads once passed validation, and the
// products formed from them (cache rows, tensor shapes) overflowed int64.
TEST(ModelConfig, IntegerSizesAreBoundedSoTheirProductsFit) {
  const int64_t huge = int64_t{1} << 40;
  expect_refused(deepseek(), [&](json& j) { j["num_attention_heads"] = huge; j["num_key_value_heads"] = huge; },
                 "num_attention_heads is 1099511627776");
  expect_refused(deepseek(), [&](json& j) { j["kv_lora_rank"] = huge; }, "kv_lora_rank is");
  expect_refused(deepseek(), [&](json& j) { j["q_lora_rank"] = huge; }, "q_lora_rank is");
  expect_refused(deepseek(), [&](json& j) { j["qk_nope_head_dim"] = huge; }, "qk_nope_head_dim is");
  expect_refused(deepseek(), [&](json& j) { j["v_head_dim"] = huge; }, "v_head_dim is");
  expect_refused(deepseek(), [&](json& j) { j["moe_intermediate_size"] = huge; }, "moe_intermediate_size is");
  expect_refused(deepseek(), [&](json& j) { j["intermediate_size"] = huge; }, "intermediate_size is");
  expect_refused(deepseek(), [&](json& j) { j["n_shared_experts"] = huge; }, "number of shared experts is");
  expect_refused(deepseek(), [&](json& j) { j["max_position_embeddings"] = huge; }, "max_position_embeddings is");
  expect_refused(qwen(), [&](json& j) { j["use_sliding_window"] = true; j["sliding_window"] = huge; }, "sliding_window is");
  expect_refused(qwen(), [&](json& j) { j["num_key_value_heads"] = huge; j["num_attention_heads"] = huge; },
                 "num_attention_heads is");
  expect_refused(kimi_k3(), [&](json& j) { j["text_config"]["linear_attn_config"]["head_dim"] = huge; },
                 "linear_attn_config's heads and head_dim are implausibly large");
  expect_refused(kimi_k3(), [&](json& j) { j["text_config"]["routed_expert_hidden_size"] = huge; },
                 "routed_expert_hidden_size is");
  // Values past INT64_MAX are not wrapped into range either.
  expect_refused(deepseek(), [&](json& j) { j["vocab_size"] = ~uint64_t{0}; }, "vocab_size");
}

// 2^32 + 5 once became token 5; an id past the vocabulary is refused.
TEST(ModelConfig, TokenIdsAreReadWithoutNarrowing) {
  expect_refused(deepseek(), [](json& j) { j["eos_token_id"] = (uint64_t{1} << 32) + 5; },
                 "eos_token_id 4294967301 is not a token id");
  expect_refused(qwen(), [](json& j) { j["eos_token_id"] = {5, (uint64_t{1} << 32) + 6}; },
                 "eos_token_id 4294967302 is not a token id");
  expect_refused(deepseek(), [](json& j) { j["bos_token_id"] = 1000; }, "bos_token_id 1000 is outside the vocabulary");
  expect_refused(deepseek(), [](json& j) { j["eos_token_id"] = -1; }, "eos_token_id -1 is not a token id");
}

TEST(ModelConfig, DeeplyNestedConfigIsOneErrorNamingTheFile) {
  testfiles::TempDir dir("strata-deep-config");
  const auto path = dir.write("config.json", R"({"model_type": "qwen3_moe", "x": )" + std::string(200'000, '[') +
                                                 std::string(200'000, ']') + "}");
  testing::expect_bounded_error([&] { ModelConfig::from_file(path.string()); }, path.string() + ": ",
                                "JSON nested more than 128 levels deep");
}

}  // namespace
}  // namespace strata
