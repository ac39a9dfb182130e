#include "runtime/bench_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/dispatch.h"
#include "runtime/budget_model.h"
#include "runtime/drive_rate_log.h"
#include "runtime/expert_stats.h"
#include "runtime/generator.h"
#include "storage/probe.h"
#include "template/text.h"
#include "util/error.h"
#include "util/machine_info.h"
#include "util/median.h"

namespace strata {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// "" when the page cache was dropped, else why not.
std::string drop_page_cache() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return std::string("not dropped: ") + std::strerror(errno) + (::geteuid() != 0 ? " (not root)" : "");
  const bool ok = ::write(fd, "3", 1) == 1;
  const int err = errno;
  ::close(fd);
  return ok ? "" : std::string("not dropped: ") + std::strerror(err);
}

// The experts' files and their size, for the probes; none for a model
// without routed experts.
struct ExpertFiles {
  std::vector<fs::path> files;
  uint64_t read_bytes = 0;  // the reads an expert is read in (expert_read_bytes)
  unsigned depth = 0;       // reads in flight, as the runs read them
};

ExpertFiles expert_files_of(const BenchOptions& o) {
  try {
    const BudgetModel m = read_budget_model(o.model, o.load);
    return {m.expert_files, expert_read_bytes(m, o.load), storage_options(o.load).queue_depth};
  } catch (const Error&) {
    return {};  // dense: nothing is streamed, nothing to probe
  }
}

double probe_drives(const ExpertFiles& e, double seconds) {
  if (e.files.empty() || seconds <= 0) return 0;
  ProbeOptions p;
  for (const fs::path& f : e.files) p.paths.push_back(f.string());
  p.blocks = {e.read_bytes};
  p.depths = {e.depth};
  p.seconds = seconds;
  p.rounds = 1;
  return run_probe(p).combined.best_gbps;
}

std::vector<int32_t> prompt_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((1000 + 37 * i) % std::max<int64_t>(vocab, 1));
  return ids;
}

BenchRun run_once(const BenchOptions& o, int config, int round, const ExpertFiles& experts) {
  BenchRun r;
  r.config = config;
  r.round = round;
  r.cache = o.drop_caches ? drop_page_cache() : "not dropped: --no-drop";
  if (r.cache.empty()) r.cache = "dropped";
  r.probe_before_gbps = probe_drives(experts, o.probe_seconds);
  LoadOptions lo = o.load;
  lo.ram_bytes = o.rams[static_cast<size_t>(config)].value_or(0);
  lo.notice = nullptr;
  lo.show_progress = false;
  const auto t0 = Clock::now();
  std::unique_ptr<Model> model = load_model(o.model, lo);
  r.load_s = since(t0);
  GenerateOptions g;
  g.max_new_tokens = o.tokens + 1;  // the first comes with the prompt
  const std::vector<int32_t> prompt = prompt_ids(o.prompt_tokens, model->config().vocab_size);
  const GenerateResult res = generate(*model, prompt, g);
  r.ttft_s = res.prefill_s;
  r.decode_tok_s = res.tokens.size() > 1 && res.decode_s > 0 ? static_cast<double>(res.tokens.size() - 1) / res.decode_s : 0;
  r.stats = {{"prompt_tokens", res.prompt_tokens}, {"output_tokens", res.tokens.size()}, {"decode_s", res.decode_s}};
  if (model->streaming()) {
    const MemoryPlan& m = model->memory_plan();
    r.stats["memory"] = {{"budget", m.budget}, {"trunk", m.trunk},     {"kv", m.kv},
                         {"step", m.step},     {"staging", m.staging}, {"expert_cache", m.cache}};
    r.stats["experts"] = {{"prefill", expert_stats_json(res.prefill_experts, res.prefill_s)},
                          {"decode", expert_stats_json(res.decode_experts, res.decode_s)}};
    // For `strata budget` (storage/drive_rates.h); a file that cannot be written is named, not fatal.
    if (const std::string why = record_drive_rates(res.prefill_experts, res.decode_experts); !why.empty())
      r.stats["drive_rates_not_recorded"] = why;
  }
  model.reset();
  r.probe_after_gbps = probe_drives(experts, o.probe_seconds);
  return r;
}

std::string ram_label(const std::optional<uint64_t>& ram) {
  if (!ram) return "default budget";
  char s[48];
  std::snprintf(s, sizeof s, "--ram %.3g", static_cast<double>(*ram) / (1ull << 30));
  return s;
}

struct Spread {
  double median = 0, least = 0, most = 0;
};

Spread spread_of(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

std::vector<double> figure_of(const BenchReport& r, int config, double BenchRun::*field) {
  std::vector<double> v;
  for (const BenchRun& run : r.runs)
    if (run.config == config) v.push_back(run.*field);
  return v;
}

}  // namespace

