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
#include "model/model.h"
#include "model/weights.h"
#include "pack/drive_weights.h"
#include "pack/manifest.h"
#include "pack/placement.h"
#include "pack/source_signature.h"
#include "pack/trunk_writer.h"
#include "remote/remote_mirror.h"
#include "model/expert_heat.h"
#include "storage/aligned_buffer.h"
#include "storage/atomic_file.h"
#include "storage/checksum.h"
#include "storage/pack_dir.h"
#include "util/error.h"
#include "util/json_depth.h"
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


std::optional<kernels::QuantTarget> quant_target(const std::string& experts) {
  if (experts == "q8") return kernels::QuantTarget::Q8_0;
  if (experts == "int4") return kernels::QuantTarget::Int4;
  if (experts == "mxfp4") return kernels::QuantTarget::Mxfp4;
  return std::nullopt;
}

// One expert as its blob in `buf`: bound from the source, re-quantized when
// asked, laid out with its header, interleaved where its format has an
// interleaved layout. The same bytes every time for the same source.
struct Blob {
  ExpertWeights layout;  // pointers are offsets into the blob
  uint64_t bytes = 0;    // the blob
  uint64_t padded = 0;   // what is written: a multiple of 4 KiB
  uint64_t xxh3 = 0;
  uint64_t source_bytes = 0;  // the expert's bytes in the source (progress)
};

Blob make_blob(const ExpertBindFn& bind, int64_t l, int64_t x, std::optional<kernels::QuantTarget> target,
               AlignedBuffer& buf, std::vector<uint8_t>& scratch) {
  std::vector<std::unique_ptr<kernels::OwnedMatrix>> keep;
  ExpertWeights w = bind(l, x);
  Blob b;
  b.source_bytes = expert_payload_bytes(w);
  if (target) w = requantize(w, *target, keep);
  BlobPlan plan = plan_blob(w);
  b.bytes = plan.bytes;
  b.padded = align_up(plan.bytes);
  if (buf.size() < b.padded) buf = AlignedBuffer(b.padded);
  std::memset(buf.data(), 0, b.padded);
  fill_blob(plan, l, x, buf.data());
  interleave_blob(plan.layout, buf.data(), scratch);
  b.layout = plan.layout;
  b.xxh3 = xxh3_64(buf.data(), plan.bytes);
  return b;
}

// The xxh3 of `length` bytes of a written file at `offset` (0 when the file
// is shorter).
uint64_t hash_written(const fs::path& file, uint64_t offset, uint64_t length) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes(length, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(length));
  if (!in || static_cast<uint64_t>(in.gcount()) != length) return 0;
  return xxh3_64(bytes.data(), bytes.size());
}

std::string hex32(uint64_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08llx", static_cast<unsigned long long>(v & 0xffffffffu));
  return b;
}

// What an interrupted run left (DIR/pack.progress.json), when it is of the
// same signature: how far it got.
struct Resume {
  bool trunk = false;  // the trunk and its checksums are written
  std::vector<uint64_t> cursors;
  std::optional<Manifest> partial;  // its layers so far, layouts, drive weights, trunk tensors
  int64_t layers() const { return partial ? static_cast<int64_t>(partial->experts.size()) : 0; }
};

nlohmann::json progress_json(uint64_t signature, bool trunk, const std::vector<uint64_t>& cursors, const Manifest& m) {
  return {{"signature", signature}, {"trunk", trunk}, {"cursors", cursors}, {"manifest", m.to_json()}};
}

// The progress file, if it is of `signature` and whole; a reason to start
// over otherwise ("" when there is none to start over from), and the expert
// files of another pack's run that are to go.
std::optional<Resume> read_resume(const fs::path& path, uint64_t signature, size_t drives, const ModelConfig& c,
                                  std::string& why_not, std::vector<fs::path>& stale) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  // A record nested deeper than pack writes one is damaged (and a parsed
  // value that deep would overflow the stack when destroyed).
  const nlohmann::json j = json_nesting_depth(text, 64) > 64
                               ? nlohmann::json()
                               : nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("signature") || !j["signature"].is_number_unsigned()) {
    why_not = "its progress record is damaged";
    return std::nullopt;
  }
  if (j["signature"].get<uint64_t>() != signature) {
    why_not = "it was packing another source (or the source changed since, or other options)";
    // Its expert files, named by its signature, go.
    try {
      const Manifest other = Manifest::from_json(j.at("manifest"), path.string());
      for (uint32_t d = 0; d < other.drives.size(); ++d) stale.push_back(other.drive_file(path.parent_path(), d));
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }
  try {
    Resume r;
    r.trunk = j.at("trunk").get<bool>();
    r.cursors = j.at("cursors").get<std::vector<uint64_t>>();
    r.partial = Manifest::from_json(j.at("manifest"), path.string());
    if (r.cursors.size() != drives || r.partial->drives.size() != drives || r.layers() > c.expert_layers())
      throw Error(path.string() + ": does not match this pack's drives and layers");
    for (const auto& layer : r.partial->experts)
      for (const PackedExpert& e : layer)
        if (e.offset + align_up(e.length) > r.cursors[e.drive]) throw Error(path.string() + ": a blob past its cursor");
    return r;
  } catch (const std::exception& e) {
    why_not = std::string("its progress record is damaged (") + e.what() + ")";
    return std::nullopt;
  }
}

