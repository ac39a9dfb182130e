// strata compare: judge a lossy conversion (int8 trunk, re-quantized experts)
// against the original on the same prompts (a file, or the built-in set that
// `strata pack` measures and records). With --min-top1 / --max-kl it is a
// gate: exit 3 and one line on stderr when a threshold fails (errors exit 1).
// On a terminal, stderr shows the loads' and the prompts' progress.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/compare.h"
#include "runtime/pack_fidelity.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json_file.h"
#include "util/progress.h"

namespace strata::cli {

namespace {

struct CompareArgs {
  std::string model_a, model_b, prompts;
  int threads = 0;
  bool json = false;
  std::optional<double> min_top1, max_kl;
};

// Exit status of a gate that failed: apart from errors (1), so a script can
// tell a bad conversion from a bad invocation.
constexpr int kGateFailed = 3;

// One prompt per line: a JSON array of token ids, or text tokenized with
// model A's tokenizer.
std::vector<std::vector<int32_t>> read_prompts(const std::string& path, const std::string& model_dir) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open");
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::vector<int32_t>> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      auto j = parse_json_or_discarded(line);
      if (!j.is_array()) throw Error(path + ":" + std::to_string(n) + ": not a JSON array of token ids");
      std::vector<int32_t> ids;
      for (const auto& v : j) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
          throw Error(path + ":" + std::to_string(n) + ": token ids must be non-negative integers");
        ids.push_back(v.get<int32_t>());
      }
      out.push_back(std::move(ids));
    } else {
      if (!tok) {
        tok = Tokenizer::for_model(model_dir);
        if (!tok)
          throw Error(path + ":" + std::to_string(n) + ": text prompt, but " + model_dir +
                      " has no tokenizer (write token ids as a JSON array instead)");
      }
      out.push_back(tok->encode_prompt(line));
    }
  }
  if (out.empty()) throw Error(path + ": no prompts");
  return out;
}

int run_compare(const CompareArgs& a) {
  const bool show = stderr_is_terminal() && !a.json;
  LoadOptions lo(a.threads);
  lo.show_progress = show;
  lo.notice = [](const std::string& line) { std::fprintf(stderr, "strata: %s\n", line.c_str()); };
  // Both are opened (every check) before either is read in.
  auto model_a = open_model(a.model_a, lo);
  auto model_b = open_model(a.model_b, lo);
  auto prompts = a.prompts.empty()
                     ? builtin_fidelity_prompts(model_a->config().vocab_size,
                                                std::min(model_a->context(), model_b->context()))
                     : read_prompts(a.prompts, a.model_a);
  warm_model(*model_a, show);
  warm_model(*model_b, show);
  uint64_t positions = 0;
  for (const auto& p : prompts) positions += p.size();
  Progress progress("compare", positions, show, ProgressUnit::Tokens, /*quiet_if_quick=*/true);
  CompareReport r = compare_models(*model_a, *model_b, prompts,
                                   [&](int64_t done, int64_t) { progress.set(static_cast<uint64_t>(done)); });
  progress.finish();
  const std::string failed = compare_gate_failure(r, a.min_top1, a.max_kl);
  if (a.json) {
    nlohmann::json j = {{"sequences", r.sequences},       {"positions", r.positions},
                        {"mean_kl", r.mean_kl},           {"p99_kl", r.p99_kl},
                        {"max_kl", r.max_kl},             {"top1_agreement", r.top1_agreement},
                        {"perplexity_a", r.perplexity_a}, {"perplexity_b", r.perplexity_b},
                        {"perplexity_diff", r.perplexity_b - r.perplexity_a}};
    if (a.prompts.empty()) j["prompt_set"] = kBuiltinPromptSet;
    if (a.min_top1 || a.max_kl) j["gate"] = {{"passed", failed.empty()}, {"failed", failed}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("sequences %lld, positions %lld%s\n", static_cast<long long>(r.sequences),
                static_cast<long long>(r.positions), a.prompts.empty() ? " (the built-in prompts)" : "");
    std::printf("KL(A||B) mean %.6g  p99 %.6g  max %.6g nats\n", r.mean_kl, r.p99_kl, r.max_kl);
    std::printf("top-1 agreement %.2f%%\n", 100.0 * r.top1_agreement);
    std::printf("perplexity A %.4f  B %.4f  (B - A %+.4f)\n", r.perplexity_a, r.perplexity_b,
                r.perplexity_b - r.perplexity_a);
  }
  if (failed.empty()) return 0;
  std::fprintf(stderr, "strata: compare: %s\n", failed.c_str());
  return kGateFailed;
}

}  // namespace

void register_compare(CLI::App& app, Action& run) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand("compare", "Compare two models' next-token distributions (KL, top-1, perplexity)");
  cmd->add_option("MODEL_A", args->model_a, std::string("Reference model: ") + kModelKinds)->required();
  cmd->add_option("MODEL_B", args->model_b, std::string("Model under test: ") + kModelKinds)->required();
  cmd->add_option("--prompts", args->prompts,
                  "File: one prompt per line (text, or a JSON array of ids); default: the built-in token-id prompts "
                  "that `strata pack` records a lossy pack's figures on");
  cmd->add_option("--min-top1", args->min_top1, "Gate: exit 3 when the top-1 agreement (0 to 1) is below this")
      ->check(number_in(0.0, 1.0));
  cmd->add_option("--max-kl", args->max_kl, "Gate: exit 3 when the mean KL(A||B) in nats is above this")
      ->check(CLI::NonNegativeNumber);
  add_threads_option(cmd, args->threads);
  cmd->add_flag("--json", args->json, "Print a JSON object");
  cmd->callback([&run, args] { run = [args] { return run_compare(*args); }; });
}

}  // namespace strata::cli
