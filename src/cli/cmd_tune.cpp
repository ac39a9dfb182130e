// strata tune: runtime/tune.h's measurements, saved as this machine's
// profile (runtime/tune_profile.h), which later runs apply.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "runtime/tune.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct TuneArgs {
  std::string model;
  std::vector<std::string> drives;
  std::optional<double> ram_gib;
  double seconds = 1.0;
  uint64_t test_file_mib = 1024;
  std::string out;
  bool json = false;
};

int run_tune_command(const TuneArgs& a) {
  if (!std::isfinite(a.seconds) || a.seconds <= 0 || a.seconds > 600)
    throw Error("--seconds must be above 0 and at most 600");
  if (a.test_file_mib < 16 || a.test_file_mib > (1 << 20)) throw Error("--test-file-mib must be between 16 and 1048576");
  TuneOptions o;
  o.seconds = a.seconds;
  o.test_file_bytes = a.test_file_mib << 20;
  o.model = a.model;
  if (a.ram_gib) o.load.ram_bytes = ram_gib_bytes(*a.ram_gib);
  for (const std::string& d : a.drives) {
    if (d.empty()) throw Error("--drive: give a folder on a drive");
    o.drives.push_back(fs::absolute(d));
  }
  o.progress = [](const std::string& line) { std::fprintf(stderr, "tune: %s\n", line.c_str()); };
  // Where it goes is made sure of before minutes of measuring.
  const fs::path path = a.out.empty() ? default_profile_path() : fs::path(a.out);
  std::error_code ec;
  if (path.has_parent_path() && !fs::create_directories(path.parent_path(), ec) && ec)
    throw Error(path.parent_path().string() + ": cannot create the profile's folder: " + ec.message());
  if (fs::is_directory(path)) throw Error("--out " + path.string() + ": a folder, not a file");
  const TuneProfile p = run_tune(o);
  save_profile(p, path);
  if (a.json) {
    std::cout << read_text_file(path);
    return 0;
  }
  std::printf("%s\nsaved to %s (later runs use it where no flag is given; --profile none ignores it)\n",
              describe_profile(p).c_str(), path.c_str());
  return 0;
}

}  // namespace

void register_tune(CLI::App& app, Action& run) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Measure threads, reads in flight, piece size, prefetch and prefill rows on this machine; save them "
              "as its profile");
  cmd->add_option("MODEL,--model", a->model, "A model to tune prefetch and prefill rows with, streamed (optional)");
  cmd->add_option("--drive", a->drives,
                  "A folder on each drive experts are read from (a test file is written there), or a large file "
                  "(repeatable; without one, drives are not tuned)");
  cmd->add_option("--ram", a->ram_gib, "RAM budget in GiB the model's runs stream within (default: a quarter of its "
                                       "experts cached)");
  cmd->add_option("--seconds", a->seconds, "Seconds per measured point")->capture_default_str();
  cmd->add_option("--test-file-mib", a->test_file_mib, "Size of a drive folder's test file")->capture_default_str();
  cmd->add_option("--out", a->out, "Where to save the profile (default: this machine's, in strata's cache dir)");
  cmd->add_flag("--json", a->json, "Print the saved profile");
  cmd->callback([&run, a] { run = [a] { return run_tune_command(*a); }; });
}

}  // namespace strata::cli
