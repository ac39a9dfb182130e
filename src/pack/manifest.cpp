#include "pack/manifest.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "model/arch.h"
#include "model/checkpoint.h"
#include "model/expert_layout.h"
#include "model/pack_drive_path.h"
#include "storage/aligned_buffer.h"
#include "storage/atomic_file.h"
#include "storage/checksum.h"
#include "util/checked_math.h"
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

// Dimensions past this are no model's (and keep every product of two of
// them, times an element's bytes, inside 64 bits).
constexpr int64_t kMaxDim = int64_t{1} << 31;

kernels::WeightMatrix matrix_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": not an object");
  auto num = [&](const char* k, int64_t max) -> int64_t {
    if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 0)
      throw Error(where + ": '" + k + "' must be a non-negative integer");
    const int64_t v = j[k].get<int64_t>();
    if (v > max) throw Error(where + ": '" + k + "' is " + std::to_string(v) + ", more than any model has");
    return v;
  };
  auto offset = [&](const char* k) { return num(k, INT64_MAX); };
  auto type = [&](const char* k) {
    if (!j.contains(k) || !j[k].is_string()) throw Error(where + ": '" + k + "' must be a type name");
    auto t = dtype_by_name(j[k].get<std::string>());
    if (!t) throw Error(where + ": unknown type '" + j[k].get<std::string>() + "'");
    return *t;
  };
  kernels::WeightMatrix m;
  m.dtype = type("dtype");
  m.out = num("out", kMaxDim);
  m.in = num("in", kMaxDim);
  const nlohmann::json packing = j.contains("packing") ? j["packing"] : nlohmann::json("plain");
  if (!packing.is_string()) throw Error(where + ": 'packing' must be a name");
  if (packing == "plain") m.packing = kernels::Packing::Plain;
  else if (packing == "int4x8") m.packing = kernels::Packing::Int4x8;
  else if (packing == "mxfp4_split") m.packing = kernels::Packing::Mxfp4Split;
  else if (packing == "interleaved16") m.packing = kernels::Packing::Interleaved16;
  else throw Error(where + ": unknown packing '" + packing.get<std::string>() + "'");
  auto ptr = [](int64_t v) { return reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(v)); };
  m.data = ptr(offset("data"));
  if (j.contains("scales")) {
    m.scales = ptr(offset("scales"));
    m.scale_dtype = type("scale_dtype");
    m.scale_group = num("scale_group", kMaxDim);
  }
  if (j.contains("block_scale")) {
    m.block_scale = reinterpret_cast<const float*>(ptr(offset("block_scale")));
    m.block_out = num("block_out", kMaxDim);
    m.block_in = num("block_in", kMaxDim);
  }
  if (j.contains("bias")) m.bias = reinterpret_cast<const float*>(ptr(offset("bias")));
  if (m.data == nullptr) throw Error(where + ": 'data' must not be 0");
  // Sizes that are divided by.
  if (m.scales && m.scale_group == 0) throw Error(where + ": 'scale_group' must be positive");
  if (m.block_scale && m.block_out == 0) throw Error(where + ": 'block_out' must be positive");
  if (m.block_scale && m.block_in == 0) throw Error(where + ": 'block_in' must be positive");
  try {
    kernels::check_supported(m);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return m;
}

// A layout as `pack` lays a blob out (expert_layout.h: plan_blob): the ranges
// in visit order, each at the next 64-byte boundary after the header and the
// range before. Returns the blob's length; anything else is not a pack's.
uint64_t canonical_blob_bytes(const ExpertWeights& layout, const std::string& where) {
  uint64_t at = sizeof(BlobHeader);
  int range = 0;
  try {
    visit_expert_ranges(layout, [&](auto& p, size_t bytes) {
      if (off(p) != at)
        throw Error("range " + std::to_string(range) + " is at " + std::to_string(off(p)) + ", not at " +
                    std::to_string(at) + " where pack puts it");
      at = checked_add(at, bytes, "range " + std::to_string(range));
      at = checked_add(at, 63, "range " + std::to_string(range)) & ~uint64_t{63};
      ++range;
    });
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return at;
}

// A plain file name: no folder, nothing that leaves the drive's folder.
bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos && f.find('\0') == std::string::npos;
}

