#pragma once
// Helpers for the pack tests: packing a fixture, editing a manifest,
// flipping a byte, reading a whole pack to compare it file by file, and
// small synthesized sources.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_support.h"
#include "pack/packer.h"
#include "safetensors_writer.h"
#include "synth/synth.h"

namespace strata::packtest {

namespace fs = std::filesystem;

inline PackOptions pack_of(const fs::path& source, const fs::path& out) {
  PackOptions p;
  p.source = source;
  p.out = out;
  return p;
}

inline nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(clitest::read_all(p)); }

inline void write_json(const fs::path& p, const nlohmann::json& j) { testfiles::write_file(p, j.dump()); }

// Changes manifest.json through `edit`.
inline void edit_manifest(const fs::path& pack, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = read_json(pack / "manifest.json");
  edit(j);
  write_json(pack / "manifest.json", j);
}

inline void flip_byte(const fs::path& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << file;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  ASSERT_TRUE(f) << file << " offset " << offset;
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Every file under `dir`, by its path relative to `dir`, with its bytes.
inline std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = clitest::read_all(e.path());
  return out;
}

// The file names and, for those that differ, which: empty when the two
// directories hold the same files byte for byte.
inline std::string difference(const fs::path& a, const fs::path& b) {
  const auto fa = files_of(a), fb = files_of(b);
  std::string d;
  for (const auto& [name, bytes] : fa) {
    const auto it = fb.find(name);
    if (it == fb.end()) d += "only in " + a.string() + ": " + name + "\n";
    else if (it->second != bytes) d += "differs: " + name + "\n";
  }
  for (const auto& [name, bytes] : fb)
    if (!fa.count(name)) d += "only in " + b.string() + ": " + name + "\n";
  return d;
}

// A small random-weight checkpoint (strata synth) with a synthetic tokenizer.
inline fs::path synth_model(const fs::path& out, uint64_t seed, synth::Format format = synth::Format::Safetensors,
                            double size_gb = 0.02) {
  synth::Request r;
  r.preset = "qwen3-30b-a3b";
  r.format = format;
  r.size_gb = size_gb;
  r.seed = seed;
  r.layers = 4;
  synth::WriteOptions wo;
  wo.threads = 2;
  synth::write(synth::make_plan(r), out, wo);
  return out;
}

}  // namespace strata::packtest
