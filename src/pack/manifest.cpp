#include "pack/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "model/expert_layout.h"
#include "model/pack_drive_path.h"
#include "storage/aligned_buffer.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

const char* packing_name(kernels::Packing p) {
  switch (p) {
    case kernels::Packing::Plain: return "plain";
    case kernels::Packing::Int4x8: return "int4x8";
    case kernels::Packing::Mxfp4Split: return "mxfp4_split";
    case kernels::Packing::Interleaved16: return "interleaved16";
  }
  return "plain";
}

std::optional<DType> dtype_by_name(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(DType::MXFP4); ++i)
    if (s == dtype_name(static_cast<DType>(i))) return static_cast<DType>(i);
  return std::nullopt;
}

uint64_t off(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

nlohmann::json matrix_json(const kernels::WeightMatrix& m) {
  nlohmann::json j = {{"dtype", dtype_name(m.dtype)}, {"out", m.out},   {"in", m.in},
                      {"packing", packing_name(m.packing)}, {"data", off(m.data)}};
  if (m.scales) j.update({{"scales", off(m.scales)}, {"scale_dtype", dtype_name(m.scale_dtype)}, {"scale_group", m.scale_group}});
  if (m.block_scale) j.update({{"block_scale", off(m.block_scale)}, {"block_out", m.block_out}, {"block_in", m.block_in}});
  if (m.bias) j["bias"] = off(m.bias);
  return j;
}

kernels::WeightMatrix matrix_from_json(const nlohmann::json& j, const std::string& where) {
  auto num = [&](const char* k) -> int64_t {
    if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 0)
      throw Error(where + ": '" + k + "' must be a non-negative integer");
    return j[k].get<int64_t>();
  };
  auto type = [&](const char* k) {
    if (!j.contains(k) || !j[k].is_string()) throw Error(where + ": '" + k + "' must be a type name");
    auto t = dtype_by_name(j[k].get<std::string>());
    if (!t) throw Error(where + ": unknown type '" + j[k].get<std::string>() + "'");
    return *t;
  };
  kernels::WeightMatrix m;
  m.dtype = type("dtype");
  m.out = num("out");
  m.in = num("in");
  const std::string packing = j.value("packing", "plain");
  if (packing == "plain") m.packing = kernels::Packing::Plain;
  else if (packing == "int4x8") m.packing = kernels::Packing::Int4x8;
  else if (packing == "mxfp4_split") m.packing = kernels::Packing::Mxfp4Split;
  else if (packing == "interleaved16") m.packing = kernels::Packing::Interleaved16;
  else throw Error(where + ": unknown packing '" + packing + "'");
  auto ptr = [](int64_t v) { return reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(v)); };
  m.data = ptr(num("data"));
  if (j.contains("scales")) {
    m.scales = ptr(num("scales"));
    m.scale_dtype = type("scale_dtype");
    m.scale_group = num("scale_group");
  }
  if (j.contains("block_scale")) {
    m.block_scale = reinterpret_cast<const float*>(ptr(num("block_scale")));
    m.block_out = num("block_out");
    m.block_in = num("block_in");
  }
  if (j.contains("bias")) m.bias = reinterpret_cast<const float*>(ptr(num("bias")));
  if (m.data == nullptr) throw Error(where + ": 'data' must not be 0");
  try {
    kernels::check_supported(m);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return m;
}

