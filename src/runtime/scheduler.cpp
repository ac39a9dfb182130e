#include "runtime/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "model/model.h"
#include "runtime/logprobs.h"
#include "runtime/text_stream.h"
#include "util/error.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;

size_t count_non_finite(std::span<const float> row) {
  size_t n = 0;
  for (float x : row) n += !std::isfinite(x);
  return n;
}
}

struct Scheduler::Sequence {
  Request req;
  std::shared_ptr<Job> job;
  Clock::time_point submitted;
  std::unique_ptr<KvCache> cache;
  // With keep_session, where the cache keeps a recurrent state: the cache at
  // the prompt's end (Session::prompt_end).
  std::unique_ptr<CacheSnapshot> prompt_end;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TextStream> text;
  size_t computed = 0;      // prompt tokens whose KV is in the cache
  bool decoding = false;    // the whole prompt is in; one row per step from now
  int64_t pos = 0;          // while decoding: the position of `pending`
  int32_t pending = -1;     // sampled, not yet fed back
  std::vector<int32_t> output;
  bool ended = false;
};

Scheduler::Scheduler(Model& model, SchedulerOptions options)
    : model_(model), options_{std::max(1, options.max_running), std::max(0, options.max_queue)} {}

Scheduler::~Scheduler() {
  for (auto& s : running_)
    if (!s->ended) s->job->end(Finish::Cancelled);
  for (auto& s : queue_) s->job->end(Finish::Cancelled);
}

std::shared_ptr<Job> Scheduler::submit(Request r) {
  const auto& p = r.prompt;
  if (p.empty()) throw Error("the prompt is empty");
  const int64_t vocab = model_.config().vocab_size;
  for (int32_t id : p)
    if (id < 0 || id >= vocab)
      throw Error("prompt token id " + std::to_string(id) + " is out of range for this model (vocabulary of " +
                  std::to_string(vocab) + ")");
  if (static_cast<int64_t>(p.size()) > model_.context())
    throw Error("the prompt has " + std::to_string(p.size()) + " tokens but the context is " +
                std::to_string(model_.context()) + " (raise --ctx)");
  if (r.max_tokens < 1) throw Error("max_tokens must be at least 1");
  validate(r.sampling);
  if (!r.sampling.logit_bias.empty() && r.sampling.logit_bias.back().first >= vocab)
    throw Error("logit_bias token id " + std::to_string(r.sampling.logit_bias.back().first) +
                " is out of range for this model (vocabulary of " + std::to_string(vocab) + ")");
  if (!r.stop_strings.empty() && !r.tokenizer) throw Error("stop strings need the model's tokenizer");

  auto s = std::make_unique<Sequence>();
  s->job = std::make_shared<Job>();
  s->job->prompt_tokens_ = static_cast<int>(p.size());
  s->req = std::move(r);
  s->submitted = Clock::now();
  std::shared_ptr<Job> job = s->job;
  {
    std::lock_guard lock(m_);
    // Room for max_running running and max_queue waiting in all: a request
    // the step thread has not admitted yet counts as waiting.
    if (static_cast<int>(queue_.size() + running_.size()) >= options_.max_queue + options_.max_running)
      throw QueueFull();
    queue_.push_back(std::move(s));
    ++stats_.requests;
  }
  cv_.notify_all();
  return job;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(m_);
  SchedulerStats s = stats_;
  s.queued = queue_.size();
  s.running = running_.size();
  return s;
}

void Scheduler::stop() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
}

void Scheduler::run() {
  while (true) {
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !running_.empty(); });
      if (stop_) return;
    }
    try {
      step();
    } catch (...) {
      // Whatever escaped a step (bookkeeping around the forward pass, which
      // handles its own errors) ends every sequence with it rather than the
      // process: the step thread must outlive any one request.
      fail_running(std::current_exception());
      std::lock_guard lock(m_);
      std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->ended; });
    }
  }
}

