#pragma once
// A model on disk as the engine opens it: a Hugging Face directory
// (config.json + safetensors), a GGUF file, or a pack (manifest.json + trunk
// + expert blobs; see pack/manifest.h). Gives the configuration, the trunk's
// tensors under Hugging Face names, and how to bind each routed expert.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "model/expert_provider.h"
#include "model/model_config.h"

namespace strata {

class GgufFile;
class WeightBinder;

struct Checkpoint {
  enum class Kind { HuggingFace, Gguf, Pack } kind = Kind::HuggingFace;
  std::filesystem::path path;        // as given
  std::filesystem::path trunk_path;  // where the trunk's tensors and tokenizer are (== path unless packed)
  ModelConfig config;
  std::unique_ptr<TensorSource> source;  // HF-named tensors
  const GgufFile* gguf = nullptr;        // the raw file behind `source` for GGUF trunks
  // What the weights are, wherever they are (model/weights_identity.h): what
  // sessions and expert heat are kept under.
  std::string identity;
  // Lines for the user: the config names next-token-prediction layers the
  // checkpoint does not hold, a pack's trunk has no checksums (see
  // open_checkpoint).
  std::vector<std::string> notes;
};

// Throws strata::Error "<path>: ..." when it is none of the three.
//
// A pack is opened through storage/pack_dir.h: an interrupted one is an
// error saying so, and its trunk is verified against its checksums before
// anything of it is read. A pack from before trunk checksums opens with a
// note saying its trunk is not verified; one whose manifest names checksums
// that are gone is an error.
//
// Next-token-prediction (MTP) layers: a config naming num_nextn_predict_layers
// whose checkpoint holds no tensor of the first one's own kinds (eh_proj,
// enorm, ...) loads without them, num_nextn_predict_layers set to 0 and
// `note` saying so: DeepSeek-V3's config.json says 1 in every copy, while
// transformers drops model.layers.61.* on load (and so on save) and upstream
// llama.cpp's conversion drops it too. A layer that is there in part is an
// error naming the first tensor it lacks (when it is bound).
Checkpoint open_checkpoint(const std::filesystem::path& path);

// How this architecture's routed experts are bound from the checkpoint's
// tensors (its ArchSpec::bind_experts; `source` and the binder must outlive
// the returned function).
ExpertBindFn expert_binder(const ModelConfig& c, const TensorSource& source, WeightBinder& binder);

// Whether a checkpoint tensor (HF name, or GGUF name for raw GGUF files)
// belongs to a routed expert, i.e. is streamed rather than resident: a kind
// of role Expert in the name table (model/tensor_names.h).
bool is_routed_expert_tensor(const std::string& name);
// A routed expert of a decoder layer or of an MTP layer after them
// (ModelConfig::expert_layers()): what streaming and pack's expert blobs take.
bool is_streamed_expert_tensor(const std::string& name, const ModelConfig& c);
// The layer of a routed expert's tensor; none for any other tensor.
std::optional<int64_t> routed_expert_layer(const std::string& name);

}  // namespace strata
