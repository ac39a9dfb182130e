// strata serve: the OpenAI-compatible HTTP server (server/server.h).
#include "cli/commands.h"
#include "server/server.h"

namespace strata::cli {

void register_serve(CLI::App& app, Action& run) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("model", o->model, "HF model directory, GGUF file or pack")->required();
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY'");
  cmd->add_option("--ram", o->ram_gib, "RAM budget in GiB (experts beyond it are streamed)");
  cmd->add_option("--ctx", o->ctx, "Context length per sequence")->capture_default_str();
  cmd->add_option("--max-running", o->max_running, "Sequences decoded together")->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "Requests that may wait beyond those (more get 429)")->capture_default_str();
  cmd->add_option("--max-tokens-limit", o->max_tokens_limit, "Largest max_tokens accepted")->capture_default_str();
  cmd->add_option("--served-name", o->served_name, "Model id to report (default: the path's last part)");
  cmd->add_option("--threads", o->threads, "Worker threads (default: all cores)");
  cmd->callback([&run, o] { run = [o] { return serve(*o); }; });
}

}  // namespace strata::cli
