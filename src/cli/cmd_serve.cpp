// strata serve: the OpenAI-compatible HTTP server (server/server.h).
//
// Everything a missing or broken model, or a bad flag, can fail (the
// checkpoint, its config, the context, the budget, every layer bound) is
// checked before the port is bound: `strata serve BROKEN` exits with one
// error line and never listens. Only reading the weights in (a "load" bar on
// a terminal) happens after, while /health says 503.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "cli/commands.h"
#include "cli/draft_flags.h"
#include "cli/model_flags.h"
#include "model/expert_heat.h"
#include "remote/remote_mirror.h"
#include "runtime/install_warmup.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::cli {

namespace {

// What open_model() built, handed to the server's loading thread.
struct Opened {
  std::unique_ptr<Tokenizer> counted;  // see below
  DraftSetup draft;                    // held for as long as the server runs
  std::unique_ptr<Model> model;
  bool show_progress = false;
};

struct WarmFlags {
  bool on = false;
  std::vector<std::string> from;
  double budget_gb = 0, rate_mb = 0;
};

// serve --warm: whenever no request has run or waited for a second, the
// install's likeliest experts are fetched (runtime/install_warmup.h); a
// request that arrives stops it between batches, and it resumes (skipping
// what is on the drive) once the server is idle again, until every ranked
// expert is there or the budget is spent.
IdleWork warm_when_idle(const std::string& dir, const WarmFlags& f) {
  return [dir, f](const std::function<bool()>& busy, const std::function<bool()>& stopping) {
    InstallWarmupOptions o;
    o.dir = dir;
    for (const auto& p : f.from) o.from.emplace_back(p);
    o.budget_bytes = static_cast<uint64_t>(f.budget_gb * 1e9);
    o.max_rate = f.rate_mb * 1e6;
    o.stop = busy;
    o.connections = 0;  // the readers' pool stays as it is
    uint64_t fetched = 0;
    for (;;) {
      // A second with nothing running or waiting.
      for (int idle_ticks = 0; idle_ticks < 20;) {
        if (stopping()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        idle_ticks = busy() ? 0 : idle_ticks + 1;
      }
      const InstallWarmupReport r = warm_install(o);
      fetched += r.fetched_bytes;
      if (o.budget_bytes > 0) o.budget_bytes = o.budget_bytes > r.fetched_bytes ? o.budget_bytes - r.fetched_bytes : 1;
      if (!r.stopped) {
        std::fprintf(stderr, "strata serve: warm-up done: %.3f GB fetched, %lld of %lld ranked experts were already on the drive%s\n",
                     fetched / 1e9, static_cast<long long>(r.already_local), static_cast<long long>(r.ranked),
                     r.budget_reached ? "; the budget ended it" : "");
        return;
      }
    }
  };
}

}  // namespace

void register_serve(CLI::App& app, Action& run) {
  auto o = std::make_shared<ServeOptions>();
  auto flags = std::make_shared<ModelFlags>();
  auto draft_flags = std::make_shared<DraftFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  add_model_argument(cmd, o->model, std::string(kModelKinds) + " to serve (its tokenizer and chat template too)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' (on /metrics too)");
  cmd->add_flag("--metrics-public", o->metrics_public, "Serve /metrics without the --api-key");
  cmd->add_option("--max-running", o->max_running,
                  "Sequences decoded together (the RAM budget holds a KV cache at the full --ctx for each)")
      ->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "Requests that may wait beyond those (more get 429)")->capture_default_str();
  cmd->add_option("--max-tokens-limit", o->max_tokens_limit, "Largest max_tokens accepted")->capture_default_str();
  cmd->add_option("--max-connections", o->max_connections,
                  "Connections served at once (a thread each); more are answered 503 and closed at once")
      ->capture_default_str();
  cmd->add_option("--request-timeout", o->request_timeout_s,
                  "Seconds a client has to send a whole request (line, headers, body); slower ones get 408")
      ->capture_default_str();
  auto body_mib = std::make_shared<size_t>(o->body_budget_bytes >> 20);
  cmd->add_option("--body-budget-mib", *body_mib,
                  "Request bodies (8 MiB at most each) held at once, from their reading until they are "
                  "token ids; more wait for room, then get 503. What handling them costs on top of the RAM "
                  "budget stays within a few times this (docs/server.md)")
      ->capture_default_str();
  cmd->add_option("--served-name", o->served_name, "Model id to report (default: the path's last part)");
  cmd->add_option("--trace", o->trace,
                  "Router trace: a JSON line per computed token with the experts it chose in each layer "
                  "(for `strata heat`)");
  add_model_flags(cmd, *flags);
  add_draft_flags(cmd, *draft_flags);
  auto warm = std::make_shared<WarmFlags>();
  cmd->add_flag("--warm", warm->on,
                "A streaming install: while no request runs, fetch its likeliest experts ahead (strata warm), "
                "giving way to requests");
  cmd->add_option("--warm-from", warm->from, "Router traces or heat files to rank experts by (default: the install's own heat)");
  cmd->add_option("--warm-budget", warm->budget_gb, "Warm-up fetches at most this many GB (0: every ranked expert)")
      ->check(number_in(0.0, 1e6));
  cmd->add_option("--warm-rate", warm->rate_mb, "Warm-up fetches at most this many MB a second (0: no limit)")
      ->check(number_in(0.0, 1e6));
  cmd->callback([&run, o, flags, draft_flags, body_mib, warm] {
    run = [o, flags, draft_flags, body_mib, warm] {
      if (!warm->on && (!warm->from.empty() || warm->budget_gb > 0 || warm->rate_mb > 0))
        throw Error("--warm-from, --warm-budget and --warm-rate go with --warm");
      if (warm->on && (!RemoteMirror::is_mirror(o->model) || RemoteMirror::is_full(o->model)))
        throw Error("--warm: " + o->model + " is not a streaming install with experts left to fetch");
      if (warm->on) o->idle_work = warm_when_idle(o->model, *warm);
      LoadOptions lo = load_options(*flags);
      if (o->max_running < 1) throw Error("--max-running must be at least 1");
      if (o->max_connections < 1) throw Error("--max-connections must be at least 1");
      if (o->request_timeout_s < 1) throw Error("--request-timeout must be at least 1 second");
      if (*body_mib < 1) throw Error("--body-budget-mib must be at least 1");
      o->body_budget_bytes = *body_mib << 20;
      lo.sequences = o->max_running;
      auto opened = std::make_shared<Opened>();
      // The server loads the tokenizer before the model, so that the
      // budget's baseline counts it; this copy stands in for it while the
      // model is opened here, and is let go once the server holds its own.
      opened->counted = Tokenizer::for_model(o->model);
      opened->draft = load_draft(*draft_flags, lo);  // so is a draft model
      opened->model = open_model(o->model, lo);
      if (warm->on && warm->from.empty() && !std::filesystem::exists(default_heat_path(opened->model->identity())))
        throw Error("--warm: no heat recorded for " + o->model + " yet (" +
                    default_heat_path(opened->model->identity()).string() + "): give --warm-from TRACES");
      start_drafter(opened->draft, *draft_flags, *opened->model);
      o->drafter = opened->draft.drafter.get();
      o->draft_max = draft_flags->draft_max;
      o->draft_adaptive = !draft_flags->fixed;
      o->approximation = opened->model->approximation();
      opened->show_progress = lo.show_progress;
      o->load_model = [opened] {
        opened->counted.reset();
        warm_model(*opened->model, opened->show_progress);
        return std::move(opened->model);
      };
      return serve(*o);
    };
  });
}

}  // namespace strata::cli
