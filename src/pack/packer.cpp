#include "pack/packer.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "kernels/interleave.h"
#include "kernels/quantize.h"
#include "model/checkpoint.h"
#include "model/expert_layout.h"
#include "model/weights.h"
#include "pack/drive_weights.h"
#include "pack/manifest.h"
#include "pack/placement.h"
#include "pack/trunk_writer.h"
#include "model/expert_heat.h"
#include "storage/aligned_buffer.h"
#include "storage/checksum.h"
#include "util/error.h"
#include "util/json_file.h"
#include "util/progress.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// Matrices with an interleaved layout are stored interleaved (the checksum
// covers those bytes), so streaming them needs no rewriting at run time.
void interleave_blob(ExpertWeights& layout, uint8_t* blob, std::vector<uint8_t>& scratch) {
  const ExpertWeights placed = rebase(layout, blob);
  const auto src = placed.matrices();
  const auto dst = layout.matrices();
  for (size_t i = 0; i < src.size(); ++i) {
    if (!kernels::interleavable(*src[i])) continue;
    kernels::interleave_in_place(*src[i], scratch);
    dst[i]->packing = kernels::Packing::Interleaved16;
  }
}

nlohmann::json config_summary(const ModelConfig& c) {
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) moe_layers += c.layer_is_moe(l);
  return {{"arch", arch_name(c.arch)},          {"layers", c.num_layers},
          {"moe_layers", moe_layers},           {"hidden_size", c.hidden_size},
          {"vocab_size", c.vocab_size},         {"routed_experts", c.n_routed_experts},
          {"experts_per_token", c.num_experts_per_tok}, {"moe_intermediate_size", c.moe_intermediate_size}};
}

