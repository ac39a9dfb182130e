// The HF-named view of deepseek2-, qwen3moe- and gpt-oss-shaped GGUF files
// (names, shapes, bytes, and the config they imply, compared against the
// config.json the same model would have), and model-level errors.
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "formats/gguf_writer.h"
#include "gguf_test_fixture.h"
#include "gguf_writer.h"
#include "model/arch.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "backend/rope.h"
#include "model/weights.h"
#include "util/error.h"

namespace strata {
namespace {

using namespace gguftest;
using nlohmann::json;
using testfiles::GgufBytes;
using testfiles::raw_bytes;

struct ModelTensors {
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs;
  void add(const std::string& name, std::vector<int64_t> shape) { specs.emplace_back(name, std::move(shape)); }

  static int64_t numel(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  std::string data(size_t k) const { return f32s(static_cast<size_t>(numel(specs[k].second)), 10000.0f * k); }
  size_t index(const std::string& name) const {
    for (size_t k = 0; k < specs.size(); ++k)
      if (specs[k].first == name) return k;
    throw std::runtime_error("no tensor " + name);
  }
  std::string bytes(GgufWriter& w) const {
    std::vector<std::string> data;
    for (size_t k = 0; k < specs.size(); ++k) {
      w.add_tensor(specs[k].first, DType::F32, specs[k].second);
      data.push_back(this->data(k));
    }
    return w.to_bytes(std::vector<std::string_view>(data.begin(), data.end()));
  }
};

float at(const TensorView& t, size_t i) {
  float v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);  // exactly: f32 values come back as their decimals
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.rope.type, b.rope.type);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.attention_factor, b.rope.attention_factor);
  EXPECT_EQ(a.rope.mscale, b.rope.mscale);
  EXPECT_EQ(a.rope.mscale_all_dim, b.rope.mscale_all_dim);
  EXPECT_EQ(a.rope.beta_fast, b.rope.beta_fast);
  EXPECT_EQ(a.rope.beta_slow, b.rope.beta_slow);
  EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
  EXPECT_EQ(a.rope.truncate, b.rope.truncate);
  EXPECT_EQ(a.n_routed_experts, b.n_routed_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
  EXPECT_EQ(a.n_group, b.n_group);
  EXPECT_EQ(a.topk_group, b.topk_group);
  EXPECT_EQ(a.first_k_dense_replace, b.first_k_dense_replace);
  EXPECT_EQ(a.moe_layer_freq, b.moe_layer_freq);
  EXPECT_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.scoring_func, b.scoring_func);
  EXPECT_EQ(a.topk_method, b.topk_method);
  EXPECT_EQ(a.decoder_sparse_step, b.decoder_sparse_step);
  EXPECT_EQ(a.mlp_only_layers, b.mlp_only_layers);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim);
  EXPECT_EQ(a.qk_nope_head_dim, b.qk_nope_head_dim);
  EXPECT_EQ(a.v_head_dim, b.v_head_dim);
  EXPECT_EQ(a.rope_interleave, b.rope_interleave);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.attention_scale(), b.attention_scale());
  Rope ra(a.rope, a.arch == Arch::DeepseekV3 ? a.qk_rope_head_dim : a.head_dim, a.rope_interleave);
  Rope rb(b.rope, b.arch == Arch::DeepseekV3 ? b.qk_rope_head_dim : b.head_dim, b.rope_interleave);
  EXPECT_EQ(ra.inv_freq(), rb.inv_freq());
  EXPECT_EQ(ra.attention_factor(), rb.attention_factor());
}

// A DeepSeek-V3-shaped model: 2 heads, q_lora 8, kv_lora 8, rope 4, nope 4,
// v 6, layer 0 dense, layer 1 with 4 routed experts (2 groups) + 1 shared.
constexpr int64_t kH = 16, kHeads = 2, kQLora = 8, kKvLora = 8, kRope = 4, kNope = 4, kV = 6, kE = 4, kI = 8,
                  kFf = 12, kVocab = 32;

json deepseek_hf_config() {
  return json::parse(R"({
    "model_type": "deepseek_v3", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 12,
    "moe_intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 2, "topk_group": 1,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "routed_scaling_factor": 2.827, "norm_topk_prob": true,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "q_lora_rank": 8, "kv_lora_rank": 8,
    "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 50000.0, "tie_word_embeddings": false,
    "rope_scaling": {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 64, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "bos_token_id": 0, "eos_token_id": 1})");
}

