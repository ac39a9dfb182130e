#pragma once
// One architecture, described in one place: its own file (deepseek_v3.cpp,
// qwen3_moe.cpp, gpt_oss.cpp) defines its ArchSpec, and arch.cpp lists the
// specs. Everything that differs between architectures is reached through
// the spec; the shared blocks (MLA, GQA, routers, MoE) take small typed parts
// and know no architecture.
//
// A spec says
//  - how its config is read: from config.json (hf: the architecture's own
//    fields and checks after the common ones) and from GGUF metadata (gguf:
//    its own keys, written into a config.json object that from_json reads),
//    and, next to each reader, the writer synth uses;
//  - which tensors it has (kinds of model/tensor_names.h): declare_layer for
//    what a layer of a checkpoint holds, gguf_tensors for the GGUF → HF view;
//  - how a layer is bound (bind_layer) and how a routed expert is bound
//    (bind_experts).
// Adding an architecture: a value in `Arch` (model_config.h), a file with its
// spec, one line in arch.cpp's list, and rows in tensor_names.cpp for tensor
// kinds no architecture had before.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "formats/tensor.h"
#include "model/attention.h"
#include "model/expert_provider.h"
#include "model/model_config.h"
#include "model/tensor_names.h"

namespace strata {

class ConfigReader;
class GgufWriter;
class WeightBinder;
struct GgufConfigInput;
struct Layer;

struct ArchSpec {
  Arch arch;
  const char* name;                              // arch_name(): the model_type strata writes
  std::span<const char* const> hf_model_types;  // config.json model_type values it reads
  const char* gguf_arch;                         // GGUF general.architecture

  struct Hf {
    bool expert_width_is_intermediate = false;  // intermediate_size is the expert width (no dense layers)
    bool norm_topk_prob_default = false;
    bool mxfp4_experts = false;  // quantization_config quant_method "mxfp4" is accepted
    // compressed-tensors checkpoints are read ("pack-quantized" int4 and
    // "mxfp4-pack-quantized" weights, bound per tensor by what is stored).
    bool compressed_tensors = false;
    // Its published checkpoints ship compressed-tensors MXFP4 routed experts
    // (Kimi K3): what synth --quant mxfp4 writes.
    bool compressed_mxfp4_experts = false;
    // The text model's config is config.json's "text_config" (a multimodal
    // wrapper); token ids may sit at either level, the top one wins.
    bool text_config = false;
    // hidden_act values it runs.
    std::span<const char* const> hidden_acts = {};
    // Its text tensors carry this prefix in the checkpoint ("" for none); the
    // others (a vision tower) are not the text model's and are not seen.
    const char* tensor_prefix = "";
    // Fills in rope settings a config leaves out (called only then).
    void (*default_rope)(const ConfigReader& r, nlohmann::json& config) = nullptr;
    // The architecture's own fields, after the common ones.
    void (*read)(const ConfigReader& r, ModelConfig& c) = nullptr;
    // The architecture's own checks, after the common ones.
    void (*validate)(const ConfigReader& r, const ModelConfig& c) = nullptr;
    // The inverse of read: its own config.json fields as its released
    // checkpoints spell them (synth writes the common ones and the
    // quantization_config), and its own rope_scaling entries.
    void (*write)(const ModelConfig& c, nlohmann::json& config) = nullptr;
  } hf;

  struct Gguf {
    bool rope_truncate = true;                   // config.json's rope "truncate"
    bool yarn_log_multiplier_is_scaled = false;  // rope.scaling.yarn_log_multiplier = 0.1 · mscale_all_dim
    std::optional<bool> norm_topk_prob_default;  // when expert_weights_norm is absent
    // The architecture's own keys, written as config.json spells them.
    void (*read)(const GgufConfigInput& in, nlohmann::json& config) = nullptr;
    // The inverse of read: its own metadata keys as llama.cpp's converter
    // writes them (`legacy_mla`: an older converter's whole attn_kv_b).
    void (*write)(const ModelConfig& c, bool legacy_mla, GgufWriter& w) = nullptr;
  } gguf;

  // Which layers route to experts (the others have a dense MLP).
  bool (*layer_is_moe)(const ModelConfig& c, int64_t layer) = nullptr;
  // Its attention's softmax scale and KV-cache row widths.
  double (*attention_scale)(const ModelConfig& c) = nullptr;
  CacheWidths (*cache_widths)(const ModelConfig& c) = nullptr;
  // Per row, the attention buffers a step needs (model/step_state.h).
  AttentionWidths (*attention_widths)(const ModelConfig& c) = nullptr;
  // Its routed experts may come as one fused gate_up matrix (gpt-oss).
  bool fused_gate_up = false;

  // Its routed experts carry biases (gpt-oss): what synth writes.
  bool expert_biases = false;

  // Model-level kinds beyond the token table, final norm and head (Kimi K3's
  // last AttnRes mix).
  std::span<const TensorKind> model_tensors = {};
  // The tensor kinds its GGUF files may hold (the GGUF → HF view maps these
  // and lists any other tensor as unmapped).
  std::span<const TensorKind> gguf_tensors;
  // The kinds layer `layer` of a checkpoint holds, in `naming` (GGUF: as the
  // current converter writes them; HF: as the released checkpoints are).
  void (*declare_layer)(const ModelConfig& c, int64_t layer, Naming naming, std::vector<TensorKind>& out) = nullptr;
  // Binds decoder layer `layer` (HF names, through the binder).
  Layer (*bind_layer)(WeightBinder& w, const ModelConfig& c, int64_t layer, ExpertProvider& experts) = nullptr;
  // How one routed expert is bound from the checkpoint's tensors (`binder`
  // must outlive the function).
  ExpertBindFn (*bind_experts)(const TensorSource& source, WeightBinder& binder, const ModelConfig& c) = nullptr;
};

// The registry, in a fixed order (error messages list names in it).
std::span<const ArchSpec* const> all_archs();
const ArchSpec& arch_spec(Arch arch);
const ArchSpec* arch_for_model_type(std::string_view model_type);  // nullptr: unsupported
const ArchSpec* arch_for_gguf(std::string_view gguf_arch);         // nullptr: unsupported
std::string supported_model_types();  // "deepseek_v3, kimi_k2, ..."
std::string supported_gguf_archs();   // "deepseek2, qwen3moe, gpt-oss"

// The kinds of every tensor of a checkpoint with config `c`, in `naming`,
// with their layer (-1 for the embedding, final norm and output head); each
// routed-expert kind once per layer. The next-token-prediction layers
// (num_nextn_predict_layers, after the decoder layers) declare a decoder
// layer's kinds plus kMtpKinds.
std::vector<std::pair<TensorKind, int64_t>> declared_tensors(const ModelConfig& c, Naming naming);

// What an MTP layer holds beside a decoder layer's tensors (model/mtp_layer.h).
inline constexpr TensorKind kMtpKinds[] = {TensorKind::NextnENorm,          TensorKind::NextnHNorm,
                                           TensorKind::NextnEhProj,         TensorKind::NextnEmbedTokens,
                                           TensorKind::NextnSharedHeadNorm, TensorKind::NextnSharedHeadHead};

// Each architecture's spec (defined in its own file).
const ArchSpec& deepseek_v3_arch();
const ArchSpec& qwen3_moe_arch();
const ArchSpec& gpt_oss_arch();
const ArchSpec& kimi_k3_arch();

}  // namespace strata
