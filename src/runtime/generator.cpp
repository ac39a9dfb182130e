#include "runtime/generator.h"

#include <sys/resource.h>

#include <chrono>

#include "model/model.h"
#include "runtime/expert_stats.h"
#include "runtime/scheduler.h"
#include "util/error.h"
#include "util/timeline.h"

namespace strata {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One sequence, reusing and then replacing `*session` when given.
GenerateResult run(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                   Session* session) {
  if (prompt.empty()) throw Error("the prompt is empty");
  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (options.max_new_tokens <= 0) return result;

  Request request;
  request.prompt = prompt;
  request.sampling = options.sampling;
  request.max_tokens = options.max_new_tokens;
  request.stop_ids = options.stop_tokens;
  request.keep_logits = options.keep_logits;
  // Without a session nothing is kept (a recurrent model's snapshot at the
  // prompt's end would be a copy of its states for nothing).
  if (session) {
    request.session = std::move(*session);
    request.keep_session = true;
    *session = Session{};
  }

  Scheduler scheduler(model, SchedulerOptions{1, 0, options.drafter, options.draft_max, options.draft_adaptive, options.trace});
  model.begin_expert_epoch();
  const ExpertStats at_start = model.expert_stats();
  const auto t0 = std::chrono::steady_clock::now();
  const std::shared_ptr<Job> job = scheduler.submit(std::move(request));
  // Each token is handed on as soon as its step is done.
  std::vector<TokenEvent> events;
  auto take_events = [&] {
    job->wait(events, 0);
    for (TokenEvent& e : events) {
      if (options.on_token) options.on_token(e);
      result.tokens.push_back(e.token);
      if (options.keep_logits) result.logits.push_back(std::move(e.logits));
    }
    events.clear();
  };
  // Prefill: the steps up to the one that gives the first token.
  bool more = true;
  while (more && job->completion_tokens() == 0) {
    more = scheduler.step();
    if (options.on_prefill) options.on_prefill(job->prefilled_tokens(), result.prompt_tokens);
  }
  result.prefill_s = seconds_since(t0);
  timeline::span("phase", "prompt", t0, std::chrono::steady_clock::now());
  const ExpertStats after_prefill = model.expert_stats();
  result.prefill_experts = stats_delta(after_prefill, at_start);
  model.begin_expert_epoch();

  const auto t1 = std::chrono::steady_clock::now();
  take_events();
  while (more) {
    more = scheduler.step();
    take_events();
  }
  result.decode_s = seconds_since(t1);
  timeline::span("phase", "decode", t1, std::chrono::steady_clock::now());
  // The last step's unused guesses land and count. (A failed request's reads
  // are left to land on their own: they must not end the next request.)
  if (job->finish() != Finish::Error) model.settle_expert_reads();
  result.decode_experts = stats_delta(model.expert_stats(), after_prefill);

  if (job->finish() == Finish::Error) std::rethrow_exception(job->exception());
  take_events();
  result.context_full = job->finish() == Finish::ContextFull;
  result.reused_tokens = job->reused_tokens();
  result.drafted_tokens = job->drafted_tokens();
  result.accepted_tokens = job->accepted_tokens();
  result.draft_steps = job->draft_steps();
  result.draft_s = scheduler.stats().draft_s;
  if (session) *session = job->take_session();
  return result;
}

}  // namespace

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options) {
  return run(model, prompt, options, nullptr);
}

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        Session& session) {
  return run(model, prompt, options, &session);
}

int64_t peak_rss_bytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

}  // namespace strata
