#pragma once
// The pack manifest (DIR/manifest.json): what `strata pack` wrote and where.
//
// {
//   "format": "strata-pack", "version": 1,
//   "source": "/models/Kimi-K2", "trunk": "trunk" | "trunk.gguf",
//   "trunk_checksums": "trunk.xxh3",                           // storage/pack_dir.h
//   "options": {"trunk": "keep", "experts": "keep", "trace": ""},
//   "lossy": {"experts": "int4"}, "fidelity": {...},           // lossy packs only (pack/lossy.h)
//   "config": {"arch": "deepseek_v3", "layers": 61, ...},      // summary
//   "hf_config": {...},                                         // config.json (HF sources)
//   "tensors": {"<trunk tensor>": {"dtype": "BF16", "shape": [..]}, ...},
//   "drives": [{"path": "/mnt/nvme1", "relative": "../../mnt/nvme1",
//               "file": "strata-experts-0.bin", "weight": 3.1, "bytes": 123}],
//   "layouts": [{"gate": {"dtype": "Q8_0", "out": 2048, "in": 7168,
//                          "packing": "plain", "data": 64, ...}, ...}],
//   "experts": [[], [[drive, offset, length, "xxh3 hex", layout], ...], ...]
// }
// Every blob starts on 4 KiB; `length` is the blob's bytes (the read rounds
// up to 4 KiB); the checksum covers `length` bytes.
//
// A manifest is input like any file: from_json() refuses anything pack would
// not have written (a layout whose ranges are not where pack puts them, a
// blob length that is not its layout's, an index past its list, a size that
// overflows), and check_against() refuses one that does not describe the
// model its trunk's config says (layer and expert counts, every layout's
// dimensions, biases, FP8 scale blocks, the format a lossy pack converted
// to). The loader runs both before any expert is read.
//
// Moving a pack: a drive folder inside DIR (the default: DIR itself) is
// stored relative to DIR ("." or "experts"), so the pack directory can move
// as a whole. One outside DIR is stored absolute, with "relative" (its place
// relative to DIR) tried when the absolute path no longer holds the file:
// the pack moves with its drives side by side, or without them.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/expert_provider.h"
#include "model/expert_catalog.h"
#include "pack/lossy.h"

namespace strata {

struct PackedExpert {
  uint32_t drive = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  uint32_t layout = 0;
};

struct PackDrive {
  std::string path;  // directory (relative = inside the pack)
  std::string file;  // expert file name in it
  std::string relative;  // for an absolute `path`: the same folder relative to the pack ("" = none)
  double weight = 1;  // share of reads it should get (measured GB/s)
  uint64_t bytes = 0;
};

struct Manifest {
  static constexpr int kVersion = 1;
  std::string source;
  std::string trunk;  // "trunk" (HF directory) or "trunk.gguf"
  // The trunk's checksums file (storage/pack_dir.h); "" in packs written
  // before trunks were checksummed.
  std::string trunk_checksums;
  nlohmann::json options = nlohmann::json::object();
  PackLossy lossy;                      // what was re-quantized (none: exact)
  std::optional<PackFidelity> fidelity;  // measured (or skipped) after packing
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json hf_config;  // null for GGUF sources
  nlohmann::json tensors = nlohmann::json::object();
  std::vector<PackDrive> drives;
  std::vector<ExpertWeights> layouts;              // pointers hold blob offsets
  std::vector<std::vector<PackedExpert>> experts;  // [layer][expert]

  // Index of `layout` in layouts, adding it if new.
  uint32_t add_layout(const ExpertWeights& layout);
  // Where drive `drive`'s expert file is for a pack in `dir` (see "Moving a pack").
  std::filesystem::path drive_file(const std::filesystem::path& dir, uint32_t drive) const;

  nlohmann::json to_json() const;
  // Throws strata::Error "<where>: ..." for anything malformed.
  static Manifest from_json(const nlohmann::json& j, const std::string& where);
  static Manifest load(const std::filesystem::path& dir);
  // Throws strata::Error "<where>: ..." naming the first entry that does not
  // describe a model with config `c` (see the top of this file).
  void check_against(const ModelConfig& c, const std::string& where) const;
  // The one line a lossy pack's outputs carry; "" for an exact pack.
  std::string approximation() const { return approximation_label(lossy, fidelity); }
  // Atomic: written to <path>.tmp, synced, renamed.
  void save(const std::filesystem::path& path) const;
};

// What the manifest's "config" records of a model (checked against the
// trunk's config when a pack is opened).
nlohmann::json manifest_config_summary(const ModelConfig& c);

// Drive `d`'s file as the pack wrote it: a regular file at least as long as
// the manifest says. Throws strata::Error naming it otherwise (missing, a
// folder where it should be, cut short: a damaged or truncated pack).
void check_drive_file(const Manifest& m, const std::filesystem::path& dir, uint32_t d);

// The manifest's experts as reads of its drive files (checksummed, with the
// blob header checked on arrival); each file checked by check_drive_file.
ExpertCatalog catalog_from_manifest(const Manifest& m, const std::filesystem::path& dir, Storage& storage);

}  // namespace strata
