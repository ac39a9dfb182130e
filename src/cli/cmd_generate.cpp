// strata generate: run a model on a prompt and print the continuation as
// each token is decided (stdout is flushed per token). On a terminal, stderr
// shows the load and a long prefill's progress; --json prints one object at
// the end.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/draft_flags.h"
#include "cli/model_flags.h"
#include "model/model.h"
#include "runtime/drive_rate_log.h"
#include "runtime/loader.h"
#include "runtime/expert_stats.h"
#include "runtime/generator.h"
#include "runtime/prompt.h"
#include "runtime/route_trace.h"
#include "runtime/text_stream.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/timeline.h"

namespace strata::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  int n = 16;
  SamplingParams sampling;
  ModelFlags model_flags;
  DraftFlags draft_flags;
  bool json = false;
  bool logits = false;
  bool ignore_eos = false;
  bool warmup = false;
  std::string session;
  std::string trace;
  std::string timeline;
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX)
      throw Error("--prompt-ids: '" + item + "' is not a token id (expected comma-separated non-negative integers)");
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (ids.empty()) throw Error("--prompt-ids: no token ids given");
  return ids;
}

// Models often have more embedding rows than the tokenizer has tokens; ids
// the tokenizer lacks have no text (as in `serve`: runtime/text_stream.h).
std::string decode_known(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<int32_t> known;
  for (int32_t id : ids)
    if (tok.has_token(id)) known.push_back(id);
  return tok.decode(known);
}