// Metadata as convert_hf_to_gguf.py writes it for that config (newer
// converters: MLA as MQA, head sizes in *_mla; older: key/value_length).
void deepseek_metadata(GgufWriter& w, bool split_kv_b) {
  const std::string a = "deepseek2.";
  w.set_string("general.architecture", "deepseek2");
  w.set_u32(a + "block_count", 2);
  w.set_u32(a + "context_length", 256);
  w.set_u32(a + "embedding_length", kH);
  w.set_u32(a + "feed_forward_length", kFf);
  w.set_u32(a + "attention.head_count", kHeads);
  w.set_u32(a + "attention.head_count_kv", split_kv_b ? 1 : kHeads);
  w.set_f32(a + "rope.freq_base", 50000.0f);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "expert_used_count", 2);
  w.set_u32(a + "expert_group_count", 2);
  w.set_u32(a + "expert_group_used_count", 1);
  w.set_u32(a + "expert_gating_func", 2);
  w.set_u32(a + "leading_dense_block_count", 1);
  w.set_u32(a + "vocab_size", kVocab);
  w.set_u32(a + "attention.q_lora_rank", kQLora);
  w.set_u32(a + "attention.kv_lora_rank", kKvLora);
  if (split_kv_b) {
    w.set_u32(a + "attention.key_length", kKvLora + kRope);
    w.set_u32(a + "attention.value_length", kKvLora);
    w.set_u32(a + "attention.key_length_mla", kNope + kRope);
    w.set_u32(a + "attention.value_length_mla", kV);
  } else {
    w.set_u32(a + "attention.key_length", kNope + kRope);
    w.set_u32(a + "attention.value_length", kV);
  }
  w.set_u32(a + "expert_feed_forward_length", kI);
  w.set_u32(a + "expert_count", kE);
  w.set_u32(a + "expert_shared_count", 1);
  w.set_f32(a + "expert_weights_scale", 2.827f);
  w.set_bool(a + "expert_weights_norm", true);
  w.set_u32(a + "rope.dimension_count", kRope);
  w.set_string(a + "rope.scaling.type", "yarn");
  w.set_f32(a + "rope.scaling.factor", 32.0f);
  w.set_u32(a + "rope.scaling.original_context_length", 64);
  w.set_f32(a + "rope.scaling.yarn_log_multiplier", static_cast<float>(0.1 * 1.0));
  w.set_string("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> tokens;
  for (int i = 0; i < kVocab; ++i) tokens.push_back("t" + std::to_string(i));
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_u32("tokenizer.ggml.bos_token_id", 0);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);
}

ModelTensors deepseek_tensors(bool split_kv_b, bool tied) {
  ModelTensors t;
  t.add("token_embd.weight", {kVocab, kH});
  t.add("output_norm.weight", {kH});
  if (!tied) t.add("output.weight", {kVocab, kH});
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    t.add(b + "attn_norm.weight", {kH});
    t.add(b + "ffn_norm.weight", {kH});
    t.add(b + "attn_q_a.weight", {kQLora, kH});
    t.add(b + "attn_q_a_norm.weight", {kQLora});
    t.add(b + "attn_q_b.weight", {kHeads * (kNope + kRope), kQLora});
    t.add(b + "attn_kv_a_mqa.weight", {kKvLora + kRope, kH});
    t.add(b + "attn_kv_a_norm.weight", {kKvLora});
    if (split_kv_b) {
      t.add(b + "attn_k_b.weight", {kHeads, kKvLora, kNope});
      t.add(b + "attn_v_b.weight", {kHeads, kV, kKvLora});
    } else {
      t.add(b + "attn_kv_b.weight", {kHeads * (kNope + kV), kKvLora});
    }
    t.add(b + "attn_output.weight", {kH, kHeads * kV});
    if (l == 0) {
      t.add(b + "ffn_gate.weight", {kFf, kH});
      t.add(b + "ffn_up.weight", {kFf, kH});
      t.add(b + "ffn_down.weight", {kH, kFf});
    } else {
      t.add(b + "ffn_gate_inp.weight", {kE, kH});
      t.add(b + "exp_probs_b.bias", {kE});
      t.add(b + "ffn_gate_exps.weight", {kE, kI, kH});
      t.add(b + "ffn_up_exps.weight", {kE, kI, kH});
      t.add(b + "ffn_down_exps.weight", {kE, kH, kI});
      t.add(b + "ffn_gate_shexp.weight", {kI, kH});
      t.add(b + "ffn_up_shexp.weight", {kI, kH});
      t.add(b + "ffn_down_shexp.weight", {kH, kI});
    }
  }
  t.add("rope_freqs.weight", {kRope / 2});  // not an HF tensor
  return t;
}

