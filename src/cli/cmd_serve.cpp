// strata serve: the OpenAI-compatible HTTP server (server/server.h).
//
// Everything a missing or broken model, or a bad flag, can fail (the
// checkpoint, its config, the context, the budget, every layer bound) is
// checked before the port is bound: `strata serve BROKEN` exits with one
// error line and never listens. Only reading the weights in (a "load" bar on
// a terminal) happens after, while /health says 503.
#include "cli/commands.h"
#include "cli/draft_flags.h"
#include "cli/model_flags.h"
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
  cmd->callback([&run, o, flags, draft_flags, body_mib] {
    run = [o, flags, draft_flags, body_mib] {
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
      start_drafter(opened->draft, *draft_flags, *opened->model);
      o->drafter = opened->draft.drafter.get();
      o->draft_max = draft_flags->draft_max;
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
