#include "runtime/scheduler.h"

#include "remote/remote_mirror.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "model/model.h"
#include "runtime/drafter.h"
#include "runtime/logprobs.h"
#include "runtime/route_trace.h"
#include "runtime/text_stream.h"
#include "util/error.h"
#include "util/timeline.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
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
  std::vector<int32_t> history;  // prompt + output: what a drafter reads
  bool ended = false;
  // Speculation (null: this sequence does not draft).
  std::unique_ptr<DraftStream> draft;
  bool draft_prepared = false;  // DraftStream::prepare() ran
  bool drafted_last = false;    // the last step had drafted rows (or fed rows again after drafting)
  bool probing = false;         // this step drafts after steps that did not (catching up)
  DraftAcceptance acceptance;
  std::vector<int32_t> drafted;  // this step's, fed after `pending`
  // Kept tokens whose rows were rolled back with a recurrent state: those at
  // positions pos - refeed .. pos - 1, fed again (without logits) before `pending`.
  size_t refeed = 0;
  size_t refed_now = 0;  // of those, fed in the current step
  std::unique_ptr<CacheSnapshot> before_step;  // a recurrent cache before a drafted step
  // A drafter that reads hidden states (MTP): the next position whose state it gets.
  bool hidden = false;
  int64_t hidden_next = 0;
};

Scheduler::Scheduler(Model& model, SchedulerOptions options)
    : model_(model),
      options_{std::max(1, options.max_running), std::max(0, options.max_queue), options.drafter,
               std::max(0, options.draft_max), options.draft_adaptive, options.trace},
      draft_length_(options.drafter ? std::max(0, options.draft_max) : 0, options.draft_adaptive) {
  if (options_.trace) model_.set_route_observer(options_.trace);
}

Scheduler::~Scheduler() {
  for (auto& s : running_)
    if (!s->ended) s->job->end(Finish::Cancelled);
  for (auto& s : queue_) s->job->end(Finish::Cancelled);
  if (options_.trace) model_.set_route_observer(nullptr);
}

bool Scheduler::pass_may_stop() const {
  {
    std::lock_guard lock(m_);
    if (stop_) return true;
  }
  for (const Sequence* s : in_step_)
    if (!s->job->cancelled()) return false;
  return !in_step_.empty();
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
  if (options_.trace) options_.trace->commit();
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
  if (options_.trace) options_.trace->begin_sequence(s.cache.get());
  session = Session{};
  s.computed = reused;
  s.job->reused_tokens_ = static_cast<int64_t>(reused);
  s.job->prefilled_tokens_ = static_cast<int64_t>(reused);
  s.sampler = std::make_unique<Sampler>(s.req.sampling);
  s.sampler->set_prompt(s.req.prompt);
  s.history = s.req.prompt;
  if (options_.drafter && s.req.draft && draft_length_.max() > 0) {
    s.draft = options_.drafter->start(s.req.sampling);
    s.hidden = s.draft->wants_hidden();
    s.acceptance.baseline_left = DraftLength::kBaselineSteps;  // steps without drafts measured first
  }
  if (s.req.tokenizer) s.text = std::make_unique<TextStream>(*s.req.tokenizer, s.req.stop_strings);
}

