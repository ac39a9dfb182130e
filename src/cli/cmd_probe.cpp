// strata probe: the read ceiling of each drive and of all of them together
// (O_DIRECT, expert-sized random reads, several queue depths), saved for
// `pack` and `demo`.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "storage/probe.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct ProbeArgs {
  std::vector<std::string> paths;
  double size_gb = 2.0;   // GiB
  double block_mb = 0;    // MiB; 0 = 16 and 4
  std::string depths = "1,4,8,16,32";
  double seconds = 2.0;
  unsigned rounds = 3;
  std::string out;
  bool json = false;
};

std::vector<unsigned> parse_depths(const std::string& s) {
  std::vector<unsigned> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 1024)
      throw Error("--depths " + s + ": expected comma-separated queue depths between 1 and 1024");
    out.push_back(static_cast<unsigned>(v));
  }
  if (out.empty()) throw Error("--depths: give at least one queue depth");
  return out;
}

int run_probe_cmd(const ProbeArgs& a) {
  ProbeOptions o;
  o.paths = a.paths;
  if (!(a.size_gb > 0) || a.size_gb > (1 << 20)) throw Error("--size must be a number of GiB above 0");
  o.file_bytes = static_cast<uint64_t>(a.size_gb * (1ull << 30));
  if (!(a.block_mb >= 0) || a.block_mb > 1024) throw Error("--block must be a number of MiB up to 1024");
  if (a.block_mb > 0) {
    const uint64_t b = static_cast<uint64_t>(std::llround(a.block_mb * (1ull << 20)));
    if (b == 0 || b % 4096 != 0) throw Error("--block must be a multiple of 4 KiB");
    o.blocks = {b};
  }
  o.depths = parse_depths(a.depths);
  // The reads in flight need block × depth bytes of buffers at once.
  const uint64_t widest = o.blocks.empty() ? (16ull << 20) : o.blocks.front();
  for (const auto d : o.depths)
    if (widest * static_cast<uint64_t>(d) > (4ull << 30))
      throw Error("--block × --depths: " + std::to_string(d) + " reads of " + std::to_string(widest >> 20) +
                  " MiB in flight need more than 4 GiB of buffers");
  if (!(a.seconds > 0) || a.seconds > 3600) throw Error("--seconds must be above 0 and at most 3600");
  o.seconds = a.seconds;
  o.rounds = a.rounds;
  o.progress = [](const std::string& line) { std::fprintf(stderr, "probe: %s\n", line.c_str()); };
  const std::filesystem::path out = a.out.empty() ? default_probe_path() : std::filesystem::path(a.out);
  if (std::filesystem::is_directory(out)) throw Error("--out " + out.string() + ": a folder, not a file");
  ProbeResult r = run_probe(o);
  save_probe(r, out);
  if (a.json) {
    std::cout << probe_to_json(r);
  } else {
    std::cout << format_probe_table(r);
    std::cout << "saved " << out.string() << "\n";
  }
  return 0;
}

}  // namespace

void register_probe(CLI::App& app, Action& run) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* cmd = app.add_subcommand("probe", "Measure each drive's O_DIRECT read speed for expert-sized reads");
  cmd->add_option("PATH", args->paths, "A directory on each drive (a test file is written and removed) or a large file")
      ->required();
  cmd->add_option("--size", args->size_gb, "Test file size in GiB")->capture_default_str();
  cmd->add_option("--block", args->block_mb, "Read size in MiB (default: 16 and 4)");
  cmd->add_option("--depths", args->depths, "Queue depths to try, comma-separated")->capture_default_str();
  cmd->add_option("--seconds", args->seconds, "Seconds per (read size, depth) point, split over the rounds")
      ->capture_default_str();
  cmd->add_option("--rounds", args->rounds,
                  "Measure every point this many times, round after round; a point's rate is the median")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Where to save the JSON (default $STRATA_HOME/probe.json or ~/.cache/strata/probe.json)");
  cmd->add_flag("--json", args->json, "Print the JSON instead of a table");
  cmd->callback([&run, args] { run = [args] { return run_probe_cmd(*args); }; });
}

}  // namespace strata::cli
