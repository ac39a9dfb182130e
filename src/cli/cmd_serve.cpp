// strata serve: the OpenAI-compatible HTTP server (server/server.h).
//
// Everything a missing or broken model, or a bad flag, can fail (the
// checkpoint, its config, the context, the budget, every layer bound) is
// checked before the port is bound: `strata serve BROKEN` exits with one
// error line and never listens. Only reading the weights in (a "load" bar on
// a terminal) happens after, while /health says 503.
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::cli {

namespace {

// What open_model() built, handed to the server's loading thread.
struct Opened {
  std::unique_ptr<Tokenizer> counted;  // see below
  std::unique_ptr<Model> model;
  bool show_progress = false;
};

}  // namespace

void register_serve(CLI::App& app, Action& run) {
  auto o = std::make_shared<ServeOptions>();
  auto flags = std::make_shared<ModelFlags>();
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
  cmd->add_option("--served-name", o->served_name, "Model id to report (default: the path's last part)");
  add_model_flags(cmd, *flags);
  cmd->callback([&run, o, flags] {
    run = [o, flags] {
      LoadOptions lo = load_options(*flags);
      if (o->max_running < 1) throw Error("--max-running must be at least 1");
      lo.sequences = o->max_running;
      auto opened = std::make_shared<Opened>();
      // The server loads the tokenizer before the model, so that the
      // budget's baseline counts it; this copy stands in for it while the
      // model is opened here, and is let go once the server holds its own.
      opened->counted = Tokenizer::for_model(o->model);
      opened->model = open_model(o->model, lo);
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