nlohmann::json layout_json(const ExpertWeights& e) {
  nlohmann::json j = nlohmann::json::object();
  if (e.gate.valid()) j["gate"] = matrix_json(e.gate);
  if (e.up.valid()) j["up"] = matrix_json(e.up);
  if (e.down.valid()) j["down"] = matrix_json(e.down);
  if (e.gate_up.valid()) j["gate_up"] = matrix_json(e.gate_up);
  return j;
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
  if (!trunk_checksums.empty()) j["trunk_checksums"] = trunk_checksums;
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
    for (const auto& e : layer) lj.push_back({e.drive, e.offset, e.length, hash_digits(e.xxh3), e.layout});
    j["experts"].push_back(std::move(lj));
  }
  return j;
}

Manifest Manifest::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("format") || j["format"] != "strata-pack")
    throw Error(where + ": not a strata pack manifest");
  // Integers are read as integers: nlohmann converts a float such as 1e19 to
  // int with undefined behaviour (the fuzzer found it).
  const int64_t version = j.contains("version") && j["version"].is_number_integer() ? j["version"].get<int64_t>() : -1;
  if (version != kVersion)
    throw Error(where + ": manifest version " + (version < 0 ? std::string("missing or not an integer") : std::to_string(version)) +
                " (this strata reads version " + std::to_string(kVersion) + "); re-pack the model");
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
    if (j.contains("trunk_checksums")) m.trunk_checksums = j["trunk_checksums"].get<std::string>();
    if (!j.at("drives").is_array()) throw Error(where + ": 'drives' must be an array");
    for (const auto& d : j.at("drives")) {
      if (d.contains("bytes") && !d["bytes"].is_number_unsigned())
        throw Error(where + ": a drive's 'bytes' must be a non-negative integer");
      m.drives.push_back({d.at("path").get<std::string>(), d.at("file").get<std::string>(),
                          d.value("relative", std::string()), d.value("weight", 1.0), d.value("bytes", uint64_t{0})});
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed manifest: " + e.what());
  }
  if (m.trunk != "trunk" && m.trunk != "trunk.gguf") throw Error(where + ": 'trunk' must be \"trunk\" or \"trunk.gguf\"");
  if (!m.trunk_checksums.empty() && !plain_file_name(m.trunk_checksums))
    throw Error(where + ": 'trunk_checksums' must be a file name in the pack");
  if (m.drives.empty()) throw Error(where + ": no drives");
  for (size_t d = 0; d < m.drives.size(); ++d) {
    const PackDrive& pd = m.drives[d];
    const std::string w = where + ": drive " + std::to_string(d);
    if (!plain_file_name(pd.file)) throw Error(w + ": 'file' must be a file name, not a path");
    if (!(pd.weight > 0) || !std::isfinite(pd.weight)) throw Error(w + ": 'weight' must be a positive number");
  }
  const auto& layouts = j.contains("layouts") ? j["layouts"] : nlohmann::json();
  if (!layouts.is_array()) throw Error(where + ": 'layouts' must be an array");
  std::vector<uint64_t> blob_bytes;  // per layout
  for (size_t i = 0; i < layouts.size(); ++i) {
    const std::string w = where + ": layout " + std::to_string(i);
    const auto& l = layouts[i];
    if (!l.is_object()) throw Error(w + ": not an object");
    for (const auto& [key, value] : l.items())
      if (key != "gate" && key != "up" && key != "down" && key != "gate_up")
        throw Error(w + ": unknown matrix '" + key + "'");
    ExpertWeights e;
    if (l.contains("gate")) e.gate = matrix_from_json(l["gate"], w + " gate");
    if (l.contains("up")) e.up = matrix_from_json(l["up"], w + " up");
    if (l.contains("down")) e.down = matrix_from_json(l["down"], w + " down");
    if (l.contains("gate_up")) e.gate_up = matrix_from_json(l["gate_up"], w + " gate_up");
    if (!e.down.valid() || e.gate.valid() != e.up.valid() || e.gate.valid() == e.gate_up.valid())
      throw Error(w + ": needs down and either gate_up or gate and up");
    blob_bytes.push_back(canonical_blob_bytes(e, w));
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
      // Read wide and compared before narrowing: drive 2^32 is not drive 0.
      const uint64_t drive = r[0].get<uint64_t>(), layout = r[4].get<uint64_t>();
      if (drive >= m.drives.size()) throw Error(w + ": drive " + std::to_string(drive) + " is not listed");
      if (layout >= m.layouts.size()) throw Error(w + ": layout " + std::to_string(layout) + " is not listed");
      PackedExpert e;
      e.drive = static_cast<uint32_t>(drive);
      e.layout = static_cast<uint32_t>(layout);
      e.offset = r[1].get<uint64_t>();
      e.length = r[2].get<uint64_t>();
      const auto h = parse_hash_digits(r[3].get<std::string>());
      if (!h) throw Error(w + ": checksum must be 16 lower-case hex digits");
      e.xxh3 = *h;
      if (e.offset % kIoAlign != 0) throw Error(w + ": offset is not 4 KiB-aligned");
      if (e.length != blob_bytes[e.layout])
        throw Error(w + ": length " + std::to_string(e.length) + " is not its layout's " +
                    std::to_string(blob_bytes[e.layout]) + " bytes");
      const uint64_t end = checked_add(e.offset, checked_add(e.length, kIoAlign - 1, w) & ~(kIoAlign - 1), w);
      const uint64_t drive_bytes = m.drives[e.drive].bytes;
      if (drive_bytes > 0 && end > drive_bytes)
        throw Error(w + ": reaches past the " + std::to_string(drive_bytes) + " bytes of drive " +
                    std::to_string(e.drive) + "'s file");
      layer.push_back(e);
    }
    m.experts.push_back(std::move(layer));
  }
  return m;
}