void Scheduler::draft(Sequence& s, size_t base_rows, size_t sequences, size_t room) {
  s.drafted.clear();
  s.before_step.reset();
  if (!s.draft) return;
  // Kept tokens fed again after a rollback come first, alone: a snapshot
  // taken now would lie before them, and the next rollback would feed them
  // once more.
  if (s.refeed > 0) return;  // (a part of drafting: drafted_last stays)
  // Room: the step emits up to k + 1 tokens, at positions up to pos + k.
  const int64_t room_tokens = static_cast<int64_t>(s.req.max_tokens) - static_cast<int64_t>(s.output.size()) - 1;
  const int64_t room_context = model_.context() - 1 - s.pos;
  const int64_t room_rows = std::min<int64_t>(model_.max_batch_rows() - 1, static_cast<int64_t>(room));
  const DraftAcceptance before = s.acceptance;
  const int chosen = draft_length_.choose(s.acceptance, base_rows, sequences);
  const int64_t k = std::min({static_cast<int64_t>(chosen), room_tokens, room_context, room_rows});
  // No room for what was chosen: as if not asked (a probe that could not run
  // must not count as one that did not pay).
  if (chosen > 0 && k <= 0) s.acceptance = before;
  const bool drafting_on = s.drafted_last;
  s.drafted_last = k > 0;
  s.probing = k > 0 && !drafting_on;
  if (k > 0 && s.acceptance.probed) draft_length_.note_probe(sequences);
  if (k <= 0) return;
  try {
    // A drafter that fails drafts no more for this sequence; the sequence
    // itself, and every other, runs on.
    if (!s.draft_prepared) {
      const auto t0 = Clock::now();
      s.draft->prepare(s.history);  // catching up on the prompt: not a per-token cost
      s.draft_prepared = true;
      std::lock_guard lock(m_);
      stats_.draft_s += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const auto t0 = Clock::now();
    s.draft->propose(s.history, s.sampler->output_count(), static_cast<int>(k), s.drafted);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s.drafted.size() > static_cast<size_t>(k)) s.drafted.resize(static_cast<size_t>(k));
    const int32_t vocab = static_cast<int32_t>(model_.config().vocab_size);
    for (int32_t t : s.drafted)
      if (t < 0 || t >= vocab) throw Error("proposed token id " + std::to_string(t) + ", outside the vocabulary");
    // What a proposal costs while drafting goes on (a probe after idle
    // steps also catches up on them all). Taking the hidden states (an MTP
    // layer fed every kept token) is paid drafting or not: it is in the
    // step's time (forward_step), not here.
    if (drafting_on) draft_length_.record_draft(dt, static_cast<int>(s.drafted.size()));
    std::lock_guard lock(m_);
    stats_.draft_s += dt;
  } catch (const std::exception& e) {
    stop_drafting(s, e);
    return;
  }
  // A recurrent state cannot rewind past a rejected token: keep the way back.
  if (!s.drafted.empty() && s.cache->keeps_state()) s.before_step = s.cache->snapshot();
}

void Scheduler::stop_drafting(Sequence& s, const std::exception& e) {
  std::fprintf(stderr, "strata: warning: the drafter failed (%s); this sequence goes on without drafting\n", e.what());
  s.drafted.clear();
  s.draft.reset();
  s.hidden = false;
}

