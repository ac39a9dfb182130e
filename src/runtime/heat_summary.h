#pragma once
// What `strata heat` reports: per MoE layer, how routing spreads over the
// experts, from router traces (runtime/route_trace.h, JSON lines) and heat
// files (model/expert_heat.h, {"version": 1, "layers": [[count, ...], ...]}),
// summed. Per layer:
//   selections     expert choices counted (tokens × k)
//   distinct       experts chosen at least once
//   concentration  1 - H / log(E): 0 when every one of the layer's E experts
//                  is chosen equally often, 1 when one takes every choice
//                  (H: entropy of the choice frequencies, natural log)
//   cover50/90/99  fewest experts whose choices make up 50 / 90 / 99% of the
//                  layer's: what a cache must hold to serve that share
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace strata {

struct LayerHeatSummary {
  int64_t layer = 0;
  double selections = 0;
  int64_t distinct = 0;
  double concentration = 0;
  int64_t cover50 = 0, cover90 = 0, cover99 = 0;
};

struct HeatSummary {
  int64_t experts = 0;  // per layer: the heat files' width or the traces' n_experts (the largest id + 1 without)
  uint64_t tokens = 0;  // trace lines read
  std::vector<LayerHeatSummary> layers;  // MoE layers only (some choice counted)
};

// Reads and sums `files` (each a trace or a heat file: a file that is one
// JSON object with a "layers" key is heat, anything else JSON lines). Throws
// strata::Error naming the file (and line) for anything else, an expert id
// below 0 or above 2^20, or heat files of different shapes.
HeatSummary summarise_heat(const std::vector<std::filesystem::path>& files);

// The (layer, expert) pairs the files count, summed, hottest first (ties by
// layer, then expert); same errors as summarise_heat.
struct RankedExpert {
  int64_t layer = 0, expert = 0;
  double count = 0;
};
std::vector<RankedExpert> hottest_experts(const std::vector<std::filesystem::path>& files);

std::string heat_table(const HeatSummary& s);
// A line chart (SVG 1.1): per layer, distinct experts and cover50/90/99.
std::string heat_svg(const HeatSummary& s);

}  // namespace strata
