#pragma once
// The one step loop. The CLI (`generate`, a one-sequence client), the server
// and later the drafter all run sequences through a Scheduler:
//
//   submit(Request) -> Job          any thread; checks the request at once
//   step()                          the step thread only: one forward pass
//   run() / stop()                  a step thread that sleeps while idle
//   stats()                         any thread: a copy, never blocks a step
//
// Contract:
// - Each step is one Model::forward over a batch of rows: one row per
//   decoding sequence, plus prompt chunks of sequences still prefilling, in
//   admission order: with none decoding, up to max_pass_rows() prompt rows
//   in all (one pass, layer by layer); while others decode, at most
//   max_batch_rows() prompt rows of one sequence and no more than
//   max_batch_rows() rows in all (the decode rows go first; at least one
//   prompt row still runs).
//   Kernels are batch-invariant, so a sequence's tokens and logits are the
//   same bits whether it runs alone, in chunks, or beside others.
// - Each sequence samples with its own Sampler, seeded by its request and fed
//   its prompt, exactly as a lone run: the same seed, the same output.
// - Speculation (options.drafter): a decoding sequence whose request allows
//   it gets up to k drafted tokens fed after its pending one in the same
//   step (k from runtime/draft_length.h, at most draft_max); its rows'
//   logits are sampled in order and drafted tokens kept while they equal
//   what was sampled, so the output is what it would be without a drafter.
//   The cache is then rewound to the tokens kept (a recurrent state is
//   restored from a snapshot taken before the step and the kept tokens are
//   fed again, without logits, in the next step). A drafter that reads the
//   target's hidden states (MTP) gets, after each step, those of the rows
//   the sequence kept, prompt rows included (DraftStream::observe()).
// - A sequence ends after emitting a stop id, when its text reaches a stop
//   string, at max_tokens, when the next position would pass the context,
//   when cancelled (checked at every step, and before each layer of a long
//   prompt's pass: a pass whose sequences are all cancelled, or a scheduler
//   told to stop, ends there: Model::set_pass_stop), or on an error; its KV cache and
//   slot are freed at that step. A failure inside the shared forward pass
//   ends every running sequence with that error.
// - Up to max_running sequences run at once; up to max_queue more wait, in
//   order; submit() throws QueueFull beyond that.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/batch.h"
#include "runtime/draft_length.h"
#include "runtime/request.h"

namespace strata {

class Model;
class Drafter;
class RouteTrace;

struct SchedulerOptions {
  int max_running = 8;  // sequences decoded together
  int max_queue = 64;   // waiting beyond those
  Drafter* drafter = nullptr;  // speculation off without one; it outlives the scheduler
  int draft_max = 8;           // tokens drafted per sequence and step, at most
  bool draft_adaptive = true;  // false: always draft_max (where there is room)
  // Router traces (runtime/route_trace.h): set as the model's route observer
  // while the scheduler lives; it outlives the scheduler.
  RouteTrace* trace = nullptr;
};

// A snapshot of the scheduler's counters, copied out under a lock: a
// dashboard or /metrics reads it without touching the step thread.
struct SchedulerStats {
  uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0, steps = 0;
  double ttft_sum_s = 0;  // submit to first token
  uint64_t ttft_count = 0;
  double decode_tok_s = 0;  // moving average over recent steps without prompt rows
  size_t queued = 0, running = 0;
  // The model's expert counters, read on the step thread after each step.
  uint64_t expert_bytes_read = 0, expert_requests = 0, expert_hits = 0;
  // A streaming install's source (remote/remote_mirror.h): bytes fetched,
  // the time with a fetch in flight, expert reads that waited for a fetch
  // (and their summed wait) and reads whose bytes were on the drive.
  uint64_t remote_bytes = 0, remote_fetched_reads = 0, remote_local_reads = 0;
  double remote_s = 0, remote_wait_s = 0;
  // Speculation: tokens drafted and fed, of those kept; seconds in the
  // drafter and in forward steps.
  uint64_t drafted_tokens = 0, accepted_tokens = 0;
  double draft_s = 0, forward_s = 0;
};

class QueueFull : public std::exception {
 public:
  const char* what() const noexcept override { return "the request queue is full"; }
};

class Scheduler {
 public:
  Scheduler(Model& model, SchedulerOptions options = {});
  // Ends what is still queued or running as cancelled; stop the step thread first.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Throws strata::Error for an empty prompt, a token id
  // outside the vocabulary, a prompt longer than the context, max_tokens < 1,
  // bad sampling parameters (a logit_bias id outside the vocabulary too) or
  // stop strings without a tokenizer; QueueFull
  // when max_queue requests already wait.
  std::shared_ptr<Job> submit(Request request);