void Scheduler::forward_step() {
  const auto step_begin = Clock::now();
  rows_.clear();
  logit_owners_.clear();
  hidden_owners_.clear();
  in_step_.clear();
  size_t base_rows = 0;  // one per decoding sequence, and rows fed again
  bool prefilling = false;
  bool outcome_drafted = false, outcome_probe = false;
  size_t decoding = 0;  // sequences
  for (auto& s : running_)
    if (!s->ended) {
      if (s->decoding) {
        base_rows += 1 + s->refeed;
        ++decoding;
      }
      else prefilling = true;
    }
  if (decoding > 0) draft_length_.begin_step();
  // Drafted rows leave half the step to prompts waiting for their prefill.
  const size_t step_rows = static_cast<size_t>(model_.max_batch_rows());
  size_t draft_room = prefilling ? (step_rows / 2 > base_rows ? step_rows / 2 - base_rows : 0) : step_rows;
  for (auto& s : running_)
    if (!s->ended && s->decoding) {
      draft(*s, base_rows, decoding, draft_room);
      draft_room -= std::min(draft_room, s->drafted.size());
      // The step's outcome counts for drafting (rows fed again after a
      // rollback are drafting's cost too), unless a sequence catches up.
      // (A probe's rollback, fed again in the next step, is the probe's.)
      if ((!s->drafted.empty() || s->refeed > 0) && s->probing) outcome_probe = true;
      if (!s->drafted.empty() || s->refeed > 0) outcome_drafted = true;
      s->refed_now = s->refeed;
      const bool hidden = s->hidden && s->draft;  // a drafter that failed reads no more
      const bool pick = picks_only(*s);
      for (size_t i = s->refeed; i > 0; --i) {
        const int64_t at = s->pos - static_cast<int64_t>(i);
        rows_.push_back(Row{s->history[static_cast<size_t>(at)], at, s->cache.get(), false, hidden});
      }
      rows_.push_back(Row{s->pending, s->pos, s->cache.get(), true, hidden, pick});
      for (size_t j = 0; j < s->drafted.size(); ++j)
        rows_.push_back(Row{s->drafted[j], s->pos + 1 + static_cast<int64_t>(j), s->cache.get(), true, hidden, pick});
      logit_owners_.emplace_back(s.get(), 1 + s->drafted.size());
      in_step_.push_back(s.get());
      if (hidden)
        hidden_owners_.push_back({s.get(), s->pos - static_cast<int64_t>(s->refeed), s->refeed + 1 + s->drafted.size()});
    }
  const size_t decode_rows = rows_.size();
  // Prompt rows: with none decoding, a pass of max_pass_rows (each streamed
  // layer's experts read once for all of it: Model::forward); with others
  // decoding, a chunk of max_batch_rows per sequence and no more than
  // max_batch_rows rows in all (the decode rows go first so they never wait,
  // and a long prompt's pass does not hold their tokens back).
  const size_t chunk = static_cast<size_t>(decode_rows > 0 ? model_.max_batch_rows() : model_.max_pass_rows());
  size_t budget = decode_rows < chunk ? chunk - decode_rows : 1;
  for (auto& s : running_) {
    if (s->ended || s->decoding || budget == 0) continue;
    const auto& prompt = s->req.prompt;
    const size_t n = std::min({prompt.size() - s->computed, chunk, budget});
    const bool pick = picks_only(*s);
    for (size_t i = s->computed; i < s->computed + n; ++i) {
      const bool last = i + 1 == prompt.size();
      rows_.push_back(Row{prompt[i], static_cast<int64_t>(i), s->cache.get(), last, s->hidden, last && pick});
      if (last) logit_owners_.emplace_back(s.get(), 1);
    }
    if (s->hidden && n > 0) hidden_owners_.push_back({s.get(), static_cast<int64_t>(s->computed), n});
    if (n > 0) in_step_.push_back(s.get());
    s->computed += n;
    budget -= n;
  }
  if (rows_.empty()) return;

  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  size_t logit_rows = 0;
  for (const auto& [s, n] : logit_owners_) logit_rows += n;
  logits_.resize(logit_rows * vocab);
  picks_.assign(logit_rows, LogitPick{});
  size_t hidden_rows = 0;
  for (const HiddenRows& o : hidden_owners_) hidden_rows += o.count;
  hidden_.resize(hidden_rows * static_cast<size_t>(model_.config().hidden_size));
  const auto t0 = Clock::now();
  try {
    // The check lives as long as this forward: in_step_ is this step's.
    struct Scoped {
      Model& model;
      ~Scoped() { model.set_pass_stop({}); }
    } scoped{model_};
    model_.set_pass_stop([this] { return pass_may_stop(); });
    model_.forward(rows_, logits_.data(), hidden_.data(), picks_.data());
  } catch (const PassStopped&) {
    // Every sequence in the pass was cancelled (or the scheduler stops):
    // they end now, not after the rest of a long prompt's layers.
    for (Sequence* s : in_step_)
      if (!s->ended) end(*s, Finish::Cancelled);
    return;
  }
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& s : running_)
    if (!s->ended && !s->decoding) s->job->prefilled_tokens_ = static_cast<int64_t>(s->computed);
  uint64_t emitted = 0;
  size_t row = 0;
  {
    const timeline::Scope sample_span("step", "sample");  // the tokens picked, checked and handed out
    for (const auto& [sp, n] : logit_owners_) {
      Sequence& s = *sp;
      const float* logits = &logits_[row * vocab];
      const LogitPick* picks = picks_only(s) ? &picks_[row] : nullptr;
      row += n;
      const size_t before = s.output.size();
      if (s.decoding) {
        verify(s, logits, picks, n);
      } else {
        s.decoding = true;
        s.pos = static_cast<int64_t>(s.req.prompt.size());
        // The prompt is all in the cache: where a chat's next prompt departs
        // from this sequence (it re-templates the answer). A recurrent state
        // cannot rewind there later, so it is kept now.
        if (s.req.keep_session && s.cache->keeps_state()) s.prompt_end = s.cache->snapshot();
        {
          std::lock_guard lock(m_);
          stats_.prompt_tokens += s.req.prompt.size();
        }
        std::exception_ptr error;
        const Finish f = emit(s, logits, picks, error);
        if (f != Finish::Running) end(s, f, error);
      }
      emitted += s.output.size() - before;
    }
  }
  hand_hidden_states();
  // The first steps without drafts after drafting are not fair samples
  // (the drafter's weights are in the CPU's caches, not the target's): a
  // run of them is counted over every step, prompt chunks or not.
  off_run_ = outcome_drafted || outcome_probe ? 0 : off_run_ + 1;
  // What a row costs the draft length is the whole step's: the forward and,
  // per row, sampling, verifying and handing out (in a small model those
  // are a large share).
  const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::lock_guard lock(m_);
  ++stats_.steps;
  stats_.forward_s += dt;
  if (rows_.size() == decode_rows && dt > 0) {
    stats_.decode_tok_s = 0.8 * stats_.decode_tok_s + 0.2 * (static_cast<double>(emitted) / dt);
    draft_length_.record_step(decode_rows, step_s);
    // Kept apart by the number of sequences: per-token times of steps with
    // different numbers of them do not compare.
    if (!outcome_probe && (outcome_drafted || off_run_ >= 3))
      draft_length_.record_outcome(outcome_drafted,
                                   std::chrono::duration<double>(Clock::now() - step_begin).count(), emitted,
                                   decoding);
  }
}

