#pragma once
// Each subcommand lives in its own cmd_*.cpp and registers itself on the app.
// A registered command stores its action in `run`; main() calls it after parsing.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "util/thread_pool.h"  // kMaxThreads, the --threads flags' limit

namespace strata::cli {

using Action = std::function<int()>;

// --threads, within what a pool takes (0: all cores).
inline CLI::Option* add_threads_option(CLI::App* cmd, int& threads,
                                       const std::string& help = "Worker threads (default: all cores)") {
  return cmd->add_option("--threads", threads, help)->check(CLI::Range(0, kMaxThreads));
}

// A number in [lo, hi]; unlike CLI::Range, NaN is refused too (it compares
// false with both ends, and a cast of it to an integer is undefined).
inline CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) return "not a number: " + text;
        } catch (const std::exception&) {
          return "not a number: " + text;
        }
        if (!(v >= lo && v <= hi)) return "Value " + text + " not in range " + CLI::detail::to_string(lo) + " to " + CLI::detail::to_string(hi);
        return {};
      },
      "NUMBER in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

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