BenchReport run_bench(const BenchOptions& o) {
  if (o.rams.empty()) throw Error("bench: no configuration to run");
  if (o.runs < 1) throw Error("bench: --runs must be at least 1");
  if (o.prompt_tokens < 1) throw Error("bench: --prompt must be at least 1 token");
  if (o.tokens < 1) throw Error("bench: --tokens must be at least 1");
  // The model as the runs see it, opened first (nothing of it is read), so
  // that a model that cannot be opened is one error before any run; let go
  // before they start (its buffers would count against their memory).
  std::string identity, approximation;
  {
    LoadOptions lo = o.load;
    lo.notice = nullptr;
    const std::unique_ptr<Model> model = open_model(o.model, lo);
    identity = model->identity();
    approximation = model->approximation();
    // More tokens than the context holds: refused, not measured over fewer.
    // (The last token generated is never written to the cache.)
    if (o.prompt_tokens + o.tokens > model->context())
      throw Error("bench: a prompt of " + std::to_string(o.prompt_tokens) + " tokens and " +
                  std::to_string(o.tokens + 1) + " more do not fit the context of " +
                  std::to_string(model->context()) + " (--ctx)");
  }
  BenchReport report;
  for (const auto& ram : o.rams) report.labels.push_back(ram_label(ram));
  const ExpertFiles experts = expert_files_of(o);
  const int configs = static_cast<int>(o.rams.size());
  for (int round = 0; round < o.runs; ++round)
    for (int i = 0; i < configs; ++i) {
      const int config = round % 2 == 0 ? i : configs - 1 - i;  // balanced: forwards, then backwards
      if (o.progress)
        o.progress("round " + std::to_string(round + 1) + "/" + std::to_string(o.runs) + ": " +
                   report.labels[static_cast<size_t>(config)]);
      report.runs.push_back(run_once(o, config, round, experts));
    }

  const MachineInfo m = this_machine();
  nlohmann::json budgets = nlohmann::json::array();
  for (const auto& ram : o.rams) budgets.push_back(ram ? nlohmann::json(*ram) : nlohmann::json());
  report.header = {
      {"machine",
       {{"host", m.host}, {"cpu", m.cpu}, {"cores", m.cores}, {"memory_bytes", m.memory_bytes}, {"kernel", m.kernel},
        {"kernels", kernels::isa_name(kernels::active_isa())}}},
      {"commit", o.commit},
      {"model", {{"path", o.model.string()}, {"identity", identity}}},
      // Exact unless the weights were re-quantized (a pack says how).
      {"numeric_mode", approximation.empty() ? "exact" : approximation},
      {"settings",
       {{"runs", o.runs},
        {"order", "balanced: rounds alternate forwards and backwards over the configurations"},
        {"prompt_tokens", o.prompt_tokens},
        {"prompt", "ids 1000 + 37·i"},
        {"output_tokens", o.tokens + 1},
        {"sampling", "greedy, end-of-sequence ignored"},
        {"threads", o.load.threads},
        {"device", o.load.device.kind == ComputeDevice::Kind::Cpu ? "cpu" : "gpu"},
        {"probe_seconds", o.probe_seconds},
        {"heat", o.load.heat.empty() ? "default" : o.load.heat},
        {"profile", o.load.profile.empty() ? nlohmann::json() : nlohmann::json(o.load.profile)},
        {"ram_bytes", budgets}}}};
  return report;
}

nlohmann::json bench_json(const BenchReport& r) {
  nlohmann::json j = r.header;
  nlohmann::json runs = nlohmann::json::array();
  for (const BenchRun& run : r.runs)
    runs.push_back({{"config", r.labels[static_cast<size_t>(run.config)]},
                    {"round", run.round + 1},
                    {"cache", run.cache},
                    {"load_s", run.load_s},
                    {"ttft_s", run.ttft_s},
                    {"decode_tok_s", run.decode_tok_s},
                    {"probe_before_gbps", run.probe_before_gbps},
                    {"probe_after_gbps", run.probe_after_gbps},
                    {"stats", run.stats}});
  j["runs"] = runs;
  nlohmann::json summary = nlohmann::json::array();
  for (size_t c = 0; c < r.labels.size(); ++c) {
    const int i = static_cast<int>(c);
    auto put = [&](double BenchRun::*field) {
      const Spread s = spread_of(figure_of(r, i, field));
      return nlohmann::json{{"median", s.median}, {"min", s.least}, {"max", s.most}};
    };
    summary.push_back({{"config", r.labels[c]},
                       {"ttft_s", put(&BenchRun::ttft_s)},
                       {"decode_tok_s", put(&BenchRun::decode_tok_s)},
                       {"load_s", put(&BenchRun::load_s)},
                       {"probe_before_gbps", put(&BenchRun::probe_before_gbps)},
                       {"probe_after_gbps", put(&BenchRun::probe_after_gbps)}});
  }
  j["summary"] = summary;
  return j;
}