void Scheduler::verify(Sequence& s, const float* logits, const LogitPick* picks, size_t n) {
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  const int64_t pos0 = s.pos;  // where `pending` was fed
  const size_t drafted = n - 1;
  size_t accepted = 0;
  bool rejected = false;  // a drafted token was compared and differed
  Finish f = Finish::Running;
  std::exception_ptr error;
  const size_t before = s.output.size();
  for (size_t j = 0; j < n; ++j) {
    s.pos = pos0 + static_cast<int64_t>(j) + 1;  // where the token emitted now will be fed
    f = emit(s, logits + j * vocab, picks ? picks + j : nullptr, error);
    const bool emitted = s.output.size() > before + j;
    if (j < drafted && emitted && s.output.back() == s.drafted[j]) {
      ++accepted;
    } else {
      rejected = j < drafted && emitted;
      break;
    }
    if (f != Finish::Running) break;
  }
  const int64_t kept = static_cast<int64_t>(s.output.size() - before);  // tokens emitted
  s.pos = pos0 + kept;
  // Rows pos0 .. pos0 + kept - 1 hold `pending` and the drafted tokens kept;
  // what was fed after them goes.
  if (drafted > 0 && kept > 0 && s.cache->length() != s.pos) {
    if (s.cache->can_rewind_to(s.pos)) {
      s.cache->set_length(s.pos);
      s.refeed = 0;
    } else {
      if (!s.before_step) throw Error("internal: a recurrent cache was drafted into without a snapshot");
      s.cache->restore(*s.before_step);
      s.refeed = static_cast<size_t>(s.pos - s.cache->length());
    }
  } else {
    s.refeed = 0;
  }
  s.before_step.reset();
  if (options_.trace) {
    // Each kept position once: not the rows computed again after a
    // rollback, not the drafted rows that were not kept.
    options_.trace->discard(s.cache.get(), pos0 - static_cast<int64_t>(s.refed_now), pos0);
    options_.trace->discard(s.cache.get(), pos0 + kept, INT64_MAX);
  }
  s.refed_now = 0;
  if (drafted > 0) {
    s.acceptance.record(static_cast<int>(accepted + (rejected ? 1 : 0)), static_cast<int>(accepted));
    s.job->drafted_tokens_ += static_cast<int64_t>(drafted);
    s.job->accepted_tokens_ += static_cast<int64_t>(accepted);
    ++s.job->draft_steps_;
    std::lock_guard lock(m_);
    stats_.drafted_tokens += drafted;
    stats_.accepted_tokens += accepted;
  }
  if (f != Finish::Running) end(s, f, error);
}

