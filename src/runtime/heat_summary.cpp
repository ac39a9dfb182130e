#include "runtime/heat_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <unordered_map>

#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace {

constexpr int64_t kMaxExpertId = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;

// [layer] -> expert -> count; sparse, so that memory follows what the files
// hold, not the ids they name.
using Counts = std::vector<std::unordered_map<int64_t, double>>;

void add(Counts& c, int64_t layer, int64_t expert, double n, const std::string& where) {
  if (layer < 0 || layer >= kMaxLayers) throw Error(where + ": layer " + std::to_string(layer) + " is out of range");
  if (expert < 0 || expert >= kMaxExpertId)
    throw Error(where + ": expert id " + std::to_string(expert) + " is out of range");
  if (c.size() <= static_cast<size_t>(layer)) c.resize(static_cast<size_t>(layer) + 1);
  if (n > 0) c[static_cast<size_t>(layer)][expert] += n;
}

void read_heat_file(const nlohmann::json& j, const std::string& name, Counts& c, int64_t& width) {
  const auto& layers = j.at("layers");
  if (!layers.is_array()) throw Error(name + ": \"layers\" is not an array");
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!layers[l].is_array()) throw Error(name + ": layer " + std::to_string(l) + " is not an array");
    if (layers[l].empty()) continue;
    const int64_t w = static_cast<int64_t>(layers[l].size());
    if (width != 0 && w != width) throw Error(name + ": heat files of different widths (" + std::to_string(w) + " vs " + std::to_string(width) + " experts)");
    width = w;
    for (size_t e = 0; e < layers[l].size(); ++e) {
      const auto& v = layers[l][e];
      if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
        throw Error(name + ": layer " + std::to_string(l) + " expert " + std::to_string(e) + ": not a count");
      add(c, static_cast<int64_t>(l), static_cast<int64_t>(e), v.get<double>(), name);
    }
  }
}

void read_trace(const std::string& text, const std::string& name, Counts& c, uint64_t& tokens, int64_t& width) {
  std::istringstream in(text);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = name + ":" + std::to_string(n);
    const nlohmann::json j = parse_json(line, where);
    if (!j.is_object() || !j.contains("experts") || !j["experts"].is_array())
      throw Error(where + ": not a router trace line (no \"experts\" array)");
    int64_t n_experts = kMaxExpertId;
    if (j.contains("n_experts")) {
      if (!j["n_experts"].is_number_integer() || j["n_experts"].get<int64_t>() < 1 || j["n_experts"].get<int64_t>() > kMaxExpertId)
        throw Error(where + ": \"n_experts\" is not a count of experts");
      n_experts = j["n_experts"].get<int64_t>();
      width = std::max(width, n_experts);
    }
    const auto& layers = j["experts"];
    for (size_t l = 0; l < layers.size(); ++l) {
      if (!layers[l].is_array()) throw Error(where + ": layer " + std::to_string(l) + " is not an array");
      for (const auto& e : layers[l]) {
        if (!e.is_number_integer()) throw Error(where + ": an expert id is not an integer");
        if (e.get<int64_t>() >= n_experts)
          throw Error(where + ": expert id " + std::to_string(e.get<int64_t>()) + " is not below n_experts");
        add(c, static_cast<int64_t>(l), e.get<int64_t>(), 1.0, where);
      }
    }
    ++tokens;
  }
}

// `counts`: the layer's non-zero counts; `experts`: how many it has in all.
LayerHeatSummary summarise_layer(int64_t layer, std::vector<double> counts, int64_t experts) {
  LayerHeatSummary s;
  s.layer = layer;
  for (double x : counts) {
    s.selections += x;
    s.distinct += x > 0;
  }
  double h = 0;
  for (double x : counts)
    if (x > 0) h -= x / s.selections * std::log(x / s.selections);
  s.concentration = experts > 1 ? 1.0 - h / std::log(static_cast<double>(experts)) : 1.0;
  std::sort(counts.begin(), counts.end(), std::greater<>());
  double run = 0;
  int64_t n = 0;
  for (double x : counts) {
    if (x <= 0) break;
    run += x;
    ++n;
    if (s.cover50 == 0 && run >= 0.50 * s.selections) s.cover50 = n;
    if (s.cover90 == 0 && run >= 0.90 * s.selections) s.cover90 = n;
    if (s.cover99 == 0 && run >= 0.99 * s.selections) s.cover99 = n;
  }
  return s;
}

}  // namespace

namespace {
// Every file summed; `experts`: the widest shape seen.
Counts read_counts(const std::vector<std::filesystem::path>& files, uint64_t& tokens, int64_t& experts) {
  if (files.empty()) throw Error("no trace or heat file given");
  Counts counts;
  int64_t width = 0, traced_width = 0;
  for (const auto& f : files) {
    const std::string text = read_text_file(f);
    // One JSON object with "layers" is a heat file; anything else is read
    // as trace lines (several values do not parse as one).
    const nlohmann::json j = parse_json_or_discarded(text);
    const bool heat = j.is_object() && j.contains("layers");
    if (heat) read_heat_file(j, f.string(), counts, width);
    if (!heat) read_trace(text, f.string(), counts, tokens, traced_width);
  }
  int64_t widest = 0;
  for (const auto& row : counts)
    for (const auto& [e, n] : row) widest = std::max(widest, e + 1);
  experts = std::max({width, traced_width, widest});
  return counts;
}
}  // namespace

