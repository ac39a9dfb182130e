// strata doctor: runtime/doctor.h's checks of this machine, one line each;
// exits 1 when one fails.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "runtime/budget_model.h"
#include "runtime/doctor.h"
#include "runtime/loader.h"
#include "storage/storage.h"
#include "util/cache_dir.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct DoctorArgs {
  std::string model;
  std::vector<std::string> drives;
  std::optional<double> ram_gib;
  unsigned io_depth = StorageOptions{}.queue_depth;
  bool json = false;
};

int run_doctor(const DoctorArgs& a) {
  if (a.io_depth < 1 || a.io_depth > 1024) throw Error("--io-depth must be between 1 and 1024");
  DoctorOptions o;
  o.io_depth = a.io_depth;
  o.cache_dir = strata_cache_dir();
  if (a.ram_gib) o.ram_bytes = ram_gib_bytes(*a.ram_gib);
  for (const std::string& d : a.drives) {
    if (d.empty()) throw Error("--drive: give a folder on a drive");
    o.drives.push_back(fs::absolute(d));
  }
  if (!a.model.empty()) {
    const BudgetModel model = read_budget_model(a.model, {});
    const uint64_t ram = budget_ram_bytes(o.ram_bytes);
    const uint64_t experts = model.shape.total_bytes - model.shape.trunk_bytes - model.token_table_bytes;
    // The cache a run would have: its threads and step as this machine's
    // tuned profile sets them, where there is one (a profile a run refuses,
    // generate says so; here the defaults stand).
    LoadOptions run;
    try {
      if (const std::optional<TunedProfile> t = tuned_profile("")) apply_profile(t->profile, t->path, run);
    } catch (const Error&) {
    }
    const uint64_t cache = expert_cache_bytes(model, ram, process_resident_bytes(), run.threads, run.max_batch_cap);
    // Without --ram a model whose experts all fit runs in RAM: nothing is
    // registered. Otherwise its expert cache is.
    o.registered_bytes = !o.ram_bytes && cache >= experts ? 0 : cache;
    // Packing onto the given drives (a checkpoint streams in place without).
    if (model.kind != "pack" && !a.drives.empty()) o.pack_bytes = experts;
    if (o.drives.empty()) {  // its expert files, one per folder, read only
      std::set<fs::path> seen;
      for (const fs::path& f : model.expert_files)
        if (seen.insert(f.parent_path()).second) o.drives.push_back(f);
    }
  } else if (o.ram_bytes) {
    // Without a model the expert cache may take the whole budget.
    o.registered_bytes = *o.ram_bytes;
  }
  if (o.drives.empty()) o.drives.push_back(fs::current_path());

  const std::vector<DoctorLine> lines = diagnose(gather_machine_facts(o), o);
  bool failed = false;
  nlohmann::json j = nlohmann::json::array();
  for (const DoctorLine& l : lines) {
    failed |= l.verdict == DoctorVerdict::Fail;
    if (a.json)
      j.push_back({{"check", l.check},
                   {"verdict", l.verdict == DoctorVerdict::Ok ? "ok" : l.verdict == DoctorVerdict::Fail ? "fail" : "skip"},
                   {"finding", l.finding},
                   {"fix", l.fix}});
    else
      std::printf("%s\n", format_doctor_line(l).c_str());
  }
  if (a.json) std::cout << j.dump(2) << "\n";
  return failed ? 1 : 0;
}

}  // namespace

void register_doctor(CLI::App& app, Action& run) {
  auto a = std::make_shared<DoctorArgs>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Check what decides strata's speed and correctness on this machine (one line each, with a fix)");
  cmd->add_option("MODEL,--model", a->model,
                  "A checkpoint, GGUF file or pack: its drives and its expert cache are checked (optional)");
  cmd->add_option("--drive", a->drives,
                  "A folder on each drive experts are read from, where a block is written and read (repeatable; "
                  "default: the model's expert files, read only, or the current folder)");
  cmd->add_option("--ram", a->ram_gib, "The RAM budget in GiB runs will be given (default: what generate derives)");
  cmd->add_option("--io-depth", a->io_depth, "Reads in flight per drive the runs will use")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the checks as JSON");
  cmd->callback([&run, a] { run = [a] { return run_doctor(*a); }; });
}

}  // namespace strata::cli
