#pragma once
// What a client hands the scheduler (Request) and what it gets back (a Job:
// the sequence's tokens as they are produced, its end, a cancel flag). A Job
// is shared between the step thread, which produces, and the client, which
// consumes from any thread.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"

namespace strata {

class Tokenizer;

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 16;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  // With a tokenizer, every event carries the text that became safe to send
  // (runtime/text_stream.h), and a stop string ends generation: the text
  // stops right before it. Stop strings need the tokenizer.
  const Tokenizer* tokenizer = nullptr;
  std::vector<std::string> stop_strings;
  int top_logprobs = -1;     // -1: no logprobs; else also this many alternatives
  bool keep_logits = false;  // each event carries its full logits row
  // Prefix reuse: the prompt's leading tokens held by this session's cache
  // are not computed again. With keep_session, the finished sequence (prompt
  // + generated tokens, its cache, and where that keeps a recurrent state a
  // snapshot at the prompt's end) is handed back by Job::take_session.
  Session session;
  bool keep_session = false;
  // With a scheduler that has a drafter: whether this sequence drafts.
  bool draft = true;
};

struct TokenEvent {
  int32_t token = 0;
  std::string text;                            // with Request::tokenizer (runtime/text_stream.h)
  float logprob = 0;                           // log-softmax of the raw logits (runtime/logprobs.h)
  std::vector<std::pair<int32_t, float>> top;  // most likely alternatives, with logprobs
  std::vector<float> logits;                   // with Request::keep_logits
};

enum class Finish {
  Running,
  StopToken,    // emitted one of stop_ids
  StopString,   // the text reached a stop string
  Length,       // max_tokens
  ContextFull,  // the next position would be past the model's context
  Cancelled,
  Error,
};

class Job {
 public:
  // Waits up to `timeout_ms` for events and moves them to `out`; returns
  // false once the job is over and every event was taken.
  bool wait(std::vector<TokenEvent>& out, int timeout_ms = 100);
  // Any thread; the scheduler ends the sequence at its next step (a long
  // prompt's pass whose sequences are all cancelled: before its next layer).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  bool done() const;
  Finish finish() const;
  std::string error() const;  // with Finish::Error
  // The exception that ended the sequence (Finish::Error), to rethrow as it was.
  std::exception_ptr exception() const;
  int prompt_tokens() const { return prompt_tokens_; }
  int completion_tokens() const { return completion_tokens_.load(); }
  // Prompt tokens taken from Request::session's cache.
  int64_t reused_tokens() const { return reused_tokens_.load(); }
  // Prompt tokens whose KV is in the cache so far (reused or computed): a
  // prefill's progress.
  int64_t prefilled_tokens() const { return prefilled_tokens_.load(); }
  // With Request::keep_session, once done: the finished sequence.
  Session take_session();
  // Speculation: tokens drafted and fed for this sequence, and of those the
  // ones kept (each kept one is an output token).
  int64_t drafted_tokens() const { return drafted_tokens_.load(); }
  int64_t accepted_tokens() const { return accepted_tokens_.load(); }
  int64_t draft_steps() const { return draft_steps_.load(); }  // steps that fed drafted tokens

 private:
  friend class Scheduler;
  void push(TokenEvent e);
  void end(Finish f, std::exception_ptr error = nullptr, Session session = {});

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  Finish finish_ = Finish::Running;
  std::exception_ptr error_;
  Session session_;
  std::atomic<bool> cancelled_{false};
  int prompt_tokens_ = 0;
  std::atomic<int> completion_tokens_{0};
  std::atomic<int64_t> reused_tokens_{0};
  std::atomic<int64_t> prefilled_tokens_{0};
  std::atomic<int64_t> drafted_tokens_{0};
  std::atomic<int64_t> accepted_tokens_{0};
  std::atomic<int64_t> draft_steps_{0};
};

}  // namespace strata