std::vector<RankedExpert> hottest_experts(const std::vector<std::filesystem::path>& files) {
  uint64_t tokens = 0;
  int64_t experts = 0;
  const Counts counts = read_counts(files, tokens, experts);
  std::vector<RankedExpert> out;
  for (size_t l = 0; l < counts.size(); ++l)
    for (const auto& [e, n] : counts[l]) out.push_back({static_cast<int64_t>(l), e, n});
  std::sort(out.begin(), out.end(), [](const RankedExpert& a, const RankedExpert& b) {
    if (a.count != b.count) return a.count > b.count;
    return a.layer != b.layer ? a.layer < b.layer : a.expert < b.expert;
  });
  return out;
}

HeatSummary summarise_heat(const std::vector<std::filesystem::path>& files) {
  HeatSummary out;
  const Counts counts = read_counts(files, out.tokens, out.experts);
  for (size_t l = 0; l < counts.size(); ++l) {
    if (counts[l].empty()) continue;  // a dense layer
    std::vector<double> row;
    double total = 0;
    for (const auto& [e, n] : counts[l]) {
      row.push_back(n);
      total += n;
    }
    std::sort(row.begin(), row.end(), std::greater<>());  // a fixed order to sum in
    if (!std::isfinite(total)) throw Error("layer " + std::to_string(l) + ": the counts add up past what a double holds");
    out.layers.push_back(summarise_layer(static_cast<int64_t>(l), std::move(row), out.experts));
  }
  if (out.layers.empty()) throw Error("the files hold no expert choices");
  return out;
}

std::string heat_table(const HeatSummary& s) {
  std::string out = std::to_string(s.layers.size()) + " MoE layers, " + std::to_string(s.experts) + " experts each" +
                    (s.tokens ? ", " + std::to_string(s.tokens) + " traced tokens" : std::string()) + "\n";
  char line[160];
  std::snprintf(line, sizeof line, "%5s %12s %8s %13s %7s %7s %7s\n", "layer", "selections", "distinct",
                "concentration", "50%", "90%", "99%");
  out += line;
  for (const auto& l : s.layers) {
    std::snprintf(line, sizeof line, "%5lld %12.0f %8lld %13.3f %7lld %7lld %7lld\n", static_cast<long long>(l.layer),
                  l.selections, static_cast<long long>(l.distinct), l.concentration, static_cast<long long>(l.cover50),
                  static_cast<long long>(l.cover90), static_cast<long long>(l.cover99));
    out += line;
  }
  return out;
}

std::string heat_svg(const HeatSummary& s) {
  const double W = 720, H = 360, left = 60, right = 150, top = 30, bottom = 40;
  const double pw = W - left - right, ph = H - top - bottom;
  const int64_t first = s.layers.front().layer, last = s.layers.back().layer;
  const double ymax = static_cast<double>(std::max<int64_t>(1, s.experts));
  auto x = [&](int64_t layer) { return left + (last == first ? pw / 2 : pw * double(layer - first) / double(last - first)); };
  auto y = [&](double v) { return top + ph * (1.0 - v / ymax); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << left << "\" y=\"18\">Experts per MoE layer (of " << s.experts << ")</text>\n";
  o << "<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\"" << left + pw << "\" y2=\"" << top + ph << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + ph << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = ymax * i / 4;
    o << "<text x=\"" << left - 6 << "\" y=\"" << y(v) + 4 << "\" text-anchor=\"end\">" << static_cast<long long>(std::lround(v)) << "</text>\n";
  }
  o << "<text x=\"" << left << "\" y=\"" << H - 10 << "\">layer " << first << "</text>\n";
  o << "<text x=\"" << left + pw << "\" y=\"" << H - 10 << "\" text-anchor=\"end\">layer " << last << "</text>\n";
  struct Series { const char* name; const char* colour; int64_t LayerHeatSummary::*field; };
  const Series series[] = {{"distinct", "#444444", &LayerHeatSummary::distinct},
                           {"99% of choices", "#d62728", &LayerHeatSummary::cover99},
                           {"90% of choices", "#ff7f0e", &LayerHeatSummary::cover90},
                           {"50% of choices", "#1f77b4", &LayerHeatSummary::cover50}};
  int k = 0;
  for (const Series& sr : series) {
    o << "<polyline fill=\"none\" stroke=\"" << sr.colour << "\" stroke-width=\"1.5\" points=\"";
    for (const auto& l : s.layers) o << x(l.layer) << "," << y(static_cast<double>(l.*(sr.field))) << " ";
    o << "\"/>\n";
    const double ly = top + 16 + 18 * k++;
    o << "<line x1=\"" << left + pw + 12 << "\" y1=\"" << ly - 4 << "\" x2=\"" << left + pw + 30 << "\" y2=\"" << ly - 4
      << "\" stroke=\"" << sr.colour << "\" stroke-width=\"2\"/>\n";
    o << "<text x=\"" << left + pw + 34 << "\" y=\"" << ly << "\">" << sr.name << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace strata