std::string bench_markdown(const BenchReport& r) {
  const nlohmann::json j = bench_json(r);
  const nlohmann::json& h = r.header;
  std::string s = "# strata bench: " + h["model"]["path"].get<std::string>() + "\n\n";
  const nlohmann::json& m = h["machine"];
  s += "- machine: " + m["host"].get<std::string>() + ", " + m["cpu"].get<std::string>() + ", " +
       std::to_string(m["cores"].get<unsigned>()) + " threads, " +
       std::to_string(m["memory_bytes"].get<uint64_t>() >> 30) + " GiB, Linux " + m["kernel"].get<std::string>() +
       ", " + m["kernels"].get<std::string>() + " kernels\n";
  s += "- commit: " + (h["commit"].get<std::string>().empty() ? std::string("unknown") : h["commit"].get<std::string>()) + "\n";
  s += "- model: " + h["model"]["identity"].get<std::string>() + "; numeric mode: " +
       h["numeric_mode"].get<std::string>() + "\n";
  const nlohmann::json& st = h["settings"];
  s += "- " + std::to_string(st["runs"].get<int>()) + " runs per configuration in balanced order; prompt " +
       std::to_string(st["prompt_tokens"].get<int64_t>()) + " tokens, " +
       std::to_string(st["output_tokens"].get<int>()) + " output tokens (greedy)\n";
  std::vector<std::string> states;
  for (const BenchRun& run : r.runs)
    if (std::find(states.begin(), states.end(), run.cache) == states.end()) states.push_back(run.cache);
  std::string cache;
  for (const std::string& c : states) cache += (cache.empty() ? "" : "; ") + c;
  s += "- page cache before each run: " + cache + "\n\n";
  s += "| configuration | TTFT (s) | decode (tok/s) | load (s) | drives GB/s before / after |\n|---|---|---|---|---|\n";
  char line[512];
  for (const nlohmann::json& c : j["summary"]) {
    auto f = [&](const char* k, const char* fmt) {
      char v[96];
      std::snprintf(v, sizeof v, fmt, c[k]["median"].get<double>(), c[k]["min"].get<double>(), c[k]["max"].get<double>());
      return std::string(v);
    };
    std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %.2f / %.2f |\n", c["config"].get<std::string>().c_str(),
                  f("ttft_s", "%.3f [%.3f–%.3f]").c_str(), f("decode_tok_s", "%.2f [%.2f–%.2f]").c_str(),
                  f("load_s", "%.2f [%.2f–%.2f]").c_str(), c["probe_before_gbps"]["median"].get<double>(),
                  c["probe_after_gbps"]["median"].get<double>());
    s += line;
  }
  s += "\nMedians, [least–largest] of the runs.\n";
  return s;
}

std::string bench_svg(const BenchReport& r, const std::string& figure) {
  const bool decode = figure == "decode";
  if (!decode && figure != "ttft") throw Error("internal: bench_svg draws decode or ttft");
  double BenchRun::*field = decode ? &BenchRun::decode_tok_s : &BenchRun::ttft_s;
  const int n = static_cast<int>(r.labels.size());
  std::vector<Spread> spreads;
  double top = 0;
  for (int c = 0; c < n; ++c) {
    spreads.push_back(spread_of(figure_of(r, c, field)));
    top = std::max(top, spreads.back().most);
  }
  if (!(top > 0)) top = 1;
  const double width = 160.0 + 120.0 * n, height = 360, left = 70, bottom = 300, plot = 250;
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                width, height);
  s += buf;
  const std::string title = tmpl::text::html_escape(fs::path(r.header["model"]["path"].get<std::string>()).filename().string()) +
                            (decode ? ": decode tok/s" : ": time to first token (s)");
  s += "<text x=\"" + std::to_string(static_cast<int>(left)) + "\" y=\"24\" font-size=\"15\">" + title + "</text>\n";
  std::snprintf(buf, sizeof buf, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", left,
                bottom, width - 20, bottom);
  s += buf;
  for (int t = 0; t <= 4; ++t) {
    const double v = top * t / 4, y = bottom - plot * t / 4;
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" "
                  "y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                  left - 6, y + 4, v, left, y, width - 20, y);
    s += buf;
  }
  for (int c = 0; c < n; ++c) {
    const Spread& sp = spreads[static_cast<size_t>(c)];
    const double x = left + 40 + 120.0 * c, h = plot * sp.median / top;
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"60\" height=\"%.1f\" fill=\"#4a7ab5\"><title>%.4g</title></rect>\n",
                  x, bottom - h, h, sp.median);
    s += buf;
    const double y0 = bottom - plot * sp.least / top, y1 = bottom - plot * sp.most / top;
    std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x + 30,
                  y0, x + 30, y1);
    s += buf;
    s += "<text x=\"" + std::to_string(static_cast<int>(x + 30)) + "\" y=\"" + std::to_string(static_cast<int>(bottom + 18)) +
         "\" text-anchor=\"middle\">" + tmpl::text::html_escape(r.labels[static_cast<size_t>(c)]) + "</text>\n";
  }
  s += "<text x=\"" + std::to_string(static_cast<int>(left)) + "\" y=\"" + std::to_string(static_cast<int>(height - 12)) +
       "\">bars: medians of " + std::to_string(r.runs.size() / std::max<size_t>(1, r.labels.size())) +
       " runs; lines: least to largest</text>\n</svg>\n";
  return s;
}

}  // namespace strata
