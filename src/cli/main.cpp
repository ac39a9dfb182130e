// strata: the command-line front end. Every failure the user can cause ends
// as one line on stderr ("strata: error: ...") and a non-zero exit.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "util/error.h"

namespace {

std::string filesystem_message(const std::filesystem::filesystem_error& e) {
  std::string m;
  for (const auto* p : {&e.path1(), &e.path2()})
    if (!p->empty()) m += (m.empty() ? "" : ", ") + p->string();
  return (m.empty() ? "" : m + ": ") + e.code().message();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata: run Mixture-of-Experts models larger than memory"};
  app.require_subcommand(1);
  strata::cli::Action run;
  strata::cli::register_generate(app, run);
  strata::cli::register_tokenize(app, run);
  strata::cli::register_compare(app, run);
  strata::cli::register_synth(app, run);
  strata::cli::register_probe(app, run);
  strata::cli::register_pack(app, run);
  strata::cli::register_pull(app, run);
  strata::cli::register_upgrade(app, run);
  strata::cli::register_warm(app, run);
  strata::cli::register_demo(app, run);
  strata::cli::register_serve(app, run);
  strata::cli::register_heat(app, run);
  strata::cli::register_checksums(app, run);
  strata::cli::register_devices(app, run);
  strata::cli::register_budget(app, run);
  strata::cli::register_doctor(app, run);
  strata::cli::register_tune(app, run);
  strata::cli::register_bench(app, run);
  // A flag the parser refuses is one line too, as every other error.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "strata: error: " + std::string(e.what()) + " (--help lists the flags)\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help is not a failure
  }
  try {
    return run ? run() : 0;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "strata: error: out of memory\n");
  } catch (const std::filesystem::filesystem_error& e) {
    // The path and the system's reason, without the library's "filesystem
    // error: status:" (which names its own function, not the user's file).
    std::fprintf(stderr, "strata: error: %s\n", filesystem_message(e).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
  }
  return 1;
}
