#include "pack/trunk_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors_writer.h"
#include "kernels/quantize.h"
#include "model/arch.h"
#include "model/tensor_names.h"
#include "model/weights.h"
#include "storage/pack_dir.h"
#include "util/error.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_float_type(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F8_E4M3;
}

// A projection worth converting to int8: a 2-D float weight that the model
// binds as a linear layer. Routers decide which experts run and stay exact;
// the embedding table is read row by row and stays as shipped.
// Whether `name` keeps its precision: the embedding, routers and norms, as
// the name table says. A name the table does not know (a checkpoint's extra
// tensors, such as DeepSeek-V3's next-token-prediction layer with its own
// embed_tokens and norms) keeps it when its spelling says it is one of those.
bool keeps_precision(const std::string& name, Naming naming) {
  if (auto id = parse_tensor_name(name, naming)) {
    const TensorRole role = tensor_name(id->kind).role;
    if (role == TensorRole::Embedding || role == TensorRole::Router || role == TensorRole::Norm) return true;
  }
  for (const char* keep : {"embed_tokens", "token_embd", "mlp.gate.weight", "mlp.router", "norm"})
    if (name.find(keep) != std::string::npos) return true;
  return false;
}

bool int8_candidate(const std::string& name, const TensorView& t) {
  if (t.shape.size() != 2 || !is_float_type(t.dtype) || !ends_with(name, ".weight")) return false;
  return !keeps_precision(name, Naming::Hf);
}

// GGUF names: attention and dense/shared FFN matrices.
bool gguf_q8_candidate(const std::string& name, const TensorView& t) {
  if (t.shape.size() != 2 || (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)) return false;
  if (!ends_with(name, ".weight") || keeps_precision(name, Naming::Gguf)) return false;
  return t.shape[1] % 32 == 0;
}

void copy_side_files(const fs::path& from, const fs::path& to) {
  for (const auto& entry : fs::directory_iterator(from)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (ends_with(name, ".safetensors") || name == "model.safetensors.index.json") continue;
    fs::copy_file(entry.path(), to / name, fs::copy_options::overwrite_existing);
  }
}

void sync_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw Error(p.string() + ": cannot sync: " + why);
  }
  ::close(fd);
}

// The trunk's files (`tmp`, a folder or one file), synced and checksummed
// under the name they will have (`name`), the list written before the trunk
// appears by rename: a trunk in place always has its checksums.
void seal_trunk(const fs::path& dir, const fs::path& tmp, const std::string& name) {
  TrunkChecksums sums;
  if (fs::is_directory(tmp)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(tmp))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      sync_file(f);
      sums.files.push_back(checksum_file(f, name + "/" + f.filename().string()));
    }
  } else {
    sync_file(tmp);
    sums.files.push_back(checksum_file(tmp, name));
  }
  write_trunk_checksums(dir / kTrunkChecksums, sums);
}