void write_progress(const fs::path& path, const nlohmann::json& j) { write_file_atomically(path, j.dump()); }

}  // namespace

PackReport pack_model(const PackOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.trunk != "keep" && o.trunk != "int8") throw Error("--trunk must be keep or int8");
  if (o.experts != "keep" && o.experts != "q8" && o.experts != "int4" && o.experts != "mxfp4")
    throw Error("--experts must be keep, q8, int4 or mxfp4");
  if (RemoteMirror::is_mirror(o.source) && !RemoteMirror::is_full(o.source))
    throw Error(o.source.string() + " is a streaming install: most of its experts are not on the drive yet "
                "(strata upgrade it --full first, pack its source, or pull it with --full)");
  Checkpoint ck = open_checkpoint(o.source);
  if (ck.kind == Checkpoint::Kind::Pack) throw Error(o.source.string() + " is already a pack; pack its source instead");
  const ModelConfig& c = ck.config;
  std::error_code ec;
  for (const fs::path& d : o.drives)
    if (!fs::is_directory(d, ec)) throw Error(d.string() + ": --drive must be an existing directory");
  // The whole source is checked before anything is written: every tensor the
  // architecture binds, trunk and experts, present and of its shape.
  {
    ModelSetup setup;
    setup.threads = 1;
    setup.context = 1;
    setup.max_batch = 1;
    Model(open_checkpoint(o.source), setup).check_tensors();
  }

  // Drives: the pack directory when none is given. Inside the pack a folder
  // is stored relative to it, so the pack directory can move as a whole;
  // outside, absolute, and relative as a second guess (manifest.h).
  std::vector<fs::path> dirs = o.drives;
  if (dirs.empty()) dirs.push_back(o.out);
  Manifest m;
  const std::string out_canon = fs::weakly_canonical(o.out).string();
  bool shared_drive = false;  // a folder outside the pack, which other packs may use too
  for (const fs::path& dir : dirs) {
    const fs::path canon = fs::weakly_canonical(dir);
    const fs::path inside = canon.lexically_relative(out_canon);
    const bool is_inside = !inside.empty() && *inside.begin() != "..";
    PackDrive pd;
    pd.path = is_inside ? inside.string() : canon.string();
    if (!is_inside) pd.relative = inside.empty() ? std::string() : inside.string();
    shared_drive = shared_drive || !is_inside;
    m.drives.push_back(pd);
  }
  m.source = o.source_label.empty() ? fs::weakly_canonical(o.source).string() : o.source_label;
  m.options = {{"trunk", o.trunk}, {"experts", o.experts}, {"trace", o.trace.empty() ? "" : fs::weakly_canonical(o.trace).string()}};
  // Said apart from the options, so no reader has to know which options lose
  // precision; the fidelity is measured against the source afterwards
  // (runtime/pack_fidelity.h).
  m.lossy = PackLossy::from_options(o.trunk, o.experts);
  {
    std::vector<std::string> what = {"trunk " + o.trunk, "experts " + o.experts};
    if (!o.trace.empty()) {
      std::ifstream t(o.trace, std::ios::binary);
      what.push_back("trace " + std::string(std::istreambuf_iterator<char>(t), {}));
    }
    for (const PackDrive& d : m.drives) what.push_back("drive " + d.path + " " + d.relative);
    if (o.feed) what.push_back("source " + o.feed->source_identity);
    m.options["signature"] = pack_signature(ck, what, /*sample_trunk=*/!o.feed);
  }
  const uint64_t signature = m.options["signature"].get<uint64_t>();
  // Expert files are named by what they hold, so the same source and options
  // give the same pack byte for byte; beside other packs' files on a shared
  // drive folder, by where this pack is too.
  const std::string tag = hex32(shared_drive ? signature ^ xxh3_64(out_canon.data(), out_canon.size()) : signature);
  for (size_t d = 0; d < dirs.size(); ++d)
    m.drives[d].file = "strata-experts-" + tag + "-" + std::to_string(d) + ".bin";

  fs::create_directories(o.out, ec);
  if (ec) throw Error(o.out.string() + ": cannot create: " + ec.message());
  PackReport report;
  const fs::path manifest_path = o.out / kPackManifest, progress_path = o.out / kPackProgress;
  if (fs::exists(manifest_path)) {
    const Manifest old = Manifest::load(o.out);
    if (old.options.value("signature", uint64_t{0}) == signature) {
      fs::remove(progress_path, ec);  // left by a run killed after its manifest was written
      report.already_packed = true;
      for (const auto& d : old.drives) report.drive_weights.push_back(d.weight);
      return report;
    }
    throw Error(o.out.string() + " already holds a different pack (of " + old.source +
                "; or of this source before it changed, or with other options); remove it or choose another --out");
  }

  const std::optional<kernels::QuantTarget> target = quant_target(o.experts);
  AlignedBuffer blob;
  std::vector<uint8_t> interleave_scratch;

  // Resume: the layers an earlier run finished, with their records, and the
  // drive weights they were placed by (weighed again, the later layers
  // would be placed by another probe's figures). Its signature covers the
  // source's headers and trunk; one expert of each finished layer is made
  // again from the source and must be what was written, so that a source
  // changed in its experts alone starts over rather than mix two models.
  std::string why_not;
  std::vector<fs::path> stale;
  std::optional<Resume> resume = read_resume(progress_path, signature, dirs.size(), c, why_not, stale);
  // Only expert files of pack's own naming, in this run's drive folders, and
  // not this run's: the record is input like any file.
  for (const fs::path& f : stale) {
    const std::string name = f.filename().string();
    const bool ours = std::any_of(m.drives.begin(), m.drives.end(), [&](const PackDrive& d) { return d.file == name; });
    const bool in_drive = std::any_of(dirs.begin(), dirs.end(), [&](const fs::path& d) {
      return fs::equivalent(d, f.parent_path(), ec);
    });
    if (!ours && in_drive && name.starts_with("strata-experts-") && name.ends_with(".bin")) fs::remove(f, ec);
  }
  if (resume && o.start_over) {
    why_not = "the source changed since";
    resume.reset();
  }
  if (resume) {
    for (int64_t l = 0; l < resume->layers() && why_not.empty(); ++l) {
      if (resume->partial->experts[l].empty()) continue;
      const int64_t x = static_cast<int64_t>(xxh3_64(&l, sizeof l) % resume->partial->experts[l].size());
      const PackedExpert& pe = resume->partial->experts[l][x];
      // A fed source's bytes of a finished layer are gone: the feeder
      // vouches for them; what was written is checked all the same.
      if (!o.feed) {
        WeightBinder binder(*ck.source, c);
        const ExpertBindFn bind = expert_binder(c, *ck.source, binder);
        const Blob b = make_blob(bind, l, x, target, blob, interleave_scratch);
        if (b.xxh3 != pe.xxh3 || b.bytes != pe.length) {
          why_not = "layer " + std::to_string(l) + " expert " + std::to_string(x) + " of the source is not what it wrote";
          continue;
        }
      }
      if (hash_written(resume->partial->drive_file(o.out, pe.drive), pe.offset, pe.length) != pe.xxh3)
        why_not = "layer " + std::to_string(l) + " expert " + std::to_string(x) + " was not written whole";
    }
    if (!why_not.empty()) resume.reset();
  }
  if (!resume && !why_not.empty()) {
    report.restarted = true;
    if (o.notice) o.notice(o.out.string() + ": an interrupted pack is here, but " + why_not + ": starting over");
  }
  Resume r = resume ? std::move(*resume) : Resume{};
  if (!resume) r.cursors.assign(dirs.size(), 0);
  const int64_t first_layer = r.layers();
  report.layers_resumed = first_layer;
  if (r.partial) {
    m.layouts = r.partial->layouts;
    m.experts = r.partial->experts;
    m.tensors = r.partial->tensors;
  }
  std::vector<double> weights;
  if (r.partial) {
    for (const auto& d : r.partial->drives) weights.push_back(d.weight);
    report.probe = "resumed";
  } else {
    DriveWeights weighed = weigh_drives(dirs, o.probe, o.notice);
    weights = std::move(weighed.weights);
    report.probe = weighed.source;
  }
  for (size_t d = 0; d < dirs.size(); ++d) m.drives[d].weight = weights[d];
  report.drive_weights = weights;
  m.trunk = ck.kind == Checkpoint::Kind::Gguf ? "trunk.gguf" : "trunk";
  m.trunk_checksums = kTrunkChecksums;
  // From here on the directory is a pack in the making: opening it says so
  // (storage/pack_dir.h) until the manifest is written.
  write_progress(progress_path, progress_json(signature, r.trunk, r.cursors, m));

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

  auto pack_trunk = [&] {
    if (!r.trunk || !fs::exists(o.out / m.trunk) || !fs::exists(o.out / kTrunkChecksums)) {
      if (o.feed && o.feed->before_trunk) o.feed->before_trunk();
      TrunkResult tr = write_trunk(ck, o.out, o.trunk == "int8", [&](uint64_t n) { progress.add(n); });
      report.trunk_bytes = tr.bytes;
      m.tensors = tr.tensors;
      r.trunk = true;
      write_progress(progress_path, progress_json(signature, r.trunk, r.cursors, m));
    } else {
      progress.add(trunk_source);
    }
  };
  if (!o.feed) pack_trunk();

  std::vector<std::unique_ptr<BlobFile>> files;
  for (size_t d = 0; d < dirs.size(); ++d) {
    files.push_back(std::make_unique<BlobFile>(m.drive_file(o.out, static_cast<uint32_t>(d))));
    files.back()->truncate(r.cursors[d]);
  }

  for (int64_t l = 0; l < c.expert_layers(); ++l) {
    if (l < first_layer) {
      for (const auto& e : m.experts[l]) progress.add(e.length);
      continue;
    }
    std::vector<PackedExpert> records;
    if (c.layer_is_moe(l)) {
      if (o.feed && o.feed->before_layer) o.feed->before_layer(l);
      // A fresh binder per layer: whatever it converts is freed with it.
      WeightBinder binder(*ck.source, c);
      ExpertBindFn bind = expert_binder(c, *ck.source, binder);
      std::vector<double> h(c.n_routed_experts, 1.0);
      if (l < heat.layers())  // a heat or trace covers the decoder layers; MTP layers are spread evenly
        for (int64_t e = 0; e < c.n_routed_experts; ++e) h[e] = heat.count(l, e);
      const std::vector<uint32_t> drive = place_layer(weights, h);
      for (int64_t x = 0; x < c.n_routed_experts; ++x) {
        const Blob b = make_blob(bind, l, x, target, blob, interleave_scratch);
        PackedExpert pe;
        pe.drive = drive[x];
        pe.offset = r.cursors[pe.drive];
        pe.length = b.bytes;
        pe.xxh3 = b.xxh3;
        pe.layout = m.add_layout(b.layout);
        files[pe.drive]->write_at(blob.data(), b.padded, pe.offset);
        r.cursors[pe.drive] += b.padded;
        records.push_back(pe);
        progress.add(b.source_bytes);
      }
      for (auto& f : files) f->sync();
    }
    m.experts.push_back(std::move(records));
    // Record the finished layer (atomically) before starting the next.
    write_progress(progress_path, progress_json(signature, r.trunk, r.cursors, m));
    if (o.feed && o.feed->after_layer && c.layer_is_moe(l)) o.feed->after_layer(l);
    if (o.stop_after_layers >= 0 && l + 1 >= o.stop_after_layers) throw Error("pack stopped after layer " + std::to_string(l) + " (test)");
  }
  if (o.feed) pack_trunk();
  progress.finish();

  for (size_t d = 0; d < dirs.size(); ++d) m.drives[d].bytes = r.cursors[d];
  for (uint64_t b : r.cursors) report.expert_bytes += b;
  if (report.trunk_bytes == 0)  // resumed after the trunk was written
    for (const FileChecksum& f : read_trunk_checksums(o.out / kTrunkChecksums).files) report.trunk_bytes += f.bytes;
  m.config = manifest_config_summary(c);
  if (ck.kind == Checkpoint::Kind::HuggingFace) {
    m.hf_config = read_json_file(ck.trunk_path / "config.json");
  }
  // What is written is what a load accepts.
  m.check_against(c, manifest_path.string());
  m.save(manifest_path);
  fs::remove(progress_path, ec);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