TEST_F(GgufTest, DeepseekConfigMatchesConfigJson) {
  for (bool split : {true, false}) {
    SCOPED_TRACE(split);
    GgufWriter w;
    deepseek_metadata(w, split);
    GgufFile f(write(deepseek_tensors(split, false).bytes(w)));
    ModelConfig g = config_from_gguf(f);
    ModelConfig h = ModelConfig::from_json(deepseek_hf_config(), "config.json");
    expect_same_config(g, h);
    EXPECT_EQ(g.rms_norm_eps, 1e-6);
    EXPECT_EQ(g.routed_scaling_factor, 2.827);
    // llama.cpp (src/models/deepseek2.cpp): mscale = 1 + 0.1·rope_yarn_log_mul·ln(factor),
    // kq_scale = mscale² / sqrt(n_embd_head_k_mla), with rope_yarn_log_mul = 0.1/0.1 = 1.
    const double mscale = 1.0 + 0.1 * 1.0 * std::log(32.0);
    EXPECT_NEAR(g.attention_scale(), mscale * mscale / std::sqrt(8.0), 1e-12);
    EXPECT_FLOAT_EQ(Rope(g.rope, kRope, true).attention_factor(), 1.0f);
  }
}

TEST_F(GgufTest, DeepseekViewExposesHfNamesAndShapes) {
  GgufWriter w;
  deepseek_metadata(w, true);
  const ModelTensors spec = deepseek_tensors(true, false);
  GgufFile f(write(spec.bytes(w)));
  ModelConfig c = config_from_gguf(f);
  auto src = hf_view_of_gguf(f, c);
  auto& view = dynamic_cast<GgufHfView&>(*src);
  EXPECT_EQ(view.describe(), f.path());

  auto expect = [&](const std::string& hf, std::vector<int64_t> shape, const std::string& gguf, size_t first = 0) {
    SCOPED_TRACE(hf);
    const TensorView* t = view.find(hf);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->name, hf);
    EXPECT_EQ(t->shape, shape);
    EXPECT_EQ(t->dtype, DType::F32);
    EXPECT_EQ(t->nbytes, static_cast<size_t>(4 * ModelTensors::numel(shape)));
    EXPECT_EQ(t->file, f.path());
    EXPECT_EQ(view.gguf_name(hf), gguf);
    // First element: 10000·(index of the GGUF tensor) + offset of the slice.
    EXPECT_EQ(at(*t, 0), 10000.0f * spec.index(gguf) + first);
  };
  expect("model.embed_tokens.weight", {kVocab, kH}, "token_embd.weight");
  expect("model.norm.weight", {kH}, "output_norm.weight");
  expect("lm_head.weight", {kVocab, kH}, "output.weight");
  const std::string p0 = "model.layers.0.", p1 = "model.layers.1.";
  expect(p0 + "input_layernorm.weight", {kH}, "blk.0.attn_norm.weight");
  expect(p0 + "post_attention_layernorm.weight", {kH}, "blk.0.ffn_norm.weight");
  expect(p0 + "self_attn.q_a_proj.weight", {kQLora, kH}, "blk.0.attn_q_a.weight");
  expect(p0 + "self_attn.q_a_layernorm.weight", {kQLora}, "blk.0.attn_q_a_norm.weight");
  expect(p0 + "self_attn.q_b_proj.weight", {kHeads * (kNope + kRope), kQLora}, "blk.0.attn_q_b.weight");
  expect(p0 + "self_attn.kv_a_proj_with_mqa.weight", {kKvLora + kRope, kH}, "blk.0.attn_kv_a_mqa.weight");
  expect(p0 + "self_attn.kv_a_layernorm.weight", {kKvLora}, "blk.0.attn_kv_a_norm.weight");
  expect(p0 + "self_attn.k_b_proj.weight", {kHeads, kKvLora, kNope}, "blk.0.attn_k_b.weight");
  expect(p0 + "self_attn.v_b_proj.weight", {kHeads, kV, kKvLora}, "blk.0.attn_v_b.weight");
  expect(p0 + "self_attn.o_proj.weight", {kH, kHeads * kV}, "blk.0.attn_output.weight");
  expect(p0 + "mlp.gate_proj.weight", {kFf, kH}, "blk.0.ffn_gate.weight");
  expect(p0 + "mlp.up_proj.weight", {kFf, kH}, "blk.0.ffn_up.weight");
  expect(p0 + "mlp.down_proj.weight", {kH, kFf}, "blk.0.ffn_down.weight");
  expect(p1 + "mlp.gate.weight", {kE, kH}, "blk.1.ffn_gate_inp.weight");
  expect(p1 + "mlp.gate.e_score_correction_bias", {kE}, "blk.1.exp_probs_b.bias");
  expect(p1 + "mlp.shared_experts.gate_proj.weight", {kI, kH}, "blk.1.ffn_gate_shexp.weight");
  expect(p1 + "mlp.shared_experts.up_proj.weight", {kI, kH}, "blk.1.ffn_up_shexp.weight");
  expect(p1 + "mlp.shared_experts.down_proj.weight", {kH, kI}, "blk.1.ffn_down_shexp.weight");
  for (int e = 0; e < kE; ++e) {
    const std::string x = p1 + "mlp.experts." + std::to_string(e) + ".";
    expect(x + "gate_proj.weight", {kI, kH}, "blk.1.ffn_gate_exps.weight", e * kI * kH);
    expect(x + "up_proj.weight", {kI, kH}, "blk.1.ffn_up_exps.weight", e * kI * kH);
    expect(x + "down_proj.weight", {kH, kI}, "blk.1.ffn_down_exps.weight", e * kH * kI);
  }
  EXPECT_EQ(view.find(p0 + "self_attn.kv_b_proj.weight"), nullptr);
  EXPECT_EQ(view.unmapped(), std::vector<std::string>{"rope_freqs.weight"});
  // 3 globals + 2 × 10 attention and norm tensors + 3 dense + 2 router + 3 shared + 12 expert slices.
  EXPECT_EQ(view.names().size(), 3u + 2 * 10 + 3 + 2 + 3 + 12);
}

