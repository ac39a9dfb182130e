// strata checksums: a model folder's block sums (every file at its top),
// for publishing beside them (remote/block_sums.h): installs of it then
// check every byte they fetch.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "formats/safetensors.h"
#include "remote/block_sums.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct ChecksumsArgs {
  std::string dir;
  uint64_t block_kib = kDefaultSumBlockBytes >> 10;
  bool quiet = false;
};

int run_checksums(const ChecksumsArgs& a) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(a.dir, ec)) {
    const std::string name = e.path().filename().string();
    // Every file a pull may fetch: not hidden ones, nor a sums file.
    if (e.is_regular_file() && !name.starts_with(".") && name != kBlockSumsFile) names.push_back(name);
  }
  if (ec) throw Error(a.dir + ": cannot list: " + ec.message());
  if (std::none_of(names.begin(), names.end(),
                   [](const std::string& n) { return n.ends_with(".safetensors") || n.ends_with(".gguf"); }))
    throw Error(a.dir + ": no .safetensors or .gguf files to sum");
  std::sort(names.begin(), names.end());
  // A safetensors file's blocks end where its header and each tensor end,
  // so that fetching one tensor fetches little of another (block_sums.h).
  std::map<std::string, std::vector<uint64_t>> cuts;
  for (const std::string& name : names) {
    if (!name.ends_with(".safetensors")) continue;
    const SafetensorsFile st(fs::path(a.dir) / name);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const TensorView& t : st.tensors())
      if (t.nbytes > 0) ranges.emplace_back(t.offset, t.offset + t.nbytes);
    std::sort(ranges.begin(), ranges.end());
    const uint64_t size = fs::file_size(fs::path(a.dir) / name);
    ranges.insert(ranges.begin(), {0, ranges.empty() ? size : ranges.front().first});  // the header
    cuts[name] = cut_blocks(size, ranges, a.block_kib << 10);
  }
  const BlockSums sums = compute_block_sums(a.dir, names, a.block_kib << 10, cuts);
  write_block_sums(fs::path(a.dir) / kBlockSumsFile, sums);
  if (!a.quiet) {
    uint64_t bytes = 0, blocks = 0;
    for (const auto& [name, f] : sums.files) {
      bytes += f.size;
      blocks += f.xxh3.size();
    }
    std::fprintf(stderr, "wrote %s/%s: %zu files, %.2f GB in %llu blocks of at most %llu KiB\n", a.dir.c_str(), kBlockSumsFile,
                 names.size(), bytes / 1e9, static_cast<unsigned long long>(blocks),
                 static_cast<unsigned long long>(a.block_kib));
  }
  return 0;
}

}  // namespace

void register_checksums(CLI::App& app, Action& run) {
  auto a = std::make_shared<ChecksumsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "checksums", "Write DIR/strata-blocks.json, the xxh3 of every block of its files, to publish beside them "
                   "(installs then check every byte they fetch)");
  cmd->add_option("dir", a->dir, "A model folder (safetensors or GGUF)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--block-kib", a->block_kib,
                  "Largest block in KiB (a power of two, 4 to 65536); safetensors files are also cut at every "
                  "tensor's ends, so a fetch reads little beyond what it needs")
      ->check(CLI::IsMember({4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", a->quiet, "Print nothing");
  cmd->callback([&run, a] { run = [a] { return run_checksums(*a); }; });
}

}  // namespace strata::cli