nlohmann::json manifest_config_summary(const ModelConfig& c) {
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) moe_layers += c.layer_is_moe(l);
  return {{"arch", arch_name(c.arch)},          {"layers", c.num_layers},
          {"moe_layers", moe_layers},           {"hidden_size", c.hidden_size},
          {"vocab_size", c.vocab_size},         {"routed_experts", c.n_routed_experts},
          {"experts_per_token", c.num_experts_per_tok}, {"moe_intermediate_size", c.moe_intermediate_size}};
}

namespace {

std::string dims(int64_t out, int64_t in) { return "[" + std::to_string(out) + ", " + std::to_string(in) + "]"; }

// One matrix of a layout against what the config (and, for a lossy pack,
// the format pack converted to) implies.
void check_matrix(const kernels::WeightMatrix& m, const ModelConfig& c, const PackLossy& lossy, int64_t out,
                  int64_t in, const std::string& w) {
  if (!m.valid()) return;
  if (m.out != out || m.in != in)
    throw Error(w + ": is " + dims(m.out, m.in) + " but the config implies " + dims(out, in) + " ([out, in])");
  const bool biases = arch_spec(c.arch).expert_biases;
  if ((m.bias != nullptr) != biases)
    throw Error(w + (biases ? ": has no bias, but " : ": has a bias, but no ") + arch_name(c.arch) +
                " experts carry one");
  if (m.packing == kernels::Packing::Plain && m.dtype == DType::F8_E4M3) {
    if (!c.fp8_block) throw Error(w + ": is FP8 but the config has no fp8 quantization_config");
    if (!m.block_scale || m.block_out != (*c.fp8_block)[0] || m.block_in != (*c.fp8_block)[1])
      throw Error(w + ": FP8 scale blocks of " + dims(m.block_out, m.block_in) +
                  " but the config's weight_block_size is " + dims((*c.fp8_block)[0], (*c.fp8_block)[1]));
  }
  // What pack's re-quantization writes (kernels/quantize.h).
  if (lossy.experts.empty()) return;
  const bool as_written = lossy.experts == "q8"     ? m.dtype == DType::Q8_0
                          : lossy.experts == "mxfp4" ? m.dtype == DType::MXFP4
                          : lossy.experts == "int4"  ? m.packing == kernels::Packing::Int4x8 &&
                                                          m.scale_dtype == DType::BF16 && m.scale_group == 32
                                                     : false;
  if (!as_written)
    throw Error(w + ": is " + dtype_name(m.dtype) + ", not what re-quantizing the experts to " + lossy.experts +
                " writes");
}

}  // namespace

