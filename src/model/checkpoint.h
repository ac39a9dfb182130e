#pragma once
// A model on disk as the engine opens it: a Hugging Face directory
// (config.json + safetensors), a GGUF file, or a pack (manifest.json + trunk
// + expert blobs; see pack/manifest.h). Gives the configuration, the trunk's
// tensors under Hugging Face names, and how to bind each routed expert.
#include <filesystem>
#include <memory>
#include <string>

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
};

// Throws strata::Error "<path>: ..." when it is none of the three.
Checkpoint open_checkpoint(const std::filesystem::path& path);

// How this architecture's routed experts are bound from the checkpoint's
// tensors (its ArchSpec::bind_experts; `source` and the binder must outlive
// the returned function).
ExpertBindFn expert_binder(const ModelConfig& c, const TensorSource& source, WeightBinder& binder);

// Whether a checkpoint tensor (HF name, or GGUF name for raw GGUF files)
// belongs to a routed expert, i.e. is streamed rather than resident: a kind
// of role Expert in the name table (model/tensor_names.h).
bool is_routed_expert_tensor(const std::string& name);

}  // namespace strata
