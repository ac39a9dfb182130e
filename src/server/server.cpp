#include "server/server.h"

#include <httplib.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "model/model.h"
#include "runtime/prompt.h"
#include "runtime/route_trace.h"
#include "runtime/scheduler.h"
#include "server/body_budget.h"
#include "server/http_connections.h"
#include "server/openai_request.h"
#include "server/reasoning_splitter.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata {

namespace {

using json = nlohmann::json;

// How long a request waits for room to hold its body (server/body_budget.h)
// before it is answered 503.
constexpr std::chrono::seconds kBodyWait{30};

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  if (e.status == 429) res.set_header("Retry-After", "1");
  send_json(res, e.status, {{"error", err}});
}

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char b[64];
  std::snprintf(b, sizeof b, "%s-%016llx%04llx", prefix, static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(++counter & 0xffff));
  return b;
}

// Prometheus text format: a label value escapes backslash, quote and newline.
std::string prometheus_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// SIGINT/SIGTERM only raise this flag (all a signal handler may safely do);
// the server's stopper thread turns it into a stop. A stop asked for before
// the listener is up would otherwise be lost and the server never exit.
std::atomic<bool> g_stop_requested{false};
void on_signal(int) { g_stop_requested = true; }

class Server {
 public:
  explicit Server(const ServeOptions& o)
      : o_(o),
        http_(ConnectionLimits{.max_connections = o.max_connections,
                               .request_timeout = std::chrono::seconds(o.request_timeout_s)}),
        bodies_(std::max(o.body_budget_bytes, o.max_body_bytes)) {
    std::filesystem::path model(o.model);
    if (model.filename().empty()) model = model.parent_path();  // "dir/" names the model dir too
    name_ = o.served_name.empty() ? model.filename().string() : o.served_name;
    if (name_.empty()) name_ = "strata";
  }