void Manifest::check_against(const ModelConfig& c, const std::string& where) const {
  const nlohmann::json summary = manifest_config_summary(c);
  for (const auto& [key, value] : summary.items())
    if (config.contains(key) && config[key] != value)
      throw Error(where + ": config." + key + " is " + config[key].dump() + " but the trunk's config says " +
                  value.dump());
  // A pack lists the experts of every decoder layer and, since they stream
  // too, of the MTP layers after them; an older pack keeps those in its trunk.
  const auto listed = static_cast<int64_t>(experts.size());
  if (listed != c.num_layers && listed != c.expert_layers())
    throw Error(where + ": lists " + std::to_string(experts.size()) + " layers, the trunk's config " +
                std::to_string(c.num_layers) +
                (c.num_nextn_predict_layers > 0 ? " (" + std::to_string(c.expert_layers()) + " with its MTP layers)"
                                                : std::string()));
  if (listed == c.num_layers && c.num_nextn_predict_layers > 0) {
    bool in_trunk = false;
    for (const auto& [name, _] : tensors.items()) {
      const auto layer = routed_expert_layer(name);
      in_trunk |= layer && *layer >= c.num_layers;
    }
    if (!in_trunk)
      throw Error(where + ": lists the experts of the " + std::to_string(c.num_layers) +
                  " decoder layers only, and its trunk does not hold the MTP layer's experts either");
  }
  for (int64_t l = 0; l < listed; ++l) {
    const size_t want = c.layer_is_moe(l) ? static_cast<size_t>(c.n_routed_experts) : 0;
    if (experts[l].size() != want)
      throw Error(where + ": layer " + std::to_string(l) + " lists " + std::to_string(experts[l].size()) +
                  " experts, the config wants " + std::to_string(want));
  }
  // Each expert reads the hidden state (or its latent projection) and is
  // moe_intermediate_size wide.
  const int64_t width = c.moe_intermediate_size, input = c.latent_width > 0 ? c.latent_width : c.hidden_size;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const ExpertWeights& e = layouts[i];
    const std::string w = where + ": layout " + std::to_string(i);
    if (e.gate_up.valid() && !arch_spec(c.arch).fused_gate_up)
      throw Error(w + ": a fused gate_up, but " + arch_name(c.arch) + " experts have separate gate and up");
    check_matrix(e.gate, c, lossy, width, input, w + " gate");
    check_matrix(e.up, c, lossy, width, input, w + " up");
    check_matrix(e.down, c, lossy, input, width, w + " down");
    check_matrix(e.gate_up, c, lossy, checked_mul(2, static_cast<uint64_t>(width), w), input, w + " gate_up");
  }
}

Manifest Manifest::load(const fs::path& dir) {
  const fs::path p = dir / "manifest.json";
  std::ifstream in(p);
  if (!in) throw Error(p.string() + ": cannot open");
  const std::string text = read_text_file(p);
  check_json_depth(text, p.string());
  nlohmann::json j = parse_json_or_discarded(text);
  if (j.is_discarded()) throw Error(p.string() + ": not valid JSON (damaged pack? re-run strata pack)");
  try {
    return from_json(j, p.string());
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type (the fuzzer found string fields)
    throw Error(p.string() + ": a field has the wrong type (" + e.what() + "); damaged pack? re-run strata pack");
  }
}

void Manifest::save(const fs::path& path) const { write_file_atomically(path, to_json().dump() + "\n"); }

void check_drive_file(const Manifest& m, const fs::path& dir, uint32_t d) {
  const fs::path f = m.drive_file(dir, d);
  const std::string drive = "pack drive " + std::to_string(d) + " (" + m.drives[d].path + ")";
  std::error_code ec;
  const fs::file_status st = fs::status(f, ec);
  if (!fs::exists(st)) throw Error(drive + " is not available: " + f.string() + ": " + (ec ? ec.message() : "no such file"));
  if (!fs::is_regular_file(st))
    throw Error(drive + " is not available: " + f.string() + ": " +
                (fs::is_directory(st) ? "is a directory" : "not a regular file"));
  // A file cut short fails here, not at the first read past its end.
  const uint64_t size = fs::file_size(f, ec);
  if (!ec && size < m.drives[d].bytes)
    throw Error(f.string() + ": " + std::to_string(size) + " bytes, but the pack wrote " +
                std::to_string(m.drives[d].bytes) + " (a damaged or truncated pack; run strata pack again)");
}

ExpertCatalog catalog_from_manifest(const Manifest& m, const fs::path& dir, Storage& storage) {
  ExpertCatalog cat;
  std::vector<FileId> files;
  for (uint32_t d = 0; d < m.drives.size(); ++d) {
    check_drive_file(m, dir, d);  // as budget says it
    try {
      files.push_back(storage.open(m.drive_file(dir, d)));
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