// k_b / v_b as convert_hf_to_gguf.py derives them from kv_b_proj: the view's
// k_b_proj[h][j][i] is kv_b_proj[h·(nope+v) + i][j] and v_b_proj[h][o][j] is
// kv_b_proj[h·(nope+v) + nope + o][j].
TEST_F(GgufTest, DeepseekSplitKvBMatchesKvBProj) {
  // An HF kv_b_proj [H·(nope+v), lora] with element (r, j) = 100·r + j.
  auto kv_b = [](int64_t r, int64_t j) { return static_cast<float>(100 * r + j); };
  // The converter: view(H, nope+v, lora), split, k_b.transpose(1, 2). Written
  // here in index form, then stored with the reversed (GGUF) dimension order.
  std::vector<float> k_b(kHeads * kKvLora * kNope), v_b(kHeads * kV * kKvLora);
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t j = 0; j < kKvLora; ++j)
      for (int64_t i = 0; i < kNope; ++i) k_b[(h * kKvLora + j) * kNope + i] = kv_b(h * (kNope + kV) + i, j);
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t o = 0; o < kV; ++o)
      for (int64_t j = 0; j < kKvLora; ++j) v_b[(h * kV + o) * kKvLora + j] = kv_b(h * (kNope + kV) + kNope + o, j);
  GgufBytes b;
  b.header(2, 1).kv_string("general.architecture", "deepseek2");
  b.tensor("blk.0.attn_k_b.weight", {kNope, kKvLora, kHeads}, kF32, 0);
  b.tensor("blk.0.attn_v_b.weight", {kKvLora, kV, kHeads}, kF32, 256);
  b.pad().raw(raw_bytes(k_b)).pad().raw(raw_bytes(v_b)).pad();
  GgufFile f(write(b.bytes));
  ModelConfig c = ModelConfig::from_json(deepseek_hf_config(), "config.json");
  GgufHfView view(f, "deepseek2", c, f.path());
  const TensorView& k = view.get("model.layers.0.self_attn.k_b_proj.weight");
  const TensorView& v = view.get("model.layers.0.self_attn.v_b_proj.weight");
  ASSERT_EQ(k.shape, (std::vector<int64_t>{kHeads, kKvLora, kNope}));
  ASSERT_EQ(v.shape, (std::vector<int64_t>{kHeads, kV, kKvLora}));
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t j = 0; j < kKvLora; ++j) {
      for (int64_t i = 0; i < kNope; ++i)
        EXPECT_EQ(at(k, (h * kKvLora + j) * kNope + i), kv_b(h * (kNope + kV) + i, j));
      for (int64_t o = 0; o < kV; ++o)
        EXPECT_EQ(at(v, (h * kV + o) * kKvLora + j), kv_b(h * (kNope + kV) + kNope + o, j));
    }
}