bool Scheduler::step() {
  admit();
  for (auto& s : running_)
    if (!s->ended && s->job->cancelled()) end(*s, Finish::Cancelled);
  try {
    forward_step();
  } catch (...) {
    // A failure in the shared step (a read error, say) ends every sequence in it.
    fail_running(std::current_exception());
  }
  sweep();
  std::lock_guard lock(m_);
  return !queue_.empty() || !running_.empty();
}

void Scheduler::fail_running(const std::exception_ptr& error) {
  for (auto& s : running_)
    if (!s->ended) end(*s, Finish::Error, error);
}

void Scheduler::admit() {
  std::vector<Sequence*> admitted;
  std::vector<std::unique_ptr<Sequence>> dropped;
  {
    std::lock_guard lock(m_);
    // Requests cancelled while they waited leave the queue without a cache.
    for (auto it = queue_.begin(); it != queue_.end();)
      if ((*it)->job->cancelled()) {
        dropped.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    while (static_cast<int>(running_.size()) < options_.max_running && !queue_.empty()) {
      running_.push_back(std::move(queue_.front()));
      queue_.pop_front();
      admitted.push_back(running_.back().get());
    }
  }
  for (auto& s : dropped) end(*s, Finish::Cancelled);
  for (Sequence* s : admitted) {
    try {
      start(*s);
    } catch (...) {
      end(*s, Finish::Error, std::current_exception());
    }
  }
}

void Scheduler::start(Sequence& s) {
  // Reuse the session's cache for the prompt's leading tokens it already holds.
  Session& session = s.req.session;
  const size_t reused = session.reusable(s.req.prompt);
  s.cache = reused > 0 ? session.take_cache(reused) : model_.new_cache();
  session = Session{};
  s.computed = reused;
  s.job->reused_tokens_ = static_cast<int64_t>(reused);
  s.job->prefilled_tokens_ = static_cast<int64_t>(reused);
  s.sampler = std::make_unique<Sampler>(s.req.sampling);
  s.sampler->set_prompt(s.req.prompt);
  if (s.req.tokenizer) s.text = std::make_unique<TextStream>(*s.req.tokenizer, s.req.stop_strings);
}

void Scheduler::forward_step() {
  rows_.clear();
  logit_owners_.clear();
  for (auto& s : running_)
    if (!s->ended && s->decoding) {
      rows_.push_back(Row{s->pending, s->pos, s->cache.get(), true});
      logit_owners_.push_back(s.get());
    }
  const size_t decode_rows = rows_.size();
  // Prompt rows: a chunk of max_batch_rows per sequence, and with others
  // decoding no more than max_batch_rows rows in all (what a step's buffers
  // are budgeted for; the decode rows go first so they never wait).
  const size_t chunk = static_cast<size_t>(model_.max_batch_rows());
  size_t budget = decode_rows < chunk ? chunk - decode_rows : 1;
  for (auto& s : running_) {
    if (s->ended || s->decoding || budget == 0) continue;
    const auto& prompt = s->req.prompt;
    const size_t n = std::min({prompt.size() - s->computed, chunk, budget});
    for (size_t i = s->computed; i < s->computed + n; ++i) {
      const bool last = i + 1 == prompt.size();
      rows_.push_back(Row{prompt[i], static_cast<int64_t>(i), s->cache.get(), last});
      if (last) logit_owners_.push_back(s.get());
    }
    s->computed += n;
    budget -= n;
  }
  if (rows_.empty()) return;

  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  logits_.resize(logit_owners_.size() * vocab);
  const auto t0 = Clock::now();
  model_.forward(rows_, logits_.data());
  for (auto& s : running_)
    if (!s->ended && !s->decoding) s->job->prefilled_tokens_ = static_cast<int64_t>(s->computed);
  for (size_t i = 0; i < logit_owners_.size(); ++i) {
    Sequence& s = *logit_owners_[i];
    if (s.decoding) {
      ++s.pos;
    } else {
      s.decoding = true;
      s.pos = static_cast<int64_t>(s.req.prompt.size());
      // The prompt is all in the cache: where a chat's next prompt departs
      // from this sequence (it re-templates the answer). A recurrent state
      // cannot rewind there later, so it is kept now.
      if (s.req.keep_session && s.cache->keeps_state()) s.prompt_end = s.cache->snapshot();
      std::lock_guard lock(m_);
      stats_.prompt_tokens += s.req.prompt.size();
    }
    emit(s, &logits_[i * vocab]);
  }
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  std::lock_guard lock(m_);
  ++stats_.steps;
  if (rows_.size() == decode_rows && dt > 0)
    stats_.decode_tok_s = 0.8 * stats_.decode_tok_s + 0.2 * (static_cast<double>(decode_rows) / dt);
}

void Scheduler::emit(Sequence& s, const float* logits) {
  const std::span<const float> row(logits, static_cast<size_t>(model_.config().vocab_size));
  // NaN or Inf here comes from the weights or the config (or an overflow):
  // sampling would pick a token from garbage (greedy: the first one) and
  // carry on as if nothing happened. This sequence ends with the reason.
  if (const size_t bad = count_non_finite(row); bad > 0) {
    end(s, Finish::Error,
        std::make_exception_ptr(Error("non-finite logits at position " + std::to_string(s.pos - 1) + " (" +
                                      std::to_string(bad) + " of " + std::to_string(row.size()) +
                                      " values are NaN or Inf): the model's weights or config hold NaN/Inf")));
    return;
  }
  const int32_t token = s.sampler->next(row);
  TokenEvent e;
  e.token = token;
  if (s.req.top_logprobs >= 0) {
    TokenLogprobs lp = token_logprobs(row, token, s.req.top_logprobs);
    e.logprob = lp.logprob;
    e.top = std::move(lp.top);
  }
  if (s.req.keep_logits) e.logits.assign(row.begin(), row.end());
  s.output.push_back(token);
  s.pending = token;
  {
    std::lock_guard lock(m_);
    if (s.output.size() == 1) {
      stats_.ttft_sum_s += std::chrono::duration<double>(Clock::now() - s.submitted).count();
      ++stats_.ttft_count;
    }
    ++stats_.generated_tokens;
  }

  Finish finish = Finish::Running;
  std::exception_ptr error;
  try {
    if (s.text) {
      e.text = s.text->add(token);
      if (s.text->stopped()) finish = Finish::StopString;
    }
    if (finish == Finish::Running) {
      const auto& stops = s.req.stop_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end())
        finish = Finish::StopToken;
      else if (static_cast<int>(s.output.size()) >= s.req.max_tokens)
        finish = Finish::Length;
      else if (s.pos >= model_.context())
        finish = Finish::ContextFull;
      if (finish != Finish::Running && s.text) e.text += s.text->flush();  // what was held back
    }
  } catch (...) {  // text the tokenizer cannot decode ends this sequence only
    finish = Finish::Error;
    error = std::current_exception();
  }
  s.job->push(std::move(e));
  if (finish != Finish::Running) end(s, finish, error);
}

