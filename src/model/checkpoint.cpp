#include "model/checkpoint.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "model/arch.h"
#include "model/gguf_model.h"
#include "model/tensor_names.h"
#include "model/weights_identity.h"
#include "model/weights.h"
#include "storage/pack_dir.h"
#include "util/error.h"
#include "util/json_depth.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

Checkpoint open_gguf(const fs::path& path, const fs::path& shown) {
  Checkpoint ck;
  ck.kind = Checkpoint::Kind::Gguf;
  ck.path = shown;
  ck.trunk_path = path;
  auto file = std::make_unique<GgufFile>(path);
  ck.gguf = file.get();
  ck.config = config_from_gguf(*file);
  ck.source = hf_view_of_gguf(std::move(file), ck.config);
  return ck;
}

// The text model of a multimodal checkpoint: its tensors without their
// prefix ("language_model."); the others (a vision tower, its projector) are
// not there at all.
class TextTensors : public TensorSource {
 public:
  TextTensors(std::unique_ptr<TensorSource> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix)) {}
  const TensorView* find(const std::string& name) const override { return inner_->find(prefix_ + name); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const std::string& n : inner_->names())
      if (n.starts_with(prefix_)) out.push_back(n.substr(prefix_.size()));
    return out;
  }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::unique_ptr<TensorSource> inner_;
  std::string prefix_;
};

Checkpoint open_hf(const fs::path& dir, const fs::path& shown) {
  Checkpoint ck;
  ck.path = shown;
  ck.trunk_path = dir;
  ck.config = ModelConfig::from_file((dir / "config.json").string());
  ck.source = std::make_unique<HfCheckpoint>(dir);
  const ArchSpec& spec = arch_spec(ck.config.arch);
  if (*spec.hf.tensor_prefix)
    ck.source = std::make_unique<TextTensors>(std::move(ck.source), spec.hf.tensor_prefix);
  return ck;
}

}  // namespace

namespace {

// A pack without trunk checksums: one from before them (a note), or one
// whose list is gone (its manifest names it: an error).
void unverified_trunk(const fs::path& dir, Checkpoint& ck) {
  std::ifstream in(dir / kPackManifest, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  // Too deep to be a manifest: left to the manifest's own reader to refuse
  // (a parsed value that deep would overflow the stack when destroyed).
  const nlohmann::json j = json_nesting_depth(text, 64) > 64
                               ? nlohmann::json()
                               : nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("trunk_checksums"))
    throw Error((dir / kTrunkChecksums).string() + ": missing, but " + kPackManifest +
                " says the trunk is checksummed; the pack is damaged: pack it again");
  ck.notes.push_back(dir.string() + ": packed before trunks were checksummed, so its trunk is not verified "
                                    "(packing it again into a new directory adds them)");
}

Checkpoint open_any(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return open_gguf(path, path);
  if (!fs::is_directory(path, ec)) throw Error(path.string() + ": no such model directory or GGUF file");
  if (pack_state(path) != PackState::NotAPack) {
    // A pack: its trunk is an HF directory or a GGUF file inside it,
    // verified before it is read.
    const PackTrunk trunk = open_pack_trunk(path);
    Checkpoint ck = trunk.path.filename() == "trunk.gguf" ? open_gguf(trunk.path, path) : open_hf(trunk.path, path);
    ck.kind = Checkpoint::Kind::Pack;
    if (!trunk.verified) unverified_trunk(path, ck);
    return ck;
  }
  if (!fs::exists(path / "config.json", ec))
    throw Error(path.string() + ": not a model directory or pack (no config.json or " + kPackManifest + ")");
  return open_hf(path, path);
}

// The MTP layers a config names but the checkpoint lacks (open_checkpoint).
void drop_absent_mtp_layers(Checkpoint& ck) {
  ModelConfig& c = ck.config;
  if (c.num_nextn_predict_layers == 0) return;
  for (TensorKind k : kMtpKinds)
    if (ck.source->find(tn(Naming::Hf, k, "weight", c.num_layers))) return;
  ck.notes.push_back(ck.path.string() + ": the config names " + std::to_string(c.num_nextn_predict_layers) +
            " next-token-prediction layer(s) but the checkpoint holds none (" +
            tn(Naming::Hf, TensorKind::NextnEhProj, "weight", c.num_layers) + " is absent); loaded without");
  c.num_nextn_predict_layers = 0;
}

}  // namespace

Checkpoint open_checkpoint(const fs::path& path) {
  Checkpoint ck = open_any(path);
  drop_absent_mtp_layers(ck);
  ck.identity = weights_identity(ck);
  return ck;
}

ExpertBindFn expert_binder(const ModelConfig& c, const TensorSource& source, WeightBinder& binder) {
  return arch_spec(c.arch).bind_experts(source, binder, c);
}

namespace {

// The routed-expert kind a checkpoint name is, if any.
std::optional<ParsedName> routed_expert_id(const std::string& name) {
  // Only the expert rows need trying: no longer base of another kind matches
  // a name an expert base does (checkpoints hold ~10^5 expert tensors).
  static const std::vector<TensorKind> experts = [] {
    std::vector<TensorKind> k;
    for (const TensorName& t : tensor_names())
      if (t.role == TensorRole::Expert) k.push_back(t.kind);
    return k;
  }();
  // HF names (and GGUF through its HF view), or raw GGUF names (stacked ffn_*_exps).
  for (Naming naming : {Naming::Hf, Naming::Gguf})
    if (auto id = parse_tensor_name(name, naming, experts)) return id;
  return std::nullopt;
}

}  // namespace

bool is_routed_expert_tensor(const std::string& name) { return routed_expert_id(name).has_value(); }

std::optional<int64_t> routed_expert_layer(const std::string& name) {
  const auto id = routed_expert_id(name);
  if (!id) return std::nullopt;
  return id->layer;
}

bool is_streamed_expert_tensor(const std::string& name, const ModelConfig& c) {
  const auto id = routed_expert_id(name);
  return id && id->layer < c.expert_layers();
}

}  // namespace strata
