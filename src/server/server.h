#pragma once
// `strata serve`: an OpenAI-compatible HTTP server over the scheduler
// (runtime/scheduler.h), which one step thread runs.
//   GET  /v1/models, /health (503 while loading), /metrics (Prometheus text)
//        (a re-quantized pack's label in both: /v1/models "strata.approximation",
//        /metrics strata_model_approximation; docs/server.md)
//   POST /v1/completions, /v1/chat/completions (streamed as SSE or not)
// Errors use OpenAI's JSON shape {"error": {"message", "type", "param", "code"}}
// with 400/401/404/408/413/429/500/503.
// Hostile clients are bounded (docs/server.md "Limits"): connections served at
// once and the time to send a request (server/http_connections.h), request
// bodies held at once (server/body_budget.h), prompts measured against the
// context while they are tokenized (Tokenizer::encode(text, max_tokens)), and
// a non-streamed request whose client disconnects is cancelled like a
// streamed one.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace strata {

class Drafter;

class Model;

using IdleWork = std::function<void(const std::function<bool()>& busy, const std::function<bool()>& stopping)>;

struct ServeOptions {
  std::string model;             // its path: the tokenizer and chat template are read from it
  // Loads the model (on a thread of its own: /health says 503 meanwhile).
  std::function<std::unique_ptr<Model>()> load_model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;           // "" = no authentication
  // /metrics without the key (a scraper on the same host); with a key set it
  // is otherwise behind it like every other endpoint but /health.
  bool metrics_public = false;
  int max_running = 8;           // sequences decoded together
  int max_queue = 64;            // waiting beyond those; more get 429
  // Speculative decoding (runtime/drafter.h; outlives the server): each
  // running sequence drafts unless its request says "draft": false.
  Drafter* drafter = nullptr;
  int draft_max = 8;
  bool draft_adaptive = true;  // false: draft_max every step (--draft-fixed)
  std::string trace;  // router trace file (runtime/route_trace.h); "" = none
  // Work for idle time (serve --warm: runtime/install_warmup.h), run on a
  // thread of its own once the model has loaded. `busy()` is true while a
  // request runs or waits, and once `stopping()` is (then the work must
  // return soon: shutdown waits for it); it should give way while busy.
  IdleWork idle_work;
  size_t max_body_bytes = 8u << 20;
  // Request bodies held at once, from their reading until they are token ids
  // (server/body_budget.h); at least max_body_bytes. A body that does not fit
  // waits for room, 30 s at most, then gets a 503.
  size_t body_budget_bytes = 32u << 20;
  // Connections served at once; more get a 503 and are closed at once
  // (server/http_connections.h).
  int max_connections = 256;
  // Seconds a client has to send a whole request (line, headers, body);
  // slower ones get a 408 and are disconnected.
  int request_timeout_s = 30;
  int max_tokens_limit = 32768;  // largest max_tokens accepted
  std::string served_name;       // the "model" id reported; default: the path's last part
  // The model's Model::approximation() ("" = exact weights), known before it
  // has loaded, so /v1/models says it from the first request.
  std::string approximation;
  // Called once the socket listens (tests use it to learn the port).
  void (*on_listen)(int port, void* arg) = nullptr;
  void* on_listen_arg = nullptr;
};

// Blocks until the server is stopped (SIGINT/SIGTERM), then saves the
// model's expert heat as `generate` does. Throws strata::Error when it
// cannot listen.
int serve(const ServeOptions& options);

}  // namespace strata