int run_generate(const GenerateArgs& a) {
  if (a.prompt.has_value() == a.prompt_ids.has_value()) throw Error("give exactly one of --prompt and --prompt-ids");
  if (a.n < 0) throw Error("-n must not be negative");
  if (!a.timeline.empty()) timeline::check_writable(a.timeline);  // before the load: a bad path costs nothing
  auto tokenizer = Tokenizer::for_model(a.model);  // first: the budget's baseline counts it
  LoadOptions lo = load_options(a.model_flags);
  DraftSetup draft = load_draft(a.draft_flags, lo);  // so is a draft model
  lo.show_progress = lo.show_progress && !a.json;
  lo.keep_session = !a.session.empty();
  auto model = load_model(a.model, lo);
  start_drafter(draft, a.draft_flags, *model);
  // A re-quantized pack says what it is before it says anything else.
  if (!a.json && !model->approximation().empty()) std::fprintf(stderr, "%s\n", model->approximation().c_str());
  const PromptBuilder prompts(*model, std::move(tokenizer));
  const Tokenizer* tok = prompts.tokenizer();

  std::vector<int32_t> prompt;
  if (a.prompt_ids) {
    prompt = parse_ids(*a.prompt_ids);  // verbatim: no BOS added
  } else {
    if (!tok)
      throw Error(a.model + ": no tokenizer (tokenizer.json, tiktoken.model or GGUF tokenizer metadata); use --prompt-ids");
    prompt = prompts.encode(*a.prompt);
  }
  if (prompt.empty()) throw Error("the prompt is empty");
  for (int32_t id : prompt)
    if (id >= model->config().vocab_size)
      throw Error("prompt token id " + std::to_string(id) + " is out of range for this model (vocabulary of " +
                  std::to_string(model->config().vocab_size) + ")");

  GenerateOptions opt;
  opt.max_new_tokens = a.n;
  opt.sampling = a.sampling;
  opt.keep_logits = a.logits;
  opt.drafter = draft.drafter.get();
  std::unique_ptr<RouteTrace> trace;
  if (!a.trace.empty()) trace = std::make_unique<RouteTrace>(a.trace, model->config().num_layers, model->config().n_routed_experts);
  opt.trace = trace.get();
  opt.draft_max = a.draft_flags.draft_max;
  opt.draft_adaptive = !a.draft_flags.fixed;
  if (!a.ignore_eos) opt.stop_tokens = prompts.stop_ids();
  if (a.warmup) {
    // Untimed and forgotten, before a session's cache is loaded beside it:
    // only what it leaves in the device and the caches stays.
    GenerateOptions once;
    once.max_new_tokens = 1;
    Session scratch;
    generate(*model, prompt, once, scratch);
    model->backend().profile_phase("load and warm-up");
  }
  if (!a.timeline.empty()) timeline::enable();  // after the load and warm-up: the prompt and the decode
  Session session;
  if (!a.session.empty()) {
    std::string why;
    session = load_session(a.session, *model, &why);
    if (!why.empty()) std::fprintf(stderr, "note: %s\n", why.c_str());
  }
  // The continuation, printed as it is decided (not with --json): text
  // that is whole UTF-8 (runtime/text_stream.h), or the ids without a
  // tokenizer. Ids past the tokenizer's vocabulary have no text.
  std::optional<TextStream> text;
  if (tok) text.emplace(*tok, std::vector<std::string>{});
  bool first = true;
  auto print = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  Progress prefill("prefill", prompt.size(), lo.show_progress, ProgressUnit::Tokens, /*quiet_if_quick=*/true);
  opt.on_prefill = [&](int64_t done, int64_t) { prefill.set(static_cast<uint64_t>(done)); };
  if (!a.json)
    opt.on_token = [&](const TokenEvent& e) {
      prefill.finish();
      if (!text) {
        print((first ? "" : " ") + std::to_string(e.token));
      } else if (e.token >= 0 && static_cast<size_t>(e.token) < tok->vocab_size()) {
        print(text->add(e.token));
      }
      first = false;
    };
  GenerateResult r = generate(*model, prompt, opt, session);
  prefill.finish();
  if (!a.session.empty()) save_session(a.session, *model, session);
  if (const std::string why = model->save_heat(); !why.empty())
    std::fprintf(stderr, "strata: warning: %s (the next run starts without this run's expert heat)\n", why.c_str());
  if (const std::string why = record_drive_rates(r.prefill_experts, r.decode_experts); !why.empty())
    std::fprintf(stderr, "strata: warning: %s (budget rates the drives without this run's reads)\n", why.c_str());
  if (!a.timeline.empty()) timeline::write(a.timeline);

  if (!a.json) {
    print((text ? text->flush() : std::string()) + "\n");
    const double tps = r.tokens.size() > 1 ? (r.tokens.size() - 1) / r.decode_s : 0.0;
    std::fprintf(stderr, "prompt %lld tokens in %.3f s; %zu tokens generated, %.2f tok/s decode\n",
                 static_cast<long long>(r.prompt_tokens), r.prefill_s, r.tokens.size(), tps);
    if (draft.drafter)
      std::fprintf(stderr, "draft (%s): %lld drafted, %lld accepted (%.1f%%), %.1f%% of decode in the drafter\n",
                   draft.drafter->name().c_str(), static_cast<long long>(r.drafted_tokens),
                   static_cast<long long>(r.accepted_tokens),
                   r.drafted_tokens ? 100.0 * r.accepted_tokens / r.drafted_tokens : 0.0,
                   r.decode_s > 0 ? 100.0 * r.draft_s / r.decode_s : 0.0);
    if (model->streaming()) {
      const ExpertStats& d = r.decode_experts;
      std::fprintf(stderr, "experts (decode): %.2f GB read, %.1f%% cache hits, %.1f%% of the time waiting on reads\n",
                   d.bytes_read / 1e9, d.requests ? 100.0 * d.hits / d.requests : 0.0,
                   r.decode_s > 0 ? 100.0 * d.io_wait_s / r.decode_s : 0.0);
    }
    return 0;
  }
  nlohmann::json out;
  // null: the weights are the source's as shipped (or a pack of them kept exact).
  out["approximation"] = model->approximation().empty() ? nlohmann::json() : nlohmann::json(model->approximation());
  out["tokens"] = r.tokens;
  // Invalid UTF-8 (a token boundary inside a character) is replaced, not thrown.
  out["text"] = tok ? decode_known(*tok, r.tokens) : "";
  const double decode_tok_s = r.tokens.size() > 1 && r.decode_s > 0 ? (r.tokens.size() - 1) / r.decode_s : 0.0;
  out["stats"] = {{"prompt_tokens", r.prompt_tokens},
                  {"generated_tokens", r.tokens.size()},
                  {"prefill_s", r.prefill_s},
                  {"ttft_s", r.prefill_s},
                  {"reused_prompt_tokens", r.reused_tokens},
                  {"finish_reason", r.context_full ? "context" : (r.tokens.size() < static_cast<size_t>(a.n) ? "stop" : "length")},
                  {"decode_tok_s", decode_tok_s},
                  {"peak_rss_bytes", peak_rss_bytes()},
                  // The tuned profile applied (strata tune), null for none.
                  {"profile", lo.profile.empty() ? nlohmann::json() : nlohmann::json(lo.profile)}};
  if (draft.drafter)
    out["stats"]["draft"] = {{"drafter", draft.drafter->name()},
                             {"drafted_tokens", r.drafted_tokens},
                             {"accepted_tokens", r.accepted_tokens},
                             {"acceptance_rate", r.drafted_tokens ? double(r.accepted_tokens) / r.drafted_tokens : 0.0},
                             {"draft_steps", r.draft_steps},
                             {"mean_accepted_per_step", r.draft_steps ? double(r.accepted_tokens) / r.draft_steps : 0.0},
                             {"expert_bytes_per_token", r.tokens.size() > 1 ? double(r.decode_experts.bytes_read) / double(r.tokens.size() - 1) : 0.0},
                             {"draft_s", r.draft_s}};
  if (model->streaming()) {
    const MemoryPlan& m = model->memory_plan();
    out["stats"]["memory"] = {{"budget", m.budget}, {"trunk", m.trunk}, {"kv", m.kv},
                              {"step", m.step}, {"staging", m.staging}, {"baseline", m.baseline},
                              {"expert_cache", m.cache}};
    out["stats"]["experts"] = {{"prefill", expert_stats_json(r.prefill_experts, r.prefill_s)},
                               {"decode", expert_stats_json(r.decode_experts, r.decode_s)}};
  }
  // On a GPU: the commands each phase recorded (what a token costs the GPU
  // beyond its work: docs/vulkan.md).
  const DeviceExpertStats& pd = r.prefill_experts.device, &dd = r.decode_experts.device;
  if (pd.dispatches + dd.dispatches > 0) {
    const double decoded = r.tokens.size() > 1 ? static_cast<double>(r.tokens.size() - 1) : 0.0;
    out["stats"]["device"] = {
        {"prefill", {{"dispatches", pd.dispatches}, {"barriers", pd.barriers}}},
        {"decode",
         {{"dispatches", dd.dispatches},
          {"barriers", dd.barriers},
          {"dispatches_per_token", decoded > 0 ? static_cast<double>(dd.dispatches) / decoded : 0.0},
          {"barriers_per_token", decoded > 0 ? static_cast<double>(dd.barriers) / decoded : 0.0}}}};
  }
  if (a.logits) out["logits"] = r.logits;
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, Action& run) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  add_model_argument(cmd, args->model, std::string(kModelKinds) + " to run");
  cmd->add_option("--prompt", args->prompt, "Prompt text, tokenized as the checkpoint's tokenizer says");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, comma-separated, used verbatim");
  cmd->add_option("-n,--max-tokens", args->n, "Number of tokens to generate")->capture_default_str();
  SamplingParams& sp = args->sampling;
  cmd->add_option("--temperature", sp.temperature, "0 for greedy")->capture_default_str();
  cmd->add_option("--seed", sp.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--top-k", sp.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--top-p", sp.top_p, "Keep the most likely tokens up to this mass (1: off)")->capture_default_str();
  cmd->add_option("--min-p", sp.min_p, "Drop tokens below min-p x the top probability (0: off)")->capture_default_str();
  cmd->add_option("--repetition-penalty", sp.repetition_penalty, "Penalty for prompt and output tokens (1: off)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", sp.presence_penalty, "OpenAI presence penalty")->capture_default_str();
  cmd->add_option("--frequency-penalty", sp.frequency_penalty, "OpenAI frequency penalty")->capture_default_str();
  add_model_flags(cmd, args->model_flags);
  add_draft_flags(cmd, args->draft_flags);
  cmd->add_flag("--json", args->json, "Print one JSON object with tokens, text and stats");
  cmd->add_flag("--logits", args->logits, "With --json: add each generated token's full logits row");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at end-of-sequence tokens");
  cmd->add_flag("--warmup", args->warmup,
                "Run the prompt once, untimed, before the timed run (weights go up to the GPU, its pipelines are "
                "built, caches fill; its expert uses count in the heat file), so the stats show steady speed as "
                "llama-bench's do");
  cmd->add_option("--session", args->session,
                  "Session file: a prompt that extends the previous one reuses its KV cache (created if absent)");
  cmd->add_option("--trace", args->trace,
                  "Router trace: a JSON line per computed token with the experts it chose in each layer "
                  "(for `strata heat`; slows decoding a little)");
  cmd->add_option("--timeline", args->timeline,
                  "Write a timeline of the prompt and the decode (the model's layers, the waits for expert reads, "
                  "each drive's reads) to this file, in Chrome's trace event format (open it in Perfetto)");
  cmd->callback([&run, args] { run = [args] { return run_generate(*args); }; });
}

}  // namespace strata::cli