// An expert file on one drive, written with O_DIRECT where the file system
// allows (a pack is far bigger than the page cache and is not read back now).
class BlobFile {
 public:
  explicit BlobFile(const fs::path& path) : path_(path.string()) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path_ + ": cannot create: " + std::strerror(errno));
  }
  ~BlobFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  BlobFile(const BlobFile&) = delete;
  BlobFile& operator=(const BlobFile&) = delete;

  void write_at(const uint8_t* p, size_t n, uint64_t offset) {
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(path_ + " offset " + std::to_string(offset) + ": cannot write: " + std::strerror(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
  }
  void sync() {
    if (::fdatasync(fd_) != 0) throw Error(path_ + ": cannot sync: " + std::strerror(errno));
  }
  // Drops blobs past `size` left by an interrupted run.
  void truncate(uint64_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      throw Error(path_ + ": cannot truncate: " + std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

struct Plan {
  std::vector<PackDrive> drives;
  std::vector<fs::path> drive_dirs;
  nlohmann::json signature;
};

uint64_t free_bytes(const fs::path& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

// Converts an expert's matrices to `target`, keeping the converted bytes alive.
ExpertWeights requantize(const ExpertWeights& e, kernels::QuantTarget target,
                         std::vector<std::unique_ptr<kernels::OwnedMatrix>>& keep) {
  ExpertWeights out;
  auto conv = [&](const kernels::WeightMatrix& m) {
    if (!m.valid()) return kernels::WeightMatrix{};
    keep.push_back(kernels::quantize_matrix(m, target));
    return keep.back()->matrix;
  };
  out.gate = conv(e.gate);
  out.up = conv(e.up);
  out.down = conv(e.down);
  out.gate_up = conv(e.gate_up);
  return out;
}

}  // namespace

PackReport pack_model(const PackOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.trunk != "keep" && o.trunk != "int8") throw Error("--trunk must be keep or int8");
  if (o.experts != "keep" && o.experts != "q8" && o.experts != "int4" && o.experts != "mxfp4")
    throw Error("--experts must be keep, q8, int4 or mxfp4");
  Checkpoint ck = open_checkpoint(o.source);
  if (ck.kind == Checkpoint::Kind::Pack) throw Error(o.source.string() + " is already a pack; pack its source instead");
  const ModelConfig& c = ck.config;
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) throw Error(o.out.string() + ": cannot create: " + ec.message());

  // Drives: directories that exist; the pack directory when none is given.
  std::vector<fs::path> dirs = o.drives;
  if (dirs.empty()) dirs.push_back(o.out);
  Manifest m;
  const std::string out_canon = fs::weakly_canonical(o.out).string();
  char tag[17];
  std::snprintf(tag, sizeof tag, "%08llx", static_cast<unsigned long long>(xxh3_64(out_canon.data(), out_canon.size()) & 0xffffffffu));
  for (size_t d = 0; d < dirs.size(); ++d) {
    if (!fs::is_directory(dirs[d], ec)) throw Error(dirs[d].string() + ": --drive must be an existing directory");
    const fs::path canon = fs::weakly_canonical(dirs[d]);
    // Inside the pack: relative to it, so the pack directory can move as a
    // whole. Outside: absolute, and relative as a second guess (manifest.h).
    const fs::path inside = canon.lexically_relative(out_canon);
    const bool is_inside = !inside.empty() && *inside.begin() != "..";
    PackDrive pd;
    pd.path = is_inside ? inside.string() : canon.string();
    if (!is_inside) pd.relative = inside.empty() ? std::string() : inside.string();
    pd.file = "strata-experts-" + std::string(tag) + "-" + std::to_string(d) + ".bin";
    m.drives.push_back(pd);
  }
  m.source = fs::weakly_canonical(o.source).string();
  m.options = {{"trunk", o.trunk}, {"experts", o.experts}, {"trace", o.trace.empty() ? "" : fs::weakly_canonical(o.trace).string()}};
  // Said apart from the options, so no reader has to know which options lose
  // precision; the fidelity is measured against the source afterwards
  // (runtime/pack_fidelity.h).
  m.lossy = PackLossy::from_options(o.trunk, o.experts);
  nlohmann::json signature = {{"source", m.source}, {"options", m.options}, {"drives", nlohmann::json::array()}};
  for (const auto& d : m.drives) signature["drives"].push_back(d.path + "/" + d.file);
  {
    // Size and modification time of the source stand for its contents.
    std::vector<fs::path> files;
    if (fs::is_regular_file(o.source)) files.push_back(o.source);
    else
      for (const auto& e : fs::directory_iterator(o.source)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files)
      if (fs::is_regular_file(f))
        signature["files"].push_back({f.filename().string(), fs::file_size(f),
                                      fs::last_write_time(f).time_since_epoch().count()});
  }
  m.options["signature"] = xxh3_64(signature.dump().data(), signature.dump().size());

  PackReport report;
  const fs::path manifest_path = o.out / "manifest.json", progress_path = o.out / "pack.progress.json";
  if (fs::exists(manifest_path)) {
    const Manifest old = Manifest::load(o.out);
    if (old.options.value("signature", uint64_t{0}) == m.options["signature"].get<uint64_t>()) {
      report.already_packed = true;
      for (const auto& d : old.drives) report.drive_weights.push_back(d.weight);
      return report;
    }
    throw Error(o.out.string() + " already holds a different pack (of " + old.source +
                "); remove it or choose another --out");
  }
  // Resume: the layers an earlier run finished, with their records, and the
  // drive weights they were placed by (weighed again, the later layers
  // would be placed by another probe's figures).
  int64_t first_layer = 0;
  std::vector<uint64_t> cursor(dirs.size(), 0);
  std::optional<Manifest> partial;
  if (fs::exists(progress_path)) {
    nlohmann::json j = parse_json_or_discarded(read_text_file(progress_path));
    if (!j.is_discarded() && j.value("signature", uint64_t{0}) == m.options["signature"].get<uint64_t>()) {
      partial = Manifest::from_json(j["manifest"], progress_path.string());
      first_layer = static_cast<int64_t>(partial->experts.size());
      m.layouts = partial->layouts;
      m.experts = partial->experts;
      cursor = j["cursors"].get<std::vector<uint64_t>>();
      report.layers_resumed = first_layer;
    }
  }
  std::vector<double> weights;
  if (partial && partial->drives.size() == dirs.size()) {
    for (const auto& d : partial->drives) weights.push_back(d.weight);
    report.probe = "resumed";
  } else {
    DriveWeights weighed = weigh_drives(dirs, o.probe, o.notice);
    weights = std::move(weighed.weights);
    report.probe = weighed.source;
  }
  for (size_t d = 0; d < dirs.size(); ++d) m.drives[d].weight = weights[d];
  report.drive_weights = weights;

  ExpertHeat heat;
  if (!o.trace.empty()) heat = ExpertHeat::load(o.trace, "", c.num_layers, c.n_routed_experts, /*strict=*/true);

  uint64_t expert_source_bytes = 0;
  for (const auto& name : ck.source->names())
    if (is_streamed_expert_tensor(name, c)) expert_source_bytes += ck.source->get(name).nbytes;
  const uint64_t trunk_source = source_trunk_bytes(ck);
  {
    // Refuse early rather than fill a drive and fail hours later.
    const double share = 1.0 / static_cast<double>(dirs.size());
    for (size_t d = 0; d < dirs.size(); ++d) {
      double w = weights[d] / std::accumulate(weights.begin(), weights.end(), 0.0);
      const uint64_t need = static_cast<uint64_t>(static_cast<double>(expert_source_bytes) * std::max(w, share) * 1.05);
      if (first_layer == 0 && free_bytes(dirs[d]) < need)
        throw Error(dirs[d].string() + ": not enough free space for its share of the experts (about " +
                    std::to_string(need >> 20) + " MiB needed)");
    }
  }
  Progress progress("pack", trunk_source + expert_source_bytes, o.progress);

  const bool have_trunk = fs::exists(o.out / "trunk") || fs::exists(o.out / "trunk.gguf");
  if (!have_trunk || first_layer == 0) {
    TrunkResult tr = write_trunk(ck, o.out, o.trunk == "int8", [&](uint64_t n) { progress.add(n); });
    report.trunk_bytes = tr.bytes;
    m.tensors = tr.tensors;
  } else {
    progress.add(trunk_source);
  }
  m.trunk = ck.kind == Checkpoint::Kind::Gguf ? "trunk.gguf" : "trunk";

  std::vector<std::unique_ptr<BlobFile>> files;
  for (size_t d = 0; d < dirs.size(); ++d) {
    files.push_back(std::make_unique<BlobFile>(m.drive_file(o.out, static_cast<uint32_t>(d))));
    files.back()->truncate(cursor[d]);
  }
  const std::optional<kernels::QuantTarget> target =
      o.experts == "q8"      ? std::optional(kernels::QuantTarget::Q8_0)
      : o.experts == "int4"  ? std::optional(kernels::QuantTarget::Int4)
      : o.experts == "mxfp4" ? std::optional(kernels::QuantTarget::Mxfp4)
                             : std::nullopt;

  AlignedBuffer blob;
  std::vector<uint8_t> interleave_scratch;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (l < first_layer) {
      for (const auto& e : m.experts[l]) progress.add(e.length);
      continue;
    }
    std::vector<PackedExpert> records;
    if (c.layer_is_moe(l)) {
      // A fresh binder per layer: whatever it converts is freed with it.
      WeightBinder binder(*ck.source, c);
      ExpertBindFn bind = expert_binder(c, *ck.source, binder);
      std::vector<double> h(c.n_routed_experts, 1.0);
      if (heat.layers() == c.num_layers)
        for (int64_t e = 0; e < c.n_routed_experts; ++e) h[e] = heat.count(l, e);
      const std::vector<uint32_t> drive = place_layer(weights, h);
      for (int64_t x = 0; x < c.n_routed_experts; ++x) {
        std::vector<std::unique_ptr<kernels::OwnedMatrix>> keep;
        ExpertWeights w = bind(l, x);
        const uint64_t source_bytes = expert_payload_bytes(w);
        if (target) w = requantize(w, *target, keep);
        BlobPlan plan = plan_blob(w);
        const uint64_t padded = align_up(plan.bytes);
        if (blob.size() < padded) blob = AlignedBuffer(padded);
        std::memset(blob.data(), 0, padded);
        fill_blob(plan, l, x, blob.data());
        interleave_blob(plan.layout, blob.data(), interleave_scratch);
        PackedExpert pe;
        pe.drive = drive[x];
        pe.offset = cursor[pe.drive];
        pe.length = plan.bytes;
        pe.xxh3 = xxh3_64(blob.data(), plan.bytes);
        pe.layout = m.add_layout(plan.layout);
        files[pe.drive]->write_at(blob.data(), padded, pe.offset);
        cursor[pe.drive] += padded;
        records.push_back(pe);
        progress.add(source_bytes);
      }
      for (auto& f : files) f->sync();
    }
    m.experts.push_back(std::move(records));
    // Record the finished layer (atomically) before starting the next.
    nlohmann::json pj = {{"signature", m.options["signature"]}, {"cursors", cursor}, {"manifest", m.to_json()}};
    const std::string tmp = progress_path.string() + ".tmp";
    {
      std::ofstream out(tmp);
      out << pj.dump();
      if (!out) throw Error(tmp + ": cannot write");
    }
    fs::rename(tmp, progress_path);
    if (o.stop_after_layers >= 0 && l + 1 >= o.stop_after_layers) throw Error("pack stopped after layer " + std::to_string(l) + " (test)");
  }
  progress.finish();

  for (size_t d = 0; d < dirs.size(); ++d) m.drives[d].bytes = cursor[d];
  for (uint64_t b : cursor) report.expert_bytes += b;
  m.config = config_summary(c);
  if (ck.kind == Checkpoint::Kind::HuggingFace) {
    m.hf_config = read_json_file(ck.trunk_path / "config.json");
  }
  if (m.tensors.empty()) {
    // Resumed after the trunk was written: describe it from the file.
    Checkpoint packed_trunk = ck.kind == Checkpoint::Kind::Gguf ? open_checkpoint(o.out / "trunk.gguf")
                                                                : open_checkpoint(o.out / "trunk");
    for (const auto& name : packed_trunk.source->names()) {
      const TensorView& t = packed_trunk.source->get(name);
      m.tensors[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}};
      report.trunk_bytes += t.nbytes;
    }
  }
  m.save(manifest_path);
  fs::remove(progress_path, ec);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
