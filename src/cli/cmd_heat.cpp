// strata heat: how routing spreads over the experts, per MoE layer, from
// router traces (`generate/serve --trace`) and heat files
// (runtime/heat_summary.h): a table, and optionally an SVG chart.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "runtime/heat_summary.h"
#include "util/error.h"

namespace strata::cli {

void register_heat(CLI::App& app, Action& run) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto svg = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("heat", "Summarise router traces and expert heat files per MoE layer");
  cmd->add_option("files", *files, "Router traces (--trace) and heat files, summed")->required();
  cmd->add_option("--svg", *svg, "Also write a chart of distinct experts and 50/90/99% coverage per layer");
  cmd->callback([&run, files, svg] {
    run = [files, svg] {
      const HeatSummary s = summarise_heat(std::vector<std::filesystem::path>(files->begin(), files->end()));
      const std::string table = heat_table(s);
      std::fwrite(table.data(), 1, table.size(), stdout);
      if (!svg->empty()) {
        std::ofstream out(*svg, std::ios::trunc);
        out << heat_svg(s);
        if (!out) throw Error(*svg + ": cannot write the chart");
      }
      return 0;
    };
  });
}

}  // namespace strata::cli
