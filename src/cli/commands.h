#pragma once
// Each subcommand lives in its own cmd_*.cpp and registers itself on the app.
// A registered command stores its action in `run`; main() calls it after parsing.
#include <CLI/CLI.hpp>
#include <functional>

#include "util/thread_pool.h"  // kMaxThreads, the --threads flags' limit

namespace strata::cli {

using Action = std::function<int()>;

void register_generate(CLI::App& app, Action& run);
void register_tokenize(CLI::App& app, Action& run);
void register_compare(CLI::App& app, Action& run);
void register_synth(CLI::App& app, Action& run);
void register_probe(CLI::App& app, Action& run);
void register_pack(CLI::App& app, Action& run);
void register_pull(CLI::App& app, Action& run);
void register_upgrade(CLI::App& app, Action& run);
void register_warm(CLI::App& app, Action& run);
void register_demo(CLI::App& app, Action& run);
void register_serve(CLI::App& app, Action& run);
void register_heat(CLI::App& app, Action& run);
void register_checksums(CLI::App& app, Action& run);
void register_devices(CLI::App& app, Action& run);
void register_budget(CLI::App& app, Action& run);
void register_doctor(CLI::App& app, Action& run);
void register_tune(CLI::App& app, Action& run);
void register_bench(CLI::App& app, Action& run);

}  // namespace strata::cli