  int run() {
    // Blocks of a megabyte and more (bodies, their JSON, their text) are
    // mapped for themselves and unmapped when freed. glibc's default raises
    // that threshold to 32 MiB once such a block is freed, after which each
    // connection thread's arena keeps the largest request it handled: ten
    // chat bodies of 8 MiB, handled one at a time, left 170 MB held.
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    http_.set_payload_max_length(o_.max_body_bytes);
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (GuardedHttpServer::request_timed_out()) return send_timeout(res);
      if (res.status == 413) return send_error(res, {413, too_large(), "invalid_request_error"});
      if (res.status == 404 && res.body.empty())
        return send_error(res, {404, "no route " + req.method + " " + req.path, "invalid_request_error", "", "not_found"});
    });
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, {500, what, "server_error"});
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (failed_) return send_json(res, 500, {{"status", "error"}, {"error", load_error_}});
      if (!ready_) return send_json(res, 503, {{"status", "loading"}});
      send_json(res, 200, {{"status", "ok"}});
    });
    http_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!o_.metrics_public && !authorized(req)) return send_error(res, unauthorized());
      metrics(res);
    });
    http_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req)) return send_error(res, unauthorized());
      send_json(res, 200,
                {{"object", "list"},
                 {"data", json::array({{{"id", name_},
                                         {"object", "model"},
                                         {"created", created_},
                                         {"owned_by", "strata"},
                                         {"strata", {{"approximation", o_.approximation.empty()
                                                                           ? json()
                                                                           : json(o_.approximation)}}}}})}});
    });
    // With a content reader: the body is read by the handler, after the key
    // is checked and room for it is reserved (receive_body).
    http_.Post("/v1/completions",
               [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& body) {
                 handle(req, res, body, false);
               });
    http_.Post("/v1/chat/completions",
               [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& body) {
                 handle(req, res, body, true);
               });

    loader_ = std::thread([this] { load(); });
    g_stop_requested = false;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    const int port = http_.bind(o_.host, o_.port);
    if (port < 0) {
      loader_.join();
      shutdown();
      throw Error("cannot listen on " + o_.host + ":" + std::to_string(o_.port));
    }
    std::fprintf(stderr, "strata serve: listening on http://%s:%d (model %s)\n", o_.host.c_str(), port, name_.c_str());
    if (o_.on_listen) o_.on_listen(port, o_.on_listen_arg);
    std::atomic<bool> listening_done{false};
    std::thread stopper([&] {
      while (!g_stop_requested && !listening_done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      // stop() is a no-op until the listener runs: repeat it until it ends.
      while (!listening_done) {
        http_.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    http_.listen_after_bind();
    listening_done = true;
    stopper.join();
    loader_.join();
    shutdown();
    return 0;
  }

 private:
  void load() {
    try {
      auto tokenizer = Tokenizer::for_model(o_.model);  // first: the budget's baseline counts it
      model_ = o_.load_model();
      prompts_ = std::make_unique<PromptBuilder>(*model_, std::move(tokenizer));
      tok_ = prompts_->tokenizer();
      // Completions still work; chat requests will say why they cannot.
      if (!prompts_->template_error().empty())
        std::fprintf(stderr, "strata serve: the chat template does not compile: %s\n",
                     prompts_->template_error().c_str());
      if (!o_.trace.empty()) trace_ = std::make_unique<RouteTrace>(o_.trace, model_->config().num_layers, model_->config().n_routed_experts);
      SchedulerOptions so{o_.max_running, o_.max_queue, o_.drafter, o_.draft_max, o_.draft_adaptive};
      so.trace = trace_.get();
      scheduler_ = std::make_unique<Scheduler>(*model_, so);
      step_thread_ = std::thread([this] { scheduler_->run(); });
      ready_ = true;
      std::fprintf(stderr, "strata serve: model loaded\n");
      if (o_.idle_work)
        idle_thread_ = std::thread([this] {
          const std::function<bool()> busy = [this] {
            if (stopping_) return true;
            const SchedulerStats s = scheduler_->stats();
            return s.running + s.queued > 0;
          };
          const std::function<bool()> stopping = [this] { return stopping_.load(); };
          try {
            o_.idle_work(busy, stopping);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "strata serve: idle-time work stopped: %s\n", e.what());
          }
        });
    } catch (const std::exception& e) {
      load_error_ = e.what();
      failed_ = true;  // after the text: readers check the flag, then read it
      std::fprintf(stderr, "strata serve: cannot load the model: %s\n", e.what());
    }
  }

  // Stops the step thread (what is left ends as cancelled) and keeps this
  // run's expert heat for the next, as `generate` does.
  void shutdown() {
    stopping_ = true;
    if (idle_thread_.joinable()) idle_thread_.join();
    if (scheduler_) {
      scheduler_->stop();
      if (step_thread_.joinable()) step_thread_.join();
      scheduler_.reset();
    }
    if (!model_) return;
    if (const std::string why = model_->save_heat(); !why.empty())
      std::fprintf(stderr, "strata serve: warning: %s (the next start is without this run's expert heat)\n",
                   why.c_str());
  }

  bool authorized(const httplib::Request& req) const {
    return o_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + o_.api_key;
  }
  static ApiError unauthorized() {
    return {401, "invalid or missing API key (Authorization: Bearer ...)", "invalid_request_error", "",
            "invalid_api_key"};
  }

  void metrics(httplib::Response& res) {
    std::string out;
    auto line = [&](const char* name, const char* type, const char* help, double v) {
      char b[256];
      std::snprintf(b, sizeof b, "# HELP %s %s\n# TYPE %s %s\n%s %.9g\n", name, help, name, type, name, v);
      out += b;
    };
    SchedulerStats s;
    if (ready_) s = scheduler_->stats();
    line("strata_up", "gauge", "1 once the model is loaded", ready_ ? 1 : 0);
    line("strata_requests_total", "counter", "Generation requests accepted", static_cast<double>(s.requests));
    line("strata_prompt_tokens_total", "counter", "Prompt tokens prefilled", static_cast<double>(s.prompt_tokens));
    line("strata_generated_tokens_total", "counter", "Tokens generated", static_cast<double>(s.generated_tokens));
    line("strata_time_to_first_token_seconds_sum", "counter", "Sum of times to first token", s.ttft_sum_s);
    line("strata_time_to_first_token_seconds_count", "counter", "Requests that got a first token",
         static_cast<double>(s.ttft_count));
    line("strata_decode_tokens_per_second", "gauge", "Aggregate decode rate over recent steps", s.decode_tok_s);
    line("strata_queue_depth", "gauge", "Requests waiting to start", static_cast<double>(s.queued));
    line("strata_running_sequences", "gauge", "Sequences being decoded", static_cast<double>(s.running));
    line("strata_draft_tokens_total", "counter", "Drafted tokens fed to the model for verification",
         static_cast<double>(s.drafted_tokens));
    line("strata_draft_accepted_tokens_total", "counter", "Drafted tokens kept (each one an output token)",
         static_cast<double>(s.accepted_tokens));
    line("strata_draft_seconds_total", "counter", "Time spent in the drafter", s.draft_s);
    line("strata_expert_bytes_read_total", "counter", "Expert bytes read from drives", static_cast<double>(s.expert_bytes_read));
    line("strata_remote_bytes_total", "counter", "Expert bytes fetched from a streaming install's source",
         static_cast<double>(s.remote_bytes));
    line("strata_remote_fetch_seconds_total", "counter", "Time spent fetching from a streaming install's source",
         s.remote_s);
    line("strata_remote_fetched_reads_total", "counter",
         "Expert reads of a streaming install that waited for a fetch from its source",
         static_cast<double>(s.remote_fetched_reads));
    line("strata_remote_local_reads_total", "counter",
         "Expert reads of a streaming install whose bytes were already on the drive",
         static_cast<double>(s.remote_local_reads));
    line("strata_remote_fetch_wait_seconds_total", "counter",
         "Summed wait of the expert reads that waited for a fetch", s.remote_wait_s);
    line("strata_remote_local_share", "gauge", "Share of a streaming install's expert reads served from the drive",
         s.remote_fetched_reads + s.remote_local_reads
             ? static_cast<double>(s.remote_local_reads) /
                   static_cast<double>(s.remote_fetched_reads + s.remote_local_reads)
             : 0.0);
    line("strata_expert_cache_hit_ratio", "gauge", "Share of expert requests served from RAM",
         s.expert_requests ? static_cast<double>(s.expert_hits) / static_cast<double>(s.expert_requests) : 0.0);
    // An info metric: the label says how the weights were re-quantized and
    // how close they stayed; the value says whether they were at all.
    out += "# HELP strata_model_approximation 1 when the weights were re-quantized from the source (a lossy pack)\n"
           "# TYPE strata_model_approximation gauge\n"
           "strata_model_approximation{label=\"" + prometheus_label_value(o_.approximation) + "\"} " +
           (o_.approximation.empty() ? "0" : "1") + "\n";
    res.set_content(out, "text/plain; version=0.0.4");
  }

  std::string too_large() const {
    return "the request body is larger than " + std::to_string(o_.max_body_bytes) + " bytes";
  }
  void send_timeout(httplib::Response& res) {
    GuardedHttpServer::close_after_response(res);
    send_error(res, {408, "the request did not arrive within " + std::to_string(o_.request_timeout_s) + " s",
                     "invalid_request_error", "", "request_timeout"});
  }

  // Answers without the body: it is read and dropped first (closing on bytes
  // not read would reset the connection, and the client could lose the
  // answer), and the connection is closed after, whatever was left.
  void refuse_body(const httplib::ContentReader& read, httplib::Response& res, const ApiError& e) {
    GuardedHttpServer::restart_request_timer();  // whatever the server waited for before
    read([](const char*, size_t) { return true; });
    GuardedHttpServer::close_after_response(res);
    if (GuardedHttpServer::request_timed_out()) return send_timeout(res);
    send_error(res, e);
  }

  // Reads the body into `body` once room for it is reserved in `held`; false
  // when it answered instead (413, 408, 503) or the client went away.
  bool receive_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read,
                    std::string& body, BodyReservation& held) {
    const bool sized = req.has_header("Content-Length");
    const size_t length = sized ? req.get_header_value<uint64_t>("Content-Length") : o_.max_body_bytes;
    const ApiError too_big{413, too_large(), "invalid_request_error"};
    if (length > o_.max_body_bytes) {
      refuse_body(read, res, too_big);  // httplib skips a body past its payload limit unread
      return false;
    }
    if (!bodies_.acquire(length, kBodyWait)) {
      refuse_body(read, res, {503, "too many request bodies are being handled; retry shortly", "server_error", "", "busy"});
      return false;
    }
    held.hold(bodies_, length);
    GuardedHttpServer::restart_request_timer();  // the wait was the server's
    body.reserve(length);
    bool over = false;
    const bool complete = read([&](const char* data, size_t n) {
      over = body.size() + n > length;  // a chunked body past the largest
      if (!over) body.append(data, n);
      return !over;
    });
    if (complete) return true;
    GuardedHttpServer::close_after_response(res);
    if (GuardedHttpServer::request_timed_out()) send_timeout(res);
    else if (over || res.status == 413) send_error(res, too_big);
    else send_error(res, {400, "the request body could not be read", "invalid_request_error"});
    return false;
  }

  // The request read, parsed and made into prompt ids, within the body budget
  // (released before this returns); nullopt when it was answered instead.
  std::optional<ParsedRequest> take_request(const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& read_body, bool chat) {
    BodyReservation held;  // released last, once what is made below is freed
    std::string body;
    if (!receive_body(req, res, read_body, body, held)) return std::nullopt;
    std::optional<ParsedRequest> p;
    try {
      p = parse_request(body, chat, {name_, o_.max_tokens_limit, model_->config().vocab_size, model_->context()});
      std::string().swap(body);
      prepare_prompt(*p, chat);
    } catch (const ApiError& e) {
      send_error(res, e);
      return std::nullopt;
    }
    // What the prompt was made from goes with the reservation: only its ids stay.
    p->messages = p->tools = p->template_kwargs = nullptr;
    std::string().swap(p->prompt_text);
    return p;
  }

  void handle(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read_body,
              bool chat) {
    if (!authorized(req)) return refuse_body(read_body, res, unauthorized());
    if (failed_) return refuse_body(read_body, res, {500, "the model failed to load: " + load_error_, "server_error"});
    if (!ready_) return refuse_body(read_body, res, {503, "the model is still loading", "server_error"});
    std::optional<ParsedRequest> parsed = take_request(req, res, read_body, chat);
    if (!parsed) return;
    ParsedRequest& p = *parsed;
    Request g;
    g.prompt = p.prompt_ids;
    g.sampling = p.sampling;
    g.stop_ids = p.ignore_eos ? std::vector<int32_t>{} : prompts_->stop_ids();
    g.tokenizer = tok_;
    g.stop_strings = p.stop;
    g.top_logprobs = p.logprobs ? p.top_logprobs : -1;
    g.draft = p.draft;
    if (!tok_ && !p.stop.empty())
      return send_error(res, {400, "stop strings need a tokenizer; this model has none", "invalid_request_error", "stop"});
    const int room = static_cast<int>(model_->context() - static_cast<int64_t>(g.prompt.size()));
    if (room <= 0)
      return send_error(res, {400,
                              "the prompt has " + std::to_string(g.prompt.size()) + " tokens; the context is " +
                                  std::to_string(model_->context()),
                              "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded"});
    // Each running sequence's KV cache is budgeted for the context (serve
    // --ctx, --max-running): a request that would go past it is refused
    // rather than cut short or let grow beyond the budget.
    if (p.max_tokens > room)
      return send_error(res, {400,
                              "the prompt has " + std::to_string(g.prompt.size()) + " tokens and max_tokens is " +
                                  std::to_string(p.max_tokens) + ": together more than the context of " +
                                  std::to_string(model_->context()) +
                                  " positions each sequence's KV cache is budgeted for (strata serve --ctx)",
                              "invalid_request_error", "max_tokens", "context_length_exceeded"});
    g.max_tokens = p.max_tokens > 0 ? p.max_tokens : std::min(chat ? room : 16, room);
    std::shared_ptr<Job> job;
    try {
      job = scheduler_->submit(std::move(g));
    } catch (const QueueFull&) {
      return send_error(res, {429, "too many requests are waiting; retry shortly", "rate_limit_error", "", "queue_full"});
    } catch (const Error& e) {
      return send_error(res, {400, e.what(), "invalid_request_error"});
    }
    auto gen = std::make_shared<Generation>(*this, p, job, chat);
    if (!p.stream) {
      gen->run_to_end([] { return GuardedHttpServer::client_gone(); });
      // Cancelled: the client left (the answer goes nowhere) or the server is stopping.
      if (job->finish() == Finish::Cancelled)
        return send_error(res, {503, "the request was cancelled: the server is stopping", "server_error"});
      if (gen->failed()) return send_error(res, {500, job->error(), "server_error"});
      return send_json(res, 200, gen->final_response());
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [gen](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!gen->stream(write)) {
            gen->cancel();  // the client went away
            return false;
          }
          sink.done();
          return true;
        },
        [gen](bool success) {
          if (!success) gen->cancel();
        });
  }

  // The prompt's token ids: a chat rendered through the checkpoint's template.
  // Tokenizing stops as soon as the prompt passes the context: a prompt of
  // megabytes costs what the context's worth of tokens costs.
  void prepare_prompt(ParsedRequest& p, bool chat) {
    if (!tok_ && (chat || !p.prompt_text.empty()))
      throw ApiError{400, "this model has no tokenizer; send the prompt as token ids", "invalid_request_error", "prompt"};
    const auto context = static_cast<size_t>(model_->context());
    const std::string field = chat ? "messages" : "prompt";
    auto too_long = [&] {
      return ApiError{400, "the prompt has more tokens than the context of " + std::to_string(context),
                      "invalid_request_error", field, "context_length_exceeded"};
    };
    if (chat) {
      if (!prompts_->has_chat_template()) {
        const std::string& why = prompts_->template_error();
        throw ApiError{400,
                       why.empty() ? "this model has no chat template; use /v1/completions"
                                   : "this model's chat template does not compile (" + why + ")",
                       "invalid_request_error"};
      }
      try {
        ChatPrompt chat_prompt = prompts_->render_chat(p.messages, p.tools, p.template_kwargs, context);
        if (chat_prompt.too_long) throw too_long();
        p.rendered = std::move(chat_prompt.text);
        p.prompt_ids = std::move(chat_prompt.ids);
      } catch (const ChatTemplateError& e) {
        // raise_exception(...) texts are meant for the client as they are.
        const std::string why = e.kind() == tmpl::TemplateError::Kind::Raised ? e.message() : e.what();
        throw ApiError{400, "the chat template rejected the messages: " + why, "invalid_request_error", "messages"};
      } catch (const Error& e) {  // text the tokenizer refuses (invalid UTF-8)
        throw ApiError{400, e.what(), "invalid_request_error", "messages"};
      }
    } else if (!p.prompt_text.empty()) {
      std::optional<std::vector<int32_t>> ids;
      try {
        ids = prompts_->encode(p.prompt_text, context);
      } catch (const Error& e) {
        throw ApiError{400, e.what(), "invalid_request_error", "prompt"};
      }
      if (!ids) throw too_long();
      p.prompt_ids = std::move(*ids);
    }
    if (p.prompt_ids.empty()) throw ApiError{400, "the prompt is empty", "invalid_request_error", "prompt"};
  }

  // One request's output, as a full response or as SSE events.
  class Generation {
   public:
    Generation(Server& s, const ParsedRequest& p, std::shared_ptr<Job> job, bool chat)
        : s_(s), p_(p), job_(std::move(job)), chat_(chat),
          split_(split_mode(s, chat), ReasoningSplitter::starts_in_reasoning(split_mode(s, chat), p.rendered)) {
      id_ = random_id(chat ? "chatcmpl" : "cmpl");
    }

    void cancel() { job_->cancel(); }
    bool failed() const { return job_->finish() == Finish::Error; }

    // Collects the whole reply; a client that has gone (`gone()`, asked
    // between waits) cancels the sequence, which frees its slot at the next step.
    template <class Gone>
    void run_to_end(Gone&& gone) {
      std::vector<TokenEvent> ev;
      while (job_->wait(ev, 200)) {
        for (const auto& e : ev) absorb(e);
        ev.clear();
        if (!job_->cancelled() && gone()) job_->cancel();
      }
      finish_text();
    }

    // OpenAI's usage; drafted tokens as its predicted outputs' details.
    json usage() const {
      json u = {{"prompt_tokens", job_->prompt_tokens()},
                {"completion_tokens", job_->completion_tokens()},
                {"total_tokens", job_->prompt_tokens() + job_->completion_tokens()}};
      if (job_->drafted_tokens() > 0)
        u["completion_tokens_details"] = {
            {"accepted_prediction_tokens", job_->accepted_tokens()},
            {"rejected_prediction_tokens", job_->drafted_tokens() - job_->accepted_tokens()}};
      return u;
    }

    json final_response() {
      const json usage = this->usage();
      json choice = {{"index", 0}, {"finish_reason", finish_reason()}, {"logprobs", logprobs_json()}};
      if (chat_) {
        json msg = {{"role", "assistant"}, {"content", content_}};
        if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
        choice["message"] = msg;
      } else {
        choice["text"] = content_;
      }
      return {{"id", id_},
              {"object", chat_ ? "chat.completion" : "text_completion"},
              {"created", now_s()},
              {"model", s_.name_},
              {"choices", json::array({choice})},
              {"usage", usage}};
    }

    // Sends events until the end; false when the client is gone.
    template <class Write>
    bool stream(Write&& write) {
      auto event = [&](const json& j) {
        return write("data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n");
      };
      if (chat_ && !event(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return false;
      std::vector<TokenEvent> ev;
      bool more = true;
      while (more) {
        more = job_->wait(ev, 200);
        size_t lp_from = lp_.size();
        for (const auto& e : ev) absorb(e);
        ev.clear();
        if (!more) finish_text();
        if (!flush_deltas(event, lp_from)) return false;
      }
      if (failed()) {
        event({{"error", {{"message", job_->error()}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
        return write("data: [DONE]\n\n");
      }
      json last = chunk(json::object(), finish_reason());
      if (!event(last)) return false;
      if (p_.include_usage) {
        json u = chunk(json::object(), nullptr);
        u["choices"] = json::array();
        u["usage"] = usage();
        if (!event(u)) return false;
      }
      return write("data: [DONE]\n\n");
    }

   private:
    static ReasoningSplitter::Mode split_mode(const Server& s, bool chat) {
      if (!chat) return ReasoningSplitter::Mode::None;
      if (s.prompts_->native_k3_chat()) return ReasoningSplitter::Mode::Xtml;
      return ReasoningSplitter::mode_for(s.prompts_->template_source());
    }

    // The scheduler cuts the text at stop strings (and ends the sequence there).
    void absorb(const TokenEvent& e) {
      if (p_.logprobs) lp_.push_back(e);
      add_text(e.text);
    }
    // Totals (content_, reasoning_) and what is not yet sent as a delta.
    void add_split(const SplitText& st) {
      pending_reasoning_ += st.reasoning;
      pending_content_ += st.content;
      reasoning_ += st.reasoning;
      content_ += st.content;
    }
    void add_text(const std::string& t) {
      if (!t.empty()) add_split(split_.add(t));
    }
    void finish_text() {
      if (finished_text_) return;
      finished_text_ = true;
      add_split(split_.flush());
    }

    template <class Event>
    bool flush_deltas(Event& event, size_t lp_from) {
      if (!pending_reasoning_.empty() && chat_)
        if (!event(chunk({{"reasoning_content", pending_reasoning_}}, nullptr))) return false;
      if (!pending_content_.empty() || lp_from < lp_.size()) {
        json c = chat_ ? chunk({{"content", pending_content_}}, nullptr) : chunk(pending_content_, nullptr);
        if (p_.logprobs) c["choices"][0]["logprobs"] = logprobs_json(lp_from);
        if (!event(c)) return false;
      }
      pending_reasoning_.clear();
      pending_content_.clear();
      return true;
    }

    json chunk(const json& delta, const json& finish) {
      json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
      if (chat_)
        choice["delta"] = delta;
      else
        choice["text"] = delta.is_string() ? delta : json("");
      return {{"id", id_},
              {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", now_s()},
              {"model", s_.name_},
              {"choices", json::array({choice})}};
    }

    std::string finish_reason() const {
      const Finish f = job_->finish();
      return f == Finish::Length || f == Finish::ContextFull ? "length" : "stop";
    }

    // A token's text in logprobs: as in the reply's text, an id the tokenizer
    // lacks (the model's vocabulary can be larger) has none; without a
    // tokenizer, vLLM's spelling of a bare id.
    std::string piece(int32_t id) const {
      if (!s_.tok_) return "token_id:" + std::to_string(id);
      return s_.tok_->has_token(id) ? s_.tok_->decode({id}) : std::string();
    }

    json logprobs_json(size_t from = 0) const {
      if (!p_.logprobs) return nullptr;
      auto bytes = [](const std::string& s) {
        json b = json::array();
        for (unsigned char c : s) b.push_back(static_cast<int>(c));
        return b;
      };
      if (chat_) {
        json content = json::array();
        for (size_t i = from; i < lp_.size(); ++i) {
          const std::string t = piece(lp_[i].token);
          json top = json::array();
          for (const auto& [id, lp] : lp_[i].top) {
            const std::string tt = piece(id);
            top.push_back({{"token", tt}, {"logprob", lp}, {"bytes", bytes(tt)}});
          }
          content.push_back({{"token", t}, {"logprob", lp_[i].logprob}, {"bytes", bytes(t)}, {"top_logprobs", top}});
        }
        return {{"content", content}};
      }
      json tokens = json::array(), lps = json::array(), tops = json::array();
      for (size_t i = from; i < lp_.size(); ++i) {
        tokens.push_back(piece(lp_[i].token));
        lps.push_back(lp_[i].logprob);
        json top = json::object();
        for (const auto& [id, lp] : lp_[i].top) top[piece(id)] = lp;
        tops.push_back(top);
      }
      return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
    }

    Server& s_;
    ParsedRequest p_;
    std::shared_ptr<Job> job_;
    bool chat_;
    ReasoningSplitter split_;
    std::string id_;
    std::string content_, reasoning_, pending_content_, pending_reasoning_;
    std::vector<TokenEvent> lp_;
    bool finished_text_ = false;
  };

  ServeOptions o_;
  std::string name_;
  int64_t created_ = now_s();
  GuardedHttpServer http_;
  BodyBudget bodies_;
  std::thread loader_;
  std::atomic<bool> ready_{false};
  std::string load_error_;         // written once by the loader, before failed_
  std::atomic<bool> failed_{false};
  std::unique_ptr<Model> model_;
  std::unique_ptr<PromptBuilder> prompts_;
  const Tokenizer* tok_ = nullptr;  // prompts_'s; null when the model has none
  std::unique_ptr<RouteTrace> trace_;  // before the scheduler: it outlives it
  std::unique_ptr<Scheduler> scheduler_;
  std::thread step_thread_;
  std::atomic<bool> stopping_{false};
  std::thread idle_thread_;  // ServeOptions::idle_work
};

}  // namespace

int serve(const ServeOptions& options) {
  Server s(options);
  return s.run();
}

}  // namespace strata
