#include "model/tensor_names.h"

#include <algorithm>

#include "util/error.h"

namespace strata {

namespace {

using enum TensorKind;
using L = Layout;
using R = TensorRole;

// GGUF spellings as gguf-py/gguf/constants.py (TENSOR_NAMES); HF spellings as
// the transformers modeling files of DeepSeek-V3, Qwen3-MoE and gpt-oss.
constexpr TensorName kNames[] = {
    {TokenEmbd, "token_embd", "model.embed_tokens", L::Same, R::Embedding},
    {OutputNorm, "output_norm", "model.norm", L::Same, R::Norm},
    {Output, "output", "lm_head", L::Same, R::Output},
    {AttnNorm, "blk.%d.attn_norm", "model.layers.%d.input_layernorm", L::Same, R::Norm},
    {FfnNorm, "blk.%d.ffn_norm", "model.layers.%d.post_attention_layernorm", L::Same, R::Norm},
    {PostAttnNorm, "blk.%d.post_attention_norm", "model.layers.%d.post_attention_layernorm", L::Same, R::Norm},
    {AttnQ, "blk.%d.attn_q", "model.layers.%d.self_attn.q_proj", L::Same, R::Projection},
    {AttnK, "blk.%d.attn_k", "model.layers.%d.self_attn.k_proj", L::Same, R::Projection},
    {AttnV, "blk.%d.attn_v", "model.layers.%d.self_attn.v_proj", L::Same, R::Projection},
    {AttnOut, "blk.%d.attn_output", "model.layers.%d.self_attn.o_proj", L::Same, R::Projection},
    {AttnQkv, "blk.%d.attn_qkv", nullptr, L::FusedQkv, R::Projection},
    {AttnQNorm, "blk.%d.attn_q_norm", "model.layers.%d.self_attn.q_norm", L::Same, R::Norm},
    {AttnKNorm, "blk.%d.attn_k_norm", "model.layers.%d.self_attn.k_norm", L::Same, R::Norm},
    {AttnSinks, "blk.%d.attn_sinks", "model.layers.%d.self_attn.sinks", L::NoSuffix, R::Sinks},
    {AttnQA, "blk.%d.attn_q_a", "model.layers.%d.self_attn.q_a_proj", L::Same, R::Projection},
    {AttnQANorm, "blk.%d.attn_q_a_norm", "model.layers.%d.self_attn.q_a_layernorm", L::Same, R::Norm},
    {AttnQB, "blk.%d.attn_q_b", "model.layers.%d.self_attn.q_b_proj", L::Same, R::Projection},
    {AttnKvAMqa, "blk.%d.attn_kv_a_mqa", "model.layers.%d.self_attn.kv_a_proj_with_mqa", L::Same, R::Projection},
    {AttnKvANorm, "blk.%d.attn_kv_a_norm", "model.layers.%d.self_attn.kv_a_layernorm", L::Same, R::Norm},
    {AttnKvB, "blk.%d.attn_kv_b", "model.layers.%d.self_attn.kv_b_proj", L::Same, R::Projection},
    // Not HF tensors: the names under which the GGUF view hands out the split kv_b.
    {AttnKB, "blk.%d.attn_k_b", "model.layers.%d.self_attn.k_b_proj", L::Same, R::Projection},
    {AttnVB, "blk.%d.attn_v_b", "model.layers.%d.self_attn.v_b_proj", L::Same, R::Projection},
    {FfnGate, "blk.%d.ffn_gate", "model.layers.%d.mlp.gate_proj", L::Same, R::Projection},
    {FfnUp, "blk.%d.ffn_up", "model.layers.%d.mlp.up_proj", L::Same, R::Projection},
    {FfnDown, "blk.%d.ffn_down", "model.layers.%d.mlp.down_proj", L::Same, R::Projection},
    {FfnGateShexp, "blk.%d.ffn_gate_shexp", "model.layers.%d.mlp.shared_experts.gate_proj", L::Same, R::Projection},
    {FfnUpShexp, "blk.%d.ffn_up_shexp", "model.layers.%d.mlp.shared_experts.up_proj", L::Same, R::Projection},
    {FfnDownShexp, "blk.%d.ffn_down_shexp", "model.layers.%d.mlp.shared_experts.down_proj", L::Same, R::Projection},
    {FfnGateInp, "blk.%d.ffn_gate_inp", "model.layers.%d.mlp.gate", L::Same, R::Router},
    {ExpProbsB, "blk.%d.exp_probs_b", "model.layers.%d.mlp.gate.e_score_correction_bias", L::NoSuffix, R::RouterBias},
    {FfnRouter, "blk.%d.ffn_gate_inp", "model.layers.%d.mlp.router", L::Same, R::Router},
    // Per-expert HF names for gpt-oss are strata's own (its GGUF view), not HF's.
    {FfnGateExps, "blk.%d.ffn_gate_exps", "model.layers.%d.mlp.experts.%d.gate_proj", L::StackedExperts, R::Expert},
    {FfnUpExps, "blk.%d.ffn_up_exps", "model.layers.%d.mlp.experts.%d.up_proj", L::StackedExperts, R::Expert},
    {FfnDownExps, "blk.%d.ffn_down_exps", "model.layers.%d.mlp.experts.%d.down_proj", L::StackedExperts, R::Expert},
    {FfnGateUpExps, "blk.%d.ffn_gate_up_exps", nullptr, L::StackedGateUp, R::Expert},
    {FfnGateUpExpsFused, nullptr, "model.layers.%d.mlp.experts.gate_up_proj", L::Same, R::Expert},
    {FfnDownExpsFused, nullptr, "model.layers.%d.mlp.experts.down_proj", L::Same, R::Expert},
    // Kimi K3 as its modeling code names them (language_model. stripped).
    {KdaQConv, nullptr, "model.layers.%d.self_attn.q_conv1d", L::Same, R::Norm},
    {KdaKConv, nullptr, "model.layers.%d.self_attn.k_conv1d", L::Same, R::Norm},
    {KdaVConv, nullptr, "model.layers.%d.self_attn.v_conv1d", L::Same, R::Norm},
    {KdaALog, nullptr, "model.layers.%d.self_attn.A_log", L::NoSuffix, R::Norm},
    {KdaDtBias, nullptr, "model.layers.%d.self_attn.dt_bias", L::NoSuffix, R::Norm},
    {KdaFA, nullptr, "model.layers.%d.self_attn.f_a_proj", L::Same, R::Projection},
    {KdaFB, nullptr, "model.layers.%d.self_attn.f_b_proj", L::Same, R::Projection},
    {KdaBeta, nullptr, "model.layers.%d.self_attn.b_proj", L::Same, R::Projection},
    {KdaONorm, nullptr, "model.layers.%d.self_attn.o_norm", L::Same, R::Norm},
    {AttnGate, nullptr, "model.layers.%d.self_attn.g_proj", L::Same, R::Projection},
    {AttnResProj, nullptr, "model.layers.%d.self_attention_res_proj", L::Same, R::Norm},
    {AttnResNorm, nullptr, "model.layers.%d.self_attention_res_norm", L::Same, R::Norm},
    {FfnResProj, nullptr, "model.layers.%d.mlp_res_proj", L::Same, R::Norm},
    {FfnResNorm, nullptr, "model.layers.%d.mlp_res_norm", L::Same, R::Norm},
    {OutputResProj, nullptr, "model.output_attn_res_proj", L::Same, R::Norm},
    {OutputResNorm, nullptr, "model.output_attn_res_norm", L::Same, R::Norm},
    {MoeRouter, nullptr, "model.layers.%d.block_sparse_moe.gate", L::Same, R::Router},
    {MoeRouterBias, nullptr, "model.layers.%d.block_sparse_moe.gate.e_score_correction_bias", L::NoSuffix, R::RouterBias},
    {LatentDown, nullptr, "model.layers.%d.block_sparse_moe.routed_expert_down_proj", L::Same, R::Projection},
    {LatentNorm, nullptr, "model.layers.%d.block_sparse_moe.routed_expert_norm", L::Same, R::Norm},
    {LatentUp, nullptr, "model.layers.%d.block_sparse_moe.routed_expert_up_proj", L::Same, R::Projection},
    {MoeGateShexp, nullptr, "model.layers.%d.block_sparse_moe.shared_experts.gate_proj", L::Same, R::Projection},
    {MoeUpShexp, nullptr, "model.layers.%d.block_sparse_moe.shared_experts.up_proj", L::Same, R::Projection},
    {MoeDownShexp, nullptr, "model.layers.%d.block_sparse_moe.shared_experts.down_proj", L::Same, R::Projection},
    {ExpW1, nullptr, "model.layers.%d.block_sparse_moe.experts.%d.w1", L::Same, R::Expert},
    {ExpW2, nullptr, "model.layers.%d.block_sparse_moe.experts.%d.w2", L::Same, R::Expert},
    {ExpW3, nullptr, "model.layers.%d.block_sparse_moe.experts.%d.w3", L::Same, R::Expert},
    // DeepSeek-V3's MTP layer: HF as its released checkpoint stores layer 61
    // (vLLM's deepseek_mtp.py binds these), GGUF as gguf-py's
    // MODEL_TENSOR.NEXTN_* ("blk.%d.nextn.*").
    {NextnENorm, "blk.%d.nextn.enorm", "model.layers.%d.enorm", L::Same, R::Norm},
    {NextnHNorm, "blk.%d.nextn.hnorm", "model.layers.%d.hnorm", L::Same, R::Norm},
    {NextnEhProj, "blk.%d.nextn.eh_proj", "model.layers.%d.eh_proj", L::Same, R::Projection},
    {NextnEmbedTokens, "blk.%d.nextn.embed_tokens", "model.layers.%d.embed_tokens", L::Same, R::Embedding},
    {NextnSharedHeadNorm, "blk.%d.nextn.shared_head_norm", "model.layers.%d.shared_head.norm", L::Same, R::Norm},
    {NextnSharedHeadHead, "blk.%d.nextn.shared_head_head", "model.layers.%d.shared_head.head", L::Same, R::Output},
};

const char* pattern(const TensorName& t, Naming n) { return n == Naming::Hf ? t.hf : t.gguf; }

// Matches `name` against `pat` ("%d": one or more digits); on success returns
// the length matched and the numbers it read.
std::optional<size_t> match(std::string_view pat, std::string_view name, int64_t* nums) {
  size_t i = 0, k = 0;
  for (size_t p = 0; p < pat.size();) {
    if (pat.compare(p, 2, "%d") == 0) {
      size_t j = i;
      int64_t v = 0;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9' && j - i < 12) v = v * 10 + (name[j++] - '0');
      if (j == i) return std::nullopt;
      nums[k++] = v;
      i = j;
      p += 2;
      continue;
    }
    if (i >= name.size() || name[i] != pat[p]) return std::nullopt;
    ++i;
    ++p;
  }
  return i;
}

bool is_suffix(std::string_view rest) {
  return rest.empty() || rest.front() == '.' || rest == "_blocks" || rest == "_scales" || rest == "_bias";
}

}  // namespace

std::span<const TensorName> tensor_names() { return kNames; }

const TensorName& tensor_name(TensorKind kind) {
  for (const TensorName& t : kNames)
    if (t.kind == kind) return t;
  throw Error("internal: tensor kind " + std::to_string(static_cast<int>(kind)) + " has no row in the name table");
}

std::string tn(Naming naming, TensorKind kind, std::string_view suffix, int64_t layer, int64_t expert) {
  const TensorName& t = tensor_name(kind);
  const char* pat = pattern(t, naming);
  if (!pat)
    throw Error("internal: tensor kind " + std::to_string(static_cast<int>(kind)) + " has no " +
                (naming == Naming::Hf ? "Hugging Face" : "GGUF") + " name");
  std::string out;
  const int64_t nums[2] = {layer, expert};
  int k = 0;
  for (const char* p = pat; *p; ++p) {
    if (p[0] == '%' && p[1] == 'd') {
      out += std::to_string(nums[k++]);
      ++p;
    } else {
      out += *p;
    }
  }
  const bool own_suffix = !(naming == Naming::Hf && t.layout == Layout::NoSuffix);
  if (own_suffix && !suffix.empty()) {
    out += '.';
    out += suffix;
  }
  return out;
}

std::string hf_name(TensorKind kind, int64_t layer, int64_t expert) { return tn(Naming::Hf, kind, "", layer, expert); }

std::optional<ParsedName> parse_tensor_name(std::string_view name, Naming naming, std::span<const TensorKind> kinds) {
  std::optional<ParsedName> best;
  size_t best_len = 0;
  for (const TensorName& t : kNames) {
    const char* pat = pattern(t, naming);
    if (!pat) continue;
    if (!kinds.empty() && std::find(kinds.begin(), kinds.end(), t.kind) == kinds.end()) continue;
    int64_t nums[2] = {-1, -1};
    auto len = match(pat, name, nums);
    if (!len || *len <= best_len || !is_suffix(name.substr(*len))) continue;
    best_len = *len;
    best = ParsedName{t.kind, nums[0], nums[1], name.substr(*len)};
  }
  return best;
}

}  // namespace strata