// The strongest check of the name map: strata's own DeepSeek-V3 binding code
// finds every tensor it needs, at the shape it expects (older-style file with
// attn_kv_b, which is what MLA binds today).
TEST_F(GgufTest, DeepseekViewBindsWithTheArchitecture) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied);
    GgufWriter w;
    deepseek_metadata(w, false);
    GgufFile f(write(deepseek_tensors(false, tied).bytes(w)));
    ModelConfig c = config_from_gguf(f);
    EXPECT_EQ(c.tie_word_embeddings, tied);
    auto view = hf_view_of_gguf(std::make_unique<GgufFile>(f.path()), c);  // owning form
    EXPECT_NE(view->find("model.layers.0.self_attn.kv_b_proj.weight"), nullptr);
    WeightBinder binder(*view, c);
    binder.table("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
    binder.vector("model.norm.weight", c.hidden_size);
    if (!tied) binder.linear("lm_head", c.vocab_size, c.hidden_size);
    InMemoryExpertProvider experts(c, per_expert_tensors(binder, c));
    for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_NO_THROW(deepseek_v3_arch().bind_layer(binder, c, l, experts));
  }
}

json qwen_hf_config() {
  return json::parse(R"({
    "model_type": "qwen3_moe", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 24,
    "moe_intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "norm_topk_prob": true,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    "bos_token_id": 3, "eos_token_id": [4, 5]})");
}

void qwen_metadata(GgufWriter& w) {
  const std::string a = "qwen3moe.";
  w.set_string("general.architecture", "qwen3moe");
  w.set_u32(a + "block_count", 2);
  w.set_u32(a + "context_length", 128);
  w.set_u32(a + "embedding_length", 16);
  w.set_u32(a + "feed_forward_length", 24);
  w.set_u32(a + "attention.head_count", 4);
  w.set_u32(a + "attention.head_count_kv", 2);
  w.set_f32(a + "rope.freq_base", 1e6f);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "expert_count", 4);
  w.set_u32(a + "expert_used_count", 2);
  w.set_u32(a + "attention.key_length", 8);
  w.set_u32(a + "attention.value_length", 8);
  w.set_u32(a + "expert_feed_forward_length", 8);
  w.set_string(a + "rope.scaling.type", "yarn");
  w.set_f32(a + "rope.scaling.factor", 4.0f);
  w.set_u32(a + "rope.scaling.original_context_length", 32);
  w.set_u32("tokenizer.ggml.bos_token_id", 3);
  w.set_u32("tokenizer.ggml.eos_token_id", 4);
  w.set_u32("tokenizer.ggml.eot_token_id", 5);
}

// fused: attn_qkv and ffn_gate_up_exps (convert --fuse-qkv --fuse-gate-up-exps).
ModelTensors qwen_tensors(bool fused) {
  ModelTensors t;
  t.add("token_embd.weight", {32, 16});
  t.add("output_norm.weight", {16});
  t.add("output.weight", {32, 16});
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    t.add(b + "attn_norm.weight", {16});
    t.add(b + "ffn_norm.weight", {16});
    if (fused) {
      t.add(b + "attn_qkv.weight", {32 + 16 + 16, 16});
    } else {
      t.add(b + "attn_q.weight", {32, 16});
      t.add(b + "attn_k.weight", {16, 16});
      t.add(b + "attn_v.weight", {16, 16});
    }
    t.add(b + "attn_output.weight", {16, 32});
    t.add(b + "attn_q_norm.weight", {8});
    t.add(b + "attn_k_norm.weight", {8});
    t.add(b + "ffn_gate_inp.weight", {4, 16});
    if (fused) {
      t.add(b + "ffn_gate_up_exps.weight", {4, 16, 16});
    } else {
      t.add(b + "ffn_gate_exps.weight", {4, 8, 16});
      t.add(b + "ffn_up_exps.weight", {4, 8, 16});
    }
    t.add(b + "ffn_down_exps.weight", {4, 16, 8});
  }
  return t;
}

