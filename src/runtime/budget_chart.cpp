#include "runtime/budget_chart.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "template/text.h"

namespace strata {

namespace {

std::string num(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f", v);
  return s;
}

}  // namespace

std::string budget_chart_svg(const BudgetShape& shape, const BudgetMachine& machine, const std::string& title,
                             int points) {
  const BudgetPrediction least = predict_budget(shape, machine, 1);
  const double lo = static_cast<double>(least.least_ram_bytes);
  const double hi = static_cast<double>(least.resident_bytes) +
                    static_cast<double>(shape.expert_bytes) * static_cast<double>(shape.moe_layers * shape.experts);
  const size_t drives = machine.drive_gbps.size();
  points = std::max(points, 2);
  // Each drive count's tok/s at each budget.
  std::vector<double> ram(static_cast<size_t>(points));
  std::vector<std::vector<double>> rate(drives, std::vector<double>(ram.size()));
  double top = 0;
  for (size_t i = 0; i < ram.size(); ++i) {
    ram[i] = lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(ram.size() - 1);
    BudgetMachine m = machine;
    m.ram_bytes = static_cast<uint64_t>(ram[i]);
    const BudgetPrediction p = predict_budget(shape, m, 1);
    for (size_t d = 0; d < drives; ++d) {
      rate[d][i] = p.by_drives[d].decode_tok_s;
      top = std::max(top, rate[d][i]);
    }
  }
  if (!(top > 0)) top = 1;
  const double w = 640, h = 400, left = 64, right = 16, upper = 40, lower = 48;
  auto x = [&](double r) { return left + (r - lo) / std::max(hi - lo, 1.0) * (w - left - right); };
  auto y = [&](double t) { return h - lower - t / top * (h - upper - lower); };
  static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(w) + "\" height=\"" + num(h) + "\" viewBox=\"0 0 " +
       num(w) + " " + num(h) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + tmpl::text::html_escape(title) + "</title>\n";
  s += "<text x=\"" + num(left) + "\" y=\"20\" font-size=\"14\">" + tmpl::text::html_escape(title) + "</text>\n";
  // Axes, with the ends labelled.
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(h - lower) + "\" x2=\"" + num(w - right) + "\" y2=\"" +
       num(h - lower) + "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(upper) + "\" x2=\"" + num(left) + "\" y2=\"" + num(h - lower) +
       "\" stroke=\"black\"/>\n";
  char label[96];
  std::snprintf(label, sizeof label, "%.1f GB", lo / 1e9);
  s += "<text x=\"" + num(left) + "\" y=\"" + num(h - lower + 16) + "\">" + label + "</text>\n";
  std::snprintf(label, sizeof label, "%.1f GB", hi / 1e9);
  s += "<text x=\"" + num(w - right) + "\" y=\"" + num(h - lower + 16) + "\" text-anchor=\"end\">" + label + "</text>\n";
  s += "<text x=\"" + num((left + w - right) / 2) + "\" y=\"" + num(h - 8) +
       "\" text-anchor=\"middle\">RAM budget (every expert fits at the right end)</text>\n";
  std::snprintf(label, sizeof label, "%.2f", top);
  s += "<text x=\"" + num(left - 4) + "\" y=\"" + num(upper + 4) + "\" text-anchor=\"end\">" + label + "</text>\n";
  s += "<text x=\"" + num(left - 4) + "\" y=\"" + num(h - lower) + "\" text-anchor=\"end\">0</text>\n";
  s += "<text x=\"14\" y=\"" + num((upper + h - lower) / 2) + "\" transform=\"rotate(-90 14 " +
       num((upper + h - lower) / 2) + ")\" text-anchor=\"middle\">decode tok/s</text>\n";
  for (size_t d = 0; d < drives; ++d) {
    const char* color = colors[d % (sizeof colors / sizeof colors[0])];
    s += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < ram.size(); ++i) s += (i ? " " : "") + num(x(ram[i])) + "," + num(y(rate[d][i]));
    s += "\"/>\n";
    std::snprintf(label, sizeof label, "%zu drive%s", d + 1, d ? "s" : "");
    s += "<text x=\"" + num(w - right - 80) + "\" y=\"" + num(upper + 14 * static_cast<double>(d + 1)) + "\" fill=\"" +
         color + "\">" + label + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace strata