nlohmann::json layout_json(const ExpertWeights& e) {
  nlohmann::json j = nlohmann::json::object();
  if (e.gate.valid()) j["gate"] = matrix_json(e.gate);
  if (e.up.valid()) j["up"] = matrix_json(e.up);
  if (e.down.valid()) j["down"] = matrix_json(e.down);
  if (e.gate_up.valid()) j["gate_up"] = matrix_json(e.gate_up);
  return j;
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

uint32_t Manifest::add_layout(const ExpertWeights& layout) {
  const std::string key = layout_json(layout).dump();
  for (size_t i = 0; i < layouts.size(); ++i)
    if (layout_json(layouts[i]).dump() == key) return static_cast<uint32_t>(i);
  layouts.push_back(layout);
  return static_cast<uint32_t>(layouts.size() - 1);
}

fs::path Manifest::drive_file(const fs::path& dir, uint32_t drive) const {
  const PackDrive& d = drives.at(drive);
  return pack_drive_path(dir, d.path, d.relative, d.file);
}

nlohmann::json Manifest::to_json() const {
  nlohmann::json j;
  j["format"] = "strata-pack";
  j["version"] = kVersion;
  j["source"] = source;
  j["trunk"] = trunk;
  j["options"] = options;
  if (lossy.any()) j["lossy"] = lossy_json(lossy);
  if (fidelity) j["fidelity"] = fidelity_json(*fidelity);
  j["config"] = config;
  j["hf_config"] = hf_config;
  j["tensors"] = tensors;
  j["drives"] = nlohmann::json::array();
  for (const auto& d : drives) {
    nlohmann::json dj = {{"path", d.path}, {"file", d.file}, {"weight", d.weight}, {"bytes", d.bytes}};
    if (!d.relative.empty()) dj["relative"] = d.relative;
    j["drives"].push_back(std::move(dj));
  }
  j["layouts"] = nlohmann::json::array();
  for (const auto& l : layouts) j["layouts"].push_back(layout_json(l));
  j["experts"] = nlohmann::json::array();
  for (const auto& layer : experts) {
    nlohmann::json lj = nlohmann::json::array();
    for (const auto& e : layer) lj.push_back({e.drive, e.offset, e.length, hex64(e.xxh3), e.layout});
    j["experts"].push_back(std::move(lj));
  }
  return j;
}

Manifest Manifest::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || j.value("format", "") != "strata-pack") throw Error(where + ": not a strata pack manifest");
  if (j.value("version", 0) != kVersion)
    throw Error(where + ": manifest version " + std::to_string(j.value("version", 0)) + " (this strata reads version " +
                std::to_string(kVersion) + "); re-pack the model");
  Manifest m;
  try {
    m.source = j.at("source").get<std::string>();
    m.trunk = j.at("trunk").get<std::string>();
    m.options = j.value("options", nlohmann::json::object());
    // Packs written before "lossy" existed say it through their options only.
    m.lossy = j.contains("lossy") ? lossy_from_json(j["lossy"], where)
                                  : PackLossy::from_options(m.options.value("trunk", "keep"),
                                                            m.options.value("experts", "keep"));
    if (j.contains("fidelity")) m.fidelity = fidelity_from_json(j["fidelity"], where);
    m.config = j.value("config", nlohmann::json::object());
    m.hf_config = j.value("hf_config", nlohmann::json());
    m.tensors = j.value("tensors", nlohmann::json::object());
    for (const auto& d : j.at("drives"))
      m.drives.push_back({d.at("path").get<std::string>(), d.at("file").get<std::string>(),
                          d.value("relative", std::string()), d.value("weight", 1.0), d.value("bytes", uint64_t{0})});
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed manifest: " + e.what());
  }
  if (m.trunk != "trunk" && m.trunk != "trunk.gguf") throw Error(where + ": 'trunk' must be \"trunk\" or \"trunk.gguf\"");
  if (m.drives.empty()) throw Error(where + ": no drives");
  const auto& layouts = j.contains("layouts") ? j["layouts"] : nlohmann::json();
  if (!layouts.is_array()) throw Error(where + ": 'layouts' must be an array");
  for (size_t i = 0; i < layouts.size(); ++i) {
    const std::string w = where + ": layout " + std::to_string(i);
    const auto& l = layouts[i];
    if (!l.is_object()) throw Error(w + ": not an object");
    ExpertWeights e;
    if (l.contains("gate")) e.gate = matrix_from_json(l["gate"], w + " gate");
    if (l.contains("up")) e.up = matrix_from_json(l["up"], w + " up");
    if (l.contains("down")) e.down = matrix_from_json(l["down"], w + " down");
    if (l.contains("gate_up")) e.gate_up = matrix_from_json(l["gate_up"], w + " gate_up");
    if (!e.down.valid() || (!e.gate_up.valid() && (!e.gate.valid() || !e.up.valid())))
      throw Error(w + ": needs down and either gate_up or gate and up");
    m.layouts.push_back(e);
  }
  const auto& ex = j.contains("experts") ? j["experts"] : nlohmann::json();
  if (!ex.is_array()) throw Error(where + ": 'experts' must be an array");
  for (size_t l = 0; l < ex.size(); ++l) {
    if (!ex[l].is_array()) throw Error(where + ": experts of layer " + std::to_string(l) + " must be an array");
    std::vector<PackedExpert> layer;
    for (size_t x = 0; x < ex[l].size(); ++x) {
      const auto& r = ex[l][x];
      const std::string w = where + ": layer " + std::to_string(l) + " expert " + std::to_string(x);
      if (!r.is_array() || r.size() != 5 || !r[0].is_number_unsigned() || !r[1].is_number_unsigned() ||
          !r[2].is_number_unsigned() || !r[3].is_string() || !r[4].is_number_unsigned())
        throw Error(w + ": expected [drive, offset, length, \"xxh3\", layout]");
      PackedExpert e;
      e.drive = r[0].get<uint32_t>();
      e.offset = r[1].get<uint64_t>();
      e.length = r[2].get<uint64_t>();
      const std::string h = r[3].get<std::string>();
      char* end = nullptr;
      e.xxh3 = std::strtoull(h.c_str(), &end, 16);
      if (h.size() != 16 || *end) throw Error(w + ": checksum must be 16 hex digits");
      e.layout = r[4].get<uint32_t>();
      if (e.drive >= m.drives.size()) throw Error(w + ": drive " + std::to_string(e.drive) + " is not listed");
      if (e.layout >= m.layouts.size()) throw Error(w + ": layout " + std::to_string(e.layout) + " is not listed");
      if (e.offset % kIoAlign != 0) throw Error(w + ": offset is not 4 KiB-aligned");
      if (e.length < 64) throw Error(w + ": blob is too short");
      uint64_t end_of_layout = 0;
      visit_expert_ranges(m.layouts[e.layout], [&](auto& p, size_t bytes) {
        end_of_layout = std::max<uint64_t>(end_of_layout, off(p) + bytes);
      });
      if (end_of_layout > e.length) throw Error(w + ": its layout reaches past the blob");
      layer.push_back(e);
    }
    m.experts.push_back(std::move(layer));
  }
  return m;
}

