// strata serve: the OpenAI-compatible HTTP server (server/server.h).
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "server/server.h"

namespace strata::cli {

void register_serve(CLI::App& app, Action& run) {
  auto o = std::make_shared<ServeOptions>();
  auto flags = std::make_shared<ModelFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("model", o->model, "HF model directory, GGUF file or pack")->required();
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY'");
  cmd->add_option("--max-running", o->max_running, "Sequences decoded together")->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "Requests that may wait beyond those (more get 429)")->capture_default_str();
  cmd->add_option("--max-tokens-limit", o->max_tokens_limit, "Largest max_tokens accepted")->capture_default_str();
  cmd->add_option("--served-name", o->served_name, "Model id to report (default: the path's last part)");
  add_model_flags(cmd, *flags);
  cmd->callback([&run, o, flags] {
    run = [o, flags] {
      // Flags are checked here, before listening; the model loads in the background.
      const LoadOptions lo = load_options(*flags);
      o->load_model = [path = o->model, lo] { return load_model(path, lo); };
      return serve(*o);
    };
  });
}

}  // namespace strata::cli
