#include "model/weights_identity.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <vector>

#include "formats/gguf.h"
#include "model/pack_drive_path.h"
#include "storage/checksum.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// xxh3 over a stream of fields, folded a chunk at a time so that a
// checkpoint of 10^5 tensors is never one string in memory. Each field is
// length-prefixed: no two different sequences of fields hash the same bytes.
class Hasher {
 public:
  void add(std::string_view s) {
    add_u64(s.size());
    buf_.append(s);
    if (buf_.size() >= (1u << 20)) fold();
  }
  void add_u64(uint64_t v) { buf_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  uint64_t digest() {
    fold();
    return h_;
  }

 private:
  void fold() {
    buf_.insert(0, reinterpret_cast<const char*>(&h_), sizeof h_);
    h_ = xxh3_64(buf_.data(), buf_.size());
    buf_.clear();
  }
  std::string buf_;
  uint64_t h_ = 0;
};

// Up to the first `max` bytes of a file (all of a small metadata file); ""
// when it cannot be read.
std::string read_bytes(const fs::path& p, uint64_t max = UINT64_MAX) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  std::string s;
  char buf[1 << 16];
  while (s.size() < max && in) {
    in.read(buf, static_cast<std::streamsize>(std::min<uint64_t>(sizeof buf, max - s.size())));
    s.append(buf, static_cast<size_t>(in.gcount()));
  }
  return s;
}

// Size and modification time (stat() follows links: a hub cache's blob).
void add_file_stamp(Hasher& h, const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    h.add("missing");
    return;
  }
  h.add_u64(static_cast<uint64_t>(st.st_size));
  h.add_u64(static_cast<uint64_t>(st.st_mtim.tv_sec));
  h.add_u64(static_cast<uint64_t>(st.st_mtim.tv_nsec));
}

// A file as the tensor index names it: relative to the model, never where
// the model is ("." for a GGUF file itself).
std::string relative_name(const std::string& file, const fs::path& base) {
  const fs::path rel = fs::path(file).lexically_normal().lexically_relative(base.lexically_normal());
  if (rel.empty() || *rel.begin() == "..") return fs::path(file).filename().string();
  return rel.generic_string();
}

// A pack's expert drive files, found as the loader finds them
// (model/pack_drive_path.h). The pack layer sits above this one, so the
// manifest's fields are read here; anything malformed is left to the pack
// loader's clear error.
std::vector<fs::path> pack_drive_files(const fs::path& dir, const std::string& manifest) {
  std::vector<fs::path> files;
  const nlohmann::json j = parse_json_or_discarded(manifest);
  if (!j.is_object() || !j.contains("drives") || !j["drives"].is_array()) return files;
  for (const auto& d : j["drives"]) {
    if (!d.is_object() || !d.contains("path") || !d["path"].is_string() || !d.contains("file") || !d["file"].is_string())
      continue;
    const std::string relative =
        d.contains("relative") && d["relative"].is_string() ? d["relative"].get<std::string>() : std::string();
    files.push_back(pack_drive_path(dir, d["path"].get<std::string>(), relative, d["file"].get<std::string>()));
  }
  return files;
}

}  // namespace

std::string weights_identity(const Checkpoint& ck) {
  Hasher h;
  h.add("strata weights identity v1");
  h.add_u64(static_cast<uint64_t>(ck.kind));

  // The tensor index, in name order; and the files it points into.
  const fs::path base = ck.trunk_path.lexically_normal();
  std::map<std::string, std::string> files;  // as named relative to the model -> path
  if (ck.source) {
    std::vector<std::string> names = ck.source->names();
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const TensorView& t = ck.source->get(name);
      h.add(name);
      h.add(dtype_name(t.dtype));
      h.add_u64(t.shape.size());
      for (int64_t d : t.shape) h.add_u64(static_cast<uint64_t>(d));
      const std::string file = t.file.empty() ? std::string() : relative_name(t.file, base);
      h.add(file);
      h.add_u64(t.offset);
      h.add_u64(t.nbytes);
      if (!t.file.empty()) files.emplace(file, t.file);
    }
  }

  // Metadata: what the config is read from.
  if (ck.gguf) {
    h.add("gguf header");
    h.add(read_bytes(ck.gguf->path(), ck.gguf->data_offset()));
  } else {
    h.add("config.json");
    h.add(read_bytes(base / "config.json"));
  }
  if (ck.kind == Checkpoint::Kind::Pack) {
    const std::string manifest = read_bytes(ck.path / "manifest.json");
    h.add("manifest.json");
    h.add(manifest);
    // Named by their place in the manifest, not their path: a drive folder
    // outside the pack moved with it keeps its identity.
    const std::vector<fs::path> drives = pack_drive_files(ck.path, manifest);
    for (size_t d = 0; d < drives.size(); ++d)
      files.emplace("drive " + std::to_string(d) + ": " + drives[d].filename().string(), drives[d].string());
  }

  // Every file the weights are in: size and modification time, in the order
  // of their names relative to the model (the same wherever it is).
  for (const auto& [name, path] : files) {
    h.add(name);
    add_file_stamp(h, path);
  }

  const std::string hex = hash_hex(h.digest());  // "0x…"
  return hex.substr(2);
}

}  // namespace strata