Manifest Manifest::load(const fs::path& dir) {
  const fs::path p = dir / "manifest.json";
  std::ifstream in(p);
  if (!in) throw Error(p.string() + ": cannot open");
  const std::string text = read_text_file(p);
  check_json_depth(text, p.string());
  nlohmann::json j = parse_json_or_discarded(text);
  if (j.is_discarded()) throw Error(p.string() + ": not valid JSON (damaged pack? re-run strata pack)");
  return from_json(j, p.string());
}

void Manifest::save(const fs::path& path) const {
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << to_json().dump() << "\n";
    out.flush();
    if (!out) throw Error(tmp + ": cannot write");
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path.string() + ": cannot write: " + ec.message());
}

ExpertCatalog catalog_from_manifest(const Manifest& m, const fs::path& dir, Storage& storage) {
  ExpertCatalog cat;
  std::vector<FileId> files;
  for (uint32_t d = 0; d < m.drives.size(); ++d) {
    const fs::path f = m.drive_file(dir, d);
    try {
      files.push_back(storage.open(f));
    } catch (const Error& e) {
      throw Error("pack drive " + std::to_string(d) + " (" + m.drives[d].path + ") is not available: " + e.what());
    }
  }
  cat.layers.resize(m.experts.size());
  for (size_t l = 0; l < m.experts.size(); ++l) {
    for (size_t x = 0; x < m.experts[l].size(); ++x) {
      const PackedExpert& pe = m.experts[l][x];
      StreamedExpert e;
      e.layout = m.layouts[pe.layout];
      e.relative_mask = ~uint64_t{0};
      e.payload_bytes = expert_payload_bytes(e.layout);
      e.reads.push_back({files[pe.drive], pe.offset, pe.length, 0, true, pe.xxh3});
      e.blob_header = true;
      finish_slot_size(e);
      cat.max_slot_bytes = std::max(cat.max_slot_bytes, e.slot_bytes);
      cat.layers[l].push_back(std::move(e));
    }
  }
  return cat;
}

}  // namespace strata