TrunkResult write_hf_trunk(const Checkpoint& ck, const fs::path& dir, bool int8,
                           const std::function<void(uint64_t)>& on_bytes) {
  const fs::path tmp = dir / "trunk.partial", final_path = dir / "trunk";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  WeightBinder binder(*ck.source, ck.config);
  std::vector<std::unique_ptr<kernels::OwnedMatrix>> converted;
  std::vector<SafetensorsOut> out;
  TrunkResult r;
  r.tensors = nlohmann::json::object();
  // Stored as the checkpoint stored them: the trunk keeps its config.json,
  // which (Kimi K3) names a prefix for the text model's tensors.
  const std::string stored_prefix = arch_spec(ck.config.arch).hf.tensor_prefix;
  auto add = [&](SafetensorsOut t) {
    r.tensors[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}};
    r.bytes += t.nbytes;
    t.name = stored_prefix + t.name;
    out.push_back(std::move(t));
  };
  for (const std::string& name : ck.source->names()) {
    if (is_streamed_expert_tensor(name, ck.config)) continue;
    const TensorView& t = ck.source->get(name);
    if (int8 && ends_with(name, ".weight_scale_inv") && int8_candidate(name.substr(0, name.size() - 10), ck.source->get(name.substr(0, name.size() - 10))))
      continue;  // folded into the int8 conversion of its weight
    if (int8 && int8_candidate(name, t)) {
      const std::string prefix = name.substr(0, name.size() - 7);
      auto q = kernels::quantize_matrix(binder.linear(prefix, t.shape[0], t.shape[1]), kernels::QuantTarget::Int8Row);
      add({name, DType::I8, t.shape, q->data.data(), q->data.size()});
      add({prefix + ".weight_scale", DType::F32, {t.shape[0]}, q->scales.data(), q->scales.size()});
      converted.push_back(std::move(q));
      continue;
    }
    add({name, t.dtype, t.shape, t.data, t.nbytes});
  }
  write_safetensors(tmp / "model.safetensors", out, {{"format", "pt"}, {"strata", "pack trunk"}}, on_bytes);
  copy_side_files(ck.trunk_path, tmp);
  seal_trunk(dir, tmp, "trunk");
  fs::remove_all(final_path);
  fs::rename(tmp, final_path);
  r.path = final_path;
  return r;
}

TrunkResult write_gguf_trunk(const Checkpoint& ck, const fs::path& dir, bool int8,
                             const std::function<void(uint64_t)>& on_bytes) {
  const GgufFile& src = *ck.gguf;
  GgufWriter w(static_cast<uint32_t>(src.alignment()));
  for (const auto& [key, value] : src.metadata())
    if (key != "general.alignment") w.set(key, GgufMeta::copy_of(value));
  struct Piece {
    const void* data;
    size_t bytes;
  };
  std::vector<Piece> pieces;
  std::vector<std::unique_ptr<kernels::OwnedMatrix>> converted;
  TrunkResult r;
  r.tensors = nlohmann::json::object();
  for (const TensorView& t : src.tensors()) {
    if (is_streamed_expert_tensor(t.name, ck.config)) continue;
    if (int8 && gguf_q8_candidate(t.name, t)) {
      kernels::WeightMatrix m;
      m.dtype = t.dtype;
      m.out = t.shape[0];
      m.in = t.shape[1];
      m.data = t.data;
      auto q = kernels::quantize_matrix(m, kernels::QuantTarget::Q8_0);
      w.add_tensor(t.name, DType::Q8_0, t.shape);
      pieces.push_back({q->data.data(), q->data.size()});
      r.tensors[t.name] = {{"dtype", "Q8_0"}, {"shape", t.shape}};
      converted.push_back(std::move(q));
    } else {
      w.add_tensor(t.name, t.dtype, t.shape);
      pieces.push_back({t.data, t.nbytes});
      r.tensors[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}};
    }
  }
  const fs::path tmp = dir / "trunk.gguf.partial", final_path = dir / "trunk.gguf";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(tmp.string() + ": cannot create");
    w.write_header(out);
    for (const Piece& p : pieces) {
      w.write_data(out, p.data, p.bytes);
      if (on_bytes) on_bytes(p.bytes);
      r.bytes += p.bytes;
    }
    w.finish(out);
    out.flush();
    if (!out) throw Error(tmp.string() + ": cannot write");
  }
  seal_trunk(dir, tmp, "trunk.gguf");
  fs::rename(tmp, final_path);
  r.path = final_path;
  return r;
}

}  // namespace

TrunkResult write_trunk(const Checkpoint& ck, const fs::path& dir, bool int8,
                        const std::function<void(uint64_t)>& on_bytes) {
  return ck.kind == Checkpoint::Kind::Gguf ? write_gguf_trunk(ck, dir, int8, on_bytes)
                                           : write_hf_trunk(ck, dir, int8, on_bytes);
}

uint64_t source_trunk_bytes(const Checkpoint& ck) {
  uint64_t n = 0;
  for (const std::string& name : ck.source->names())
    if (!is_streamed_expert_tensor(name, ck.config)) n += ck.source->get(name).nbytes;
  return n;
}

}  // namespace strata