  // Admits waiting requests, runs one forward pass, samples and ends
  // sequences. Returns whether anything is still queued or running.
  bool step();
  // Steps until stop(), sleeping while there is nothing to do.
  void run();
  void stop();

  SchedulerStats stats() const;

 private:
  struct Sequence;
  void admit();
  void start(Sequence& s);
  // Samples from `logits` (or takes `pick`, the row's largest logit, where
  // the row was pick_only), hands the token to the job, says whether the
  // sequence ends (the caller ends it).
  Finish emit(Sequence& s, const float* logits, const LogitPick* pick, std::exception_ptr& error);
  // Whether a sequence's rows need only their largest logit (Row::pick_only):
  // greedy with nothing adjusting the logits, no logprobs, no logits kept.
  static bool picks_only(const Sequence& s);
  // Asks the sequence's drafter for this step's tokens, at most `room`;
  // `base_rows`: the step's rows without drafts (what the draft length
  // weighs them against), `sequences` the decoding sequences in it.
  void draft(Sequence& s, size_t base_rows, size_t sequences, size_t room);
  // A drafter that failed (`e`, said once on stderr) drafts no more for `s`;
  // the sequence, and every other, runs on.
  void stop_drafting(Sequence& s, const std::exception& e);
  // Samples a decoding sequence's `n` rows of logits (pending + drafted),
  // keeps what matches, rewinds its cache to what was kept.
  void verify(Sequence& s, const float* logits, const LogitPick* picks, size_t n);
  void end(Sequence& s, Finish f, std::exception_ptr error = nullptr);
  // Ends every running sequence that has not ended with `error`.
  void fail_running(const std::exception_ptr& error);
  void forward_step();
  // Drops ended and cancelled sequences; refreshes the expert counters.
  void sweep();
  // Whether the pass running now may end early: the scheduler stops, or
  // every sequence with rows in it was cancelled (asked on the step thread).
  bool pass_may_stop() const;

  Model& model_;
  const SchedulerOptions options_;
  mutable std::mutex m_;  // guards queue_, the size of running_, stats_, stop_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  std::vector<std::unique_ptr<Sequence>> running_;  // changed by the step thread only
  SchedulerStats stats_;
  bool stop_ = false;
  // Step buffers, kept between steps.
  std::vector<Row> rows_;
  // Each sequence with logits rows in this step and how many, in row order.
  std::vector<std::pair<Sequence*, size_t>> logit_owners_;
  std::vector<Sequence*> in_step_;  // every sequence with rows in this step
  // Each sequence whose drafter reads hidden states: its rows' first
  // position and count, in row order (their states are in hidden_).
  struct HiddenRows {
    Sequence* seq;
    int64_t first;
    size_t count;
  };
  std::vector<HiddenRows> hidden_owners_;
  // Hands each drafter the hidden states of the rows its sequence kept.
  void hand_hidden_states();
  DraftLength draft_length_;
  int off_run_ = 0;  // decode steps in a row without drafts (runtime/draft_length.h)
  std::vector<float> logits_;
  std::vector<LogitPick> picks_;  // one per logit row, where its row is pick_only
  std::vector<float> hidden_;
};

}  // namespace strata
