#pragma once
// The serving engine: one thread owns the model and runs every admitted
// sequence together. Each step is one forward pass over one row per running
// sequence, so an expert selected by several sequences is read and applied
// once for all of them (the MoE block groups rows by expert); a new sequence's
// prompt is prefilled on its own first. Requests beyond `max_running` wait in
// a bounded queue; submit() refuses when that is full (HTTP 429).
//
// Token-level stops (end-of-sequence ids, max_tokens, the context) are decided
// here; text-level stop strings are the caller's, which cancels the job.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/sampler.h"

namespace strata {

class Model;

struct GenRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  int top_logprobs = -1;          // -1: no logprobs; else also this many alternatives
};

struct TokenEvent {
  int32_t token = 0;
  float logprob = 0;                             // log-softmax of the model's logits
  std::vector<std::pair<int32_t, float>> top;    // most likely alternatives, with logprobs
};

// One request's stream of tokens; the engine produces, an HTTP handler consumes.
class Job {
 public:
  // Waits up to `timeout_ms` for events; returns false once the job is over
  // and every event was taken.
  bool wait(std::vector<TokenEvent>& out, int timeout_ms = 100);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  bool done() const;
  // "stop", "length" or "cancelled"; "error" with error() set.
  std::string finish_reason() const;
  std::string error() const;
  int prompt_tokens() const { return prompt_tokens_; }
  int completion_tokens() const { return completion_tokens_.load(); }

 private:
  friend class Engine;
  void push(TokenEvent e);
  void finish(std::string reason, std::string error = {});

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool done_ = false;
  std::string reason_, error_;
  std::atomic<bool> cancelled_{false};
  int prompt_tokens_ = 0;
  std::atomic<int> completion_tokens_{0};
};

struct EngineStats {
  uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0, steps = 0;
  double ttft_sum_s = 0;
  uint64_t ttft_count = 0;
  double decode_tok_s = 0;  // over the last steps with something to decode
  size_t queued = 0, running = 0;
  uint64_t expert_bytes_read = 0, expert_requests = 0, expert_hits = 0;
};

class QueueFull : public std::exception {
 public:
  const char* what() const noexcept override { return "the request queue is full"; }
};

class Engine {
 public:
  Engine(Model& model, int max_running, int max_queue);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; throws QueueFull when `max_queue` are already waiting.
  std::shared_ptr<Job> submit(GenRequest request);
  EngineStats stats() const;

 private:
  struct Sequence;
  void loop();
  void admit();
  void prefill(Sequence& s);
  void decode_step();
  // Samples from `logits`, emits the token, decides whether the sequence ends.
  void emit(Sequence& s, const float* logits);

  Model& model_;
  const int max_running_, max_queue_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  std::vector<std::unique_ptr<Sequence>> running_;
  EngineStats stats_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace strata