void Scheduler::end(Sequence& s, Finish f, std::exception_ptr error) {
  Session kept;
  if (s.req.keep_session && s.cache && f != Finish::Error && f != Finish::Cancelled) {
    // The tokens whose KV is cached: the prompt and every generated token but
    // the last (it was sampled, never fed back).
    kept.tokens = s.req.prompt;
    kept.tokens.insert(kept.tokens.end(), s.output.begin(), s.output.end() - (s.output.empty() ? 0 : 1));
    kept.cache = std::move(s.cache);
    // After one token the cache ends at the prompt's end itself.
    if (s.prompt_end && s.prompt_end->length() < kept.cache->length()) kept.prompt_end = std::move(s.prompt_end);
  }
  s.prompt_end.reset();
  s.cache.reset();
  s.ended = true;
  s.job->end(f, std::move(error), std::move(kept));
}

void Scheduler::sweep() {
  for (auto& s : running_)
    if (!s->ended && s->job->cancelled()) end(*s, Finish::Cancelled);
  const ExpertStats xs = model_.expert_stats();  // read here: the provider belongs to the step thread
  std::lock_guard lock(m_);
  stats_.expert_bytes_read = xs.bytes_read;
  stats_.expert_requests = xs.requests;
  stats_.expert_hits = xs.hits;
  std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->ended; });
}

}  // namespace strata