void Scheduler::hand_hidden_states() {
  const size_t width = static_cast<size_t>(model_.config().hidden_size);
  size_t at = 0;
  double spent = 0;
  for (const auto& [sp, first, count] : hidden_owners_) {
    Sequence& s = *sp;
    const float* states = &hidden_[at * width];
    at += count;
    if (s.ended || !s.draft) continue;
    // Kept: the prompt chunks fed so far, or the rows up to the new pending token.
    const int64_t kept = s.decoding ? s.pos : static_cast<int64_t>(s.computed);
    const int64_t from = std::max(first, s.hidden_next), to = std::min(first + static_cast<int64_t>(count), kept);
    if (to <= from) continue;
    const auto t0 = Clock::now();
    try {
      s.draft->observe(s.history, from,
                       std::span<const float>(states + static_cast<size_t>(from - first) * width,
                                              static_cast<size_t>(to - from) * width));
    } catch (const std::exception& e) {
      stop_drafting(s, e);
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    spent += dt;
    s.hidden_next = to;
  }
  if (spent > 0) {
    std::lock_guard lock(m_);
    stats_.draft_s += spent;
  }
}

bool Scheduler::picks_only(const Sequence& s) {
  return s.sampler && s.sampler->plain_greedy() && s.req.top_logprobs < 0 && !s.req.keep_logits;
}

Finish Scheduler::emit(Sequence& s, const float* logits, const LogitPick* pick, std::exception_ptr& error) {
  const std::span<const float> row(logits, static_cast<size_t>(model_.config().vocab_size));
  // NaN or Inf here comes from the weights or the config (or an overflow):
  // sampling would pick a token from garbage (greedy: the first one) and
  // carry on as if nothing happened. This sequence ends with the reason.
  // Without a pick from the step, one pass over the row finds both (and the
  // greedy choice with it).
  const LogitPick found = pick ? *pick : largest_logit(row);
  if (const size_t bad = found.non_finite; bad > 0) {
    error = std::make_exception_ptr(Error("non-finite logits at position " + std::to_string(s.pos - 1) + " (" +
                                          std::to_string(bad) + " of " + std::to_string(row.size()) +
                                          " values are NaN or Inf): the model's weights or config hold NaN/Inf"));
    return Finish::Error;
  }
  int32_t token = 0;
  if (s.sampler->plain_greedy()) {
    token = found.id;
    s.sampler->take(token);
  } else {
    token = s.sampler->next(row);
  }
  TokenEvent e;
  e.token = token;
  if (s.req.top_logprobs >= 0) {
    TokenLogprobs lp = token_logprobs(row, token, s.req.top_logprobs);
    e.logprob = lp.logprob;
    e.top = std::move(lp.top);
  }
  if (s.req.keep_logits) e.logits.assign(row.begin(), row.end());
  s.output.push_back(token);
  s.history.push_back(token);
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
  return finish;
}

void Scheduler::end(Sequence& s, Finish f, std::exception_ptr error) {
  if (options_.trace && s.cache) options_.trace->end_sequence(s.cache.get());
  Session kept;
  if (s.req.keep_session && s.cache && f != Finish::Error && f != Finish::Cancelled) {
    // The tokens whose KV is cached: the prompt and the generated tokens fed
    // back (all but the last; fewer when a recurrent state was rolled back).
    const auto cached = static_cast<size_t>(std::max<int64_t>(0, s.cache->length()));
    kept.tokens.assign(s.history.begin(), s.history.begin() + static_cast<long>(std::min(cached, s.history.size())));
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
  stats_.remote_bytes = 0;
  stats_.remote_s = 0;
  stats_.remote_fetched_reads = stats_.remote_local_reads = 0;
  stats_.remote_wait_s = 0;
  for (const auto& d : xs.drives)
    if (d.name.starts_with(kRemoteDrivePrefix)) {
      stats_.remote_bytes += d.bytes;
      stats_.remote_s += d.busy_s;
      stats_.remote_fetched_reads += d.fetched_reads;
      stats_.remote_local_reads += d.local_reads;
      stats_.remote_wait_s += d.fetch_wait_s;
    }
  stats_.expert_requests = xs.requests;
  stats_.expert_hits = xs.hits;
  std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->ended; });
}

}  // namespace strata