TEST_F(GgufTest, QwenConfigMatchesConfigJson) {
  GgufWriter w;
  qwen_metadata(w);
  GgufFile f(write(qwen_tensors(false).bytes(w)));
  expect_same_config(config_from_gguf(f), ModelConfig::from_json(qwen_hf_config(), "config.json"));
  // YaRN without DeepSeek's mscale: transformers' attention factor 0.1·ln(4) + 1
  // on cos/sin, which llama.cpp's ggml_rope_ext also applies.
  EXPECT_FLOAT_EQ(Rope(config_from_gguf(f).rope, 8, false).attention_factor(),
                  static_cast<float>(0.1 * std::log(4.0) + 1.0));
}

TEST_F(GgufTest, QwenViewSplitsFusedTensorsLikeSeparateOnes) {
  GgufWriter ws, wf;
  qwen_metadata(ws);
  qwen_metadata(wf);
  const ModelTensors sep = qwen_tensors(false), fus = qwen_tensors(true);
  GgufFile fs(write(sep.bytes(ws), "sep.gguf"));
  GgufFile ff(write(fus.bytes(wf), "fused.gguf"));
  ModelConfig c = config_from_gguf(fs);
  auto vs = hf_view_of_gguf(fs, c);
  auto vf = hf_view_of_gguf(ff, c);
  EXPECT_EQ(vs->names(), vf->names());
  for (const std::string& n : vs->names()) {
    SCOPED_TRACE(n);
    const TensorView& a = vs->get(n);
    const TensorView& b = vf->get(n);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.nbytes, b.nbytes);
  }
  // Fused q/k/v rows and gate/up halves come from the right places.
  const std::string p = "model.layers.1.";
  const float qkv = 10000.0f * fus.index("blk.1.attn_qkv.weight");
  EXPECT_EQ(at(vf->get(p + "self_attn.q_proj.weight"), 0), qkv);
  EXPECT_EQ(at(vf->get(p + "self_attn.k_proj.weight"), 0), qkv + 32 * 16);
  EXPECT_EQ(at(vf->get(p + "self_attn.v_proj.weight"), 0), qkv + 48 * 16);
  const float gu = 10000.0f * fus.index("blk.1.ffn_gate_up_exps.weight");
  EXPECT_EQ(at(vf->get(p + "mlp.experts.2.gate_proj.weight"), 0), gu + 2 * 16 * 16);
  EXPECT_EQ(at(vf->get(p + "mlp.experts.2.up_proj.weight"), 0), gu + 2 * 16 * 16 + 8 * 16);
  EXPECT_EQ(at(vs->get(p + "self_attn.q_norm.weight"), 0), 10000.0f * sep.index("blk.1.attn_q_norm.weight"));

  for (const auto* v : {vs.get(), vf.get()}) {
    WeightBinder binder(*v, c);
    binder.table("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
    binder.linear("lm_head", c.vocab_size, c.hidden_size);
    InMemoryExpertProvider experts(c, per_expert_tensors(binder, c));
    for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_NO_THROW(qwen3_moe_arch().bind_layer(binder, c, l, experts));
  }
}

