#pragma once
// Speculative decoding's guessers. A drafter proposes the tokens a sequence
// will probably continue with; the scheduler feeds them to the full model in
// the same step as the sequence's pending token (one row each, positions in
// order), samples every row's logits exactly as it would one at a time
// (runtime/sampler.h), and keeps drafted tokens only while they equal what
// the target picked. So what a sequence outputs never depends on the
// drafter: only how many tokens a step yields does.
//
// Contract:
// - Drafter is shared by the sequences of one scheduler and lives as long
//   as it; start() makes one DraftStream per sequence, used on the step
//   thread only.
// - DraftStream::propose(tokens, max, out) appends at most `max` tokens to
//   `out`, guesses for the tokens after `tokens` (the prompt and every token
//   output so far; the last is the one the next step feeds). Successive
//   calls see the same sequence grown by what was accepted, never changed
//   in its past. Proposing nothing is always allowed; throwing turns
//   drafting off for that sequence (it runs on without).
// - A stream may use the sequence's sampling parameters (runtime/sampler.h:
//   pick_token with the same seed and output index) to guess sampled
//   tokens; `first_index` is the output index of the first token proposed.
// - A stream that wants_hidden() is also handed the target's final hidden
//   state (Model::forward()'s want_hidden) of every position whose token the
//   sequence keeps: observe(tokens, from, hidden) after each step that fed
//   positions [from, from + n) (hidden: n rows of hidden_size), prompt
//   chunks included, in order and each position once; `tokens` then holds
//   the token after each of them. Positions never fed (a session's reused
//   prefix) are skipped: the next `from` lies past them. Before propose()
//   it has been handed every position but the last token's (whose row the
//   next step feeds). Throwing from observe() turns drafting off too.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace strata {

class Model;

class DraftStream {
 public:
  virtual ~DraftStream() = default;
  // Called once, before the first propose(), with the sequence so far (its
  // prompt and first token): a stream with state to catch up (a draft
  // model's cache) does it here, so that propose() costs what drafting
  // costs. Throwing turns drafting off for the sequence.
  virtual void prepare(std::span<const int32_t> tokens) { (void)tokens; }
  virtual void propose(std::span<const int32_t> tokens, uint64_t first_index, int max, std::vector<int32_t>& out) = 0;
  virtual bool wants_hidden() const { return false; }
  virtual void observe(std::span<const int32_t> /*tokens*/, int64_t /*from*/, std::span<const float> /*hidden*/) {}
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // What it is, for stats and logs: "ngram", "model <dir>", "mtp".
  virtual std::string name() const = 0;
  virtual std::unique_ptr<DraftStream> start(const SamplingParams& sampling) = 0;
};

// Context n-grams (prompt lookup): the continuation that followed the most
// recent earlier occurrence of the sequence's last n tokens, for the longest
// n in [min_n, max_n] that occurred before. Costs a hash lookup per call.
std::unique_ptr<Drafter> make_ngram_drafter(int min_n = 2, int max_n = 4);

// A smaller model sharing the target's tokenizer, run one row per step on
// its own caches; proposals follow the sampling parameters' noise (greedy
// under temperature 0). Throws strata::Error when its vocabulary differs
// from `target`'s.
std::unique_ptr<Drafter> make_model_drafter(Model& draft, const Model& target);

// The target's own next-token-prediction layer (DeepSeek-V3's MTP,
// model/mtp_layer.h): each sequence keeps an MTP cache of its kept
// tokens, fed the target's hidden states: the prompt's as they come, later
// ones in a batch when it next proposes, at most 32 waiting (older ones
// dropped: the cache then starts over at those 32); a proposal runs the
// layer once per token, each further token
// on the layer's own output (as vLLM drafts k > 1 with one MTP layer),
// picking as the target's sampler would (the same noise, no penalties).
// Throws strata::Error when `target` has no MTP layer.
std::unique_ptr<Drafter> make_mtp_drafter(Model& target);

}  // namespace strata
