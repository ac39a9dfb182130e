#pragma once
// The one table of checkpoint tensor names (as llama.cpp's llama-arch.cpp
// `{ LLM_TENSOR_FFN_GATE_EXPS, "blk.%d.ffn_gate_exps" }`). Every spelling of a
// tensor's name derives from it: the Hugging Face names the architectures
// bind, the GGUF names llama.cpp's convert_hf_to_gguf.py writes (and the
// GGUF → HF view maps), the names synth writes and the ones pack and the
// checkpoint sort into trunk and routed experts.
//
// Contract:
//  - A row gives a tensor kind's base name in each naming, without its suffix
//    (".weight", ".bias", "_blocks", ...): "%d" is the layer, a second "%d"
//    (HF routed experts only) the expert. nullptr: no tensor of that naming.
//  - tn() appends ".<suffix>", except for HF names that have none of their
//    own (Layout::NoSuffix: mlp.gate.e_score_correction_bias, self_attn.sinks).
//  - parse_tensor_name() is tn()'s inverse: it takes the longest base that
//    matches and hands back what follows it as the suffix.
// Adding a tensor kind: one row in tensor_names.cpp and one enum value here.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace strata {

enum class TensorKind {
  TokenEmbd, OutputNorm, Output,
  AttnNorm, FfnNorm,
  PostAttnNorm,  // gpt-oss's GGUF spelling of post_attention_layernorm
  AttnQ, AttnK, AttnV, AttnOut,
  AttnQkv,  // GGUF --fuse-qkv: rows [q | k | v]
  AttnQNorm, AttnKNorm, AttnSinks,
  AttnQA, AttnQANorm, AttnQB, AttnKvAMqa, AttnKvANorm, AttnKvB,
  AttnKB, AttnVB,  // newer GGUF MLA: kv_b split per head (gguf_model.h)
  FfnGate, FfnUp, FfnDown,                 // dense MLP
  FfnGateShexp, FfnUpShexp, FfnDownShexp,  // shared experts
  FfnGateInp,  // router (mlp.gate)
  ExpProbsB,   // the router's score-correction bias
  FfnRouter,   // gpt-oss's router (mlp.router; GGUF ffn_gate_inp as well)
  FfnGateExps, FfnUpExps, FfnDownExps,  // routed experts: GGUF stacked [E, out, in], HF one tensor per expert
  FfnGateUpExps,                        // GGUF --fuse-gate-up-exps: [E, 2I, H], gate rows first
  FfnGateUpExpsFused, FfnDownExpsFused, // gpt-oss HF: every expert of a layer in one tensor
  // Kimi K3 (HF only): Kimi Delta Attention, the attention output gate
  // (KDA and MLA alike), attention residuals over depth, the latent MoE.
  KdaQConv, KdaKConv, KdaVConv, KdaALog, KdaDtBias, KdaFA, KdaFB, KdaBeta, KdaONorm, AttnGate,
  AttnResProj, AttnResNorm, FfnResProj, FfnResNorm, OutputResProj, OutputResNorm,
  MoeRouter, MoeRouterBias, LatentDown, LatentNorm, LatentUp, MoeGateShexp, MoeUpShexp, MoeDownShexp,
  ExpW1, ExpW2, ExpW3,  // routed experts: gate, down, up
  // DeepSeek-V3's next-token-prediction (MTP) layer, beside the decoder
  // layer's own kinds at index num_hidden_layers (model/mtp_layer.h).
  NextnENorm, NextnHNorm, NextnEhProj, NextnEmbedTokens, NextnSharedHeadNorm, NextnSharedHeadHead,
};

enum class Naming { Hf, Gguf };

// How a GGUF tensor becomes the HF-named tensors the architectures bind.
enum class Layout {
  Same,            // one to one
  NoSuffix,        // the HF name has no ".weight"/".bias" of its own
  StackedExperts,  // [E, ...] cut into one tensor per expert
  StackedGateUp,   // [E, 2I, H] cut into each expert's gate and up
  FusedQkv,        // rows cut into q, k and v
};

// What a tensor is for: pack and synth choose precision by it, and streaming
// by whether it is a routed expert.
enum class TensorRole { Embedding, Output, Norm, Projection, Router, RouterBias, Sinks, Expert };

struct TensorName {
  TensorKind kind;
  const char* gguf;  // nullptr: not a GGUF tensor
  const char* hf;    // nullptr: not an HF tensor (cut into others)
  Layout layout;
  TensorRole role;
};

// The table, and the row of `kind`.
std::span<const TensorName> tensor_names();
const TensorName& tensor_name(TensorKind kind);

// The name of tensor `kind` of layer `layer` (and routed expert `expert`):
// base + "." + suffix (no dot when the suffix is empty). Throws on a kind the
// naming has no tensor for.
std::string tn(Naming naming, TensorKind kind, std::string_view suffix, int64_t layer = -1, int64_t expert = -1);
// The HF base name, as the binders take it (WeightBinder::linear("<base>")).
std::string hf_name(TensorKind kind, int64_t layer = -1, int64_t expert = -1);

struct ParsedName {
  TensorKind kind;
  int64_t layer = -1;
  int64_t expert = -1;
  std::string_view suffix;  // what follows the base: ".weight", "_blocks", "" ...
};

// Which kind a checkpoint name is, among `kinds` (all when empty); nullopt
// when none matches. A suffix starts with '.', or is one of gpt-oss's
// "_blocks", "_scales", "_bias".
std::optional<ParsedName> parse_tensor_name(std::string_view name, Naming naming,
                                            std::span<const TensorKind> kinds = {});

}  // namespace strata