// gpt-oss as conversion/gpt_oss.py writes it (MXFP4 experts, split gate/up).
TEST_F(GgufTest, GptOssConfigAndView) {
  const json hf = json::parse(R"({
    "model_type": "gpt_oss", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "head_dim": 32,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8,
    "num_experts_per_tok": 2, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "attention_bias": true,
    "sliding_window": 8, "swiglu_limit": 7.0, "hidden_act": "silu", "tie_word_embeddings": false,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                        "rope_theta": 150000.0, "rope_type": "yarn", "truncate": false},
    "bos_token_id": 298, "eos_token_id": 299})");
  const ModelConfig want = ModelConfig::from_json(hf, "config.json");
  const std::string a = "gpt-oss.";
  GgufWriter w;
  w.set_string("general.architecture", "gpt-oss");
  w.set_u32(a + "block_count", 4);
  w.set_u32(a + "context_length", 131072);
  w.set_u32(a + "embedding_length", 64);
  w.set_u32(a + "feed_forward_length", 96);
  w.set_u32(a + "attention.head_count", 4);
  w.set_u32(a + "attention.head_count_kv", 2);
  w.set_string(a + "rope.scaling.type", "yarn");
  w.set_f32(a + "rope.scaling.factor", 32.0f);
  w.set_u32(a + "rope.scaling.original_context_length", 4096);
  w.set_f32(a + "rope.scaling.yarn_beta_fast", 32.0f);
  w.set_f32(a + "rope.scaling.yarn_beta_slow", 1.0f);
  w.set_f32(a + "rope.freq_base", 150000.0f);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32(a + "expert_count", 8);
  w.set_u32(a + "expert_used_count", 2);
  w.set_u32(a + "attention.key_length", 32);
  w.set_u32(a + "attention.value_length", 32);
  w.set_u32(a + "attention.sliding_window", 8);
  w.set_u32(a + "expert_feed_forward_length", 96);
  w.set_u32("tokenizer.ggml.bos_token_id", 298);
  w.set_u32("tokenizer.ggml.eos_token_id", 299);
  std::vector<std::string> data;
  auto add = [&](const std::string& name, DType t, std::vector<int64_t> shape) {
    data.emplace_back(w.add_tensor(name, t, shape), '\x01');
  };
  add("token_embd.weight", DType::BF16, {300, 64});
  add("output_norm.weight", DType::F32, {64});
  add("output.weight", DType::BF16, {300, 64});
  for (int l = 0; l < 4; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", DType::F32, {64});
    add(b + "post_attention_norm.weight", DType::F32, {64});
    for (const char* x : {"attn_q", "attn_k", "attn_v"}) {
      const int64_t rows = x[5] == 'q' ? 4 * 32 : 2 * 32;
      add(b + x + ".weight", DType::BF16, {rows, 64});
      add(b + x + ".bias", DType::F32, {rows});
    }
    add(b + "attn_output.weight", DType::BF16, {64, 128});
    add(b + "attn_output.bias", DType::F32, {64});
    add(b + "attn_sinks.weight", DType::F32, {4});
    add(b + "ffn_gate_inp.weight", DType::F32, {8, 64});
    add(b + "ffn_gate_inp.bias", DType::F32, {8});
    add(b + "ffn_gate_exps.weight", DType::MXFP4, {8, 96, 64});
    add(b + "ffn_gate_exps.bias", DType::F32, {8, 96});
    add(b + "ffn_up_exps.weight", DType::MXFP4, {8, 96, 64});
    add(b + "ffn_up_exps.bias", DType::F32, {8, 96});
    add(b + "ffn_down_exps.weight", DType::MXFP4, {8, 64, 96});
    add(b + "ffn_down_exps.bias", DType::F32, {8, 64});
  }
  GgufFile f(write(w.to_bytes(std::vector<std::string_view>(data.begin(), data.end()))));
  ModelConfig c = config_from_gguf(f);
  expect_same_config(c, want);
  EXPECT_FALSE(c.rope.truncate);

  auto view = hf_view_of_gguf(f, c);
  const std::string p = "model.layers.3.";
  auto shape = [&](const std::string& n) { return view->get(n).shape; };
  EXPECT_EQ(shape(p + "self_attn.q_proj.weight"), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(shape(p + "self_attn.k_proj.bias"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape(p + "self_attn.o_proj.bias"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape(p + "self_attn.sinks"), (std::vector<int64_t>{4}));
  EXPECT_EQ(shape(p + "post_attention_layernorm.weight"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape(p + "mlp.router.weight"), (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(shape(p + "mlp.router.bias"), (std::vector<int64_t>{8}));
  const TensorView& gate7 = view->get(p + "mlp.experts.7.gate_proj.weight");
  const TensorView& gates = f.get("blk.3.ffn_gate_exps.weight");
  EXPECT_EQ(gate7.dtype, DType::MXFP4);
  EXPECT_EQ(gate7.shape, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(gate7.nbytes, 96u * 2 * 17);
  EXPECT_EQ(gate7.data, gates.data + 7 * gate7.nbytes);
  EXPECT_EQ(shape(p + "mlp.experts.7.down_proj.weight"), (std::vector<int64_t>{64, 96}));
  const TensorView& up_bias = view->get(p + "mlp.experts.5.up_proj.bias");
  EXPECT_EQ(up_bias.shape, std::vector<int64_t>{96});
  EXPECT_EQ(up_bias.data, f.get("blk.3.ffn_up_exps.bias").data + 5 * 96 * 4);
  EXPECT_TRUE(dynamic_cast<GgufHfView&>(*view).unmapped().empty());
}

// llama.cpp's sliding_window_pattern period: a negative one (INT64_MIN
// made `n - 1` overflow) is an error, not undefined behaviour.
TEST_F(GgufTest, GptOssSlidingWindowPeriodMustNotBeNegative) {
  auto file_with_period = [&](GgufMeta period, const char* name) {
    GgufWriter w;
    const std::string a = "gpt-oss.";
    w.set_string("general.architecture", "gpt-oss");
    for (const auto& [k, v] : std::vector<std::pair<const char*, uint32_t>>{
             {"block_count", 2}, {"context_length", 4096}, {"embedding_length", 64}, {"attention.head_count", 4},
             {"attention.head_count_kv", 2}, {"expert_count", 4}, {"expert_used_count", 2},
             {"attention.key_length", 16}, {"attention.value_length", 16}, {"attention.sliding_window", 8},
             {"expert_feed_forward_length", 32}, {"vocab_size", 300}})
      w.set_u32(a + k, v);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    w.set(a + "attention.sliding_window_pattern", std::move(period));
    return write(w.to_bytes({}), name);
  };
  GgufFile ok(file_with_period(GgufMeta::i64(2), "ok.gguf"));
  EXPECT_EQ(config_from_gguf(ok).sliding_layers, (std::vector<bool>{true, false}));
  GgufFile bad(file_with_period(GgufMeta::i64(INT64_MIN), "bad.gguf"));
  try {
    config_from_gguf(bad);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), (bad.path() + ": metadata 'gpt-oss.attention.sliding_window_pattern' is "
                                         "-9223372036854775808, a negative period").c_str());
  }
}

TEST_F(GgufTest, ModelErrorsNameTheFileAndProblem) {
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    GgufFile f(write(w.to_bytes({}), "llama.gguf"));
    EXPECT_EQ(message([&] { config_from_gguf(f); }),
              f.path() + ": unsupported GGUF architecture 'llama' (supported: deepseek2, qwen3moe, gpt-oss)");
  }
  {
    GgufWriter w;
    w.set_string("general.architecture", "qwen3moe");
    w.set_string("qwen3moe.embedding_length", "16");
    GgufFile f(write(w.to_bytes({}), "s.gguf"));
    EXPECT_EQ(message([&] { config_from_gguf(f); }),
              f.path() + ": metadata 'qwen3moe.embedding_length' is a string, expected an integer");
  }
  {
    GgufWriter w;
    qwen_metadata(w);
    ModelTensors t = qwen_tensors(false);
    t.specs[t.index("blk.1.ffn_up_exps.weight")].second = {3, 8, 16};
    GgufFile f(write(t.bytes(w), "e.gguf"));
    ModelConfig c = config_from_gguf(f);
    EXPECT_EQ(message([&] { hf_view_of_gguf(f, c); }),
              f.path() + ": tensor 'blk.1.ffn_up_exps.weight' has shape [3,8,16] but the config has 4 experts "
                         "(expected [experts, out, in])");
  }
  {
    GgufWriter w;
    qwen_metadata(w);
    ModelTensors t = qwen_tensors(false);
    t.add("blk.0.attn_qkv.weight", {64, 16});  // alongside attn_q: two sources for q_proj
    GgufFile f(write(t.bytes(w), "d.gguf"));
    ModelConfig c = config_from_gguf(f);
    std::string msg = message([&] { hf_view_of_gguf(f, c); });
    EXPECT_NE(msg.find("both provide 'model.layers.0.self_attn.q_proj.weight'"), std::string::npos) << msg;
  }
  {
    GgufWriter w;
    deepseek_metadata(w, true);
    ModelTensors t = deepseek_tensors(true, false);
    t.specs[t.index("token_embd.weight")].second = {31, kH};
    GgufFile f(write(t.bytes(w), "v.gguf"));
    EXPECT_EQ(message([&] { config_from_gguf(f); }),
              f.path() + ": metadata 'deepseek2.vocab_size' is 32 but token_embd.weight has 31 rows");
  }
}

}  // namespace
}  // namespace strata
