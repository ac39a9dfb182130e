// A draft model (runtime/drafter.h): each sequence has its own cache in the
// draft model, kept in step with the tokens the sequence has (rewound to
// where they part after a rejection), and proposes by running the draft
// model one row at a time, picking as the target's sampler would (the same
// noise, no penalties).
//
// A proposal after steps without drafting (a probe of the draft length
// control) does not catch up on every token since the last one: more than
// kWindowTokens behind, the cache starts over at the last kWindowTokens
// tokens (at positions from 0: RoPE sees the same distances, the model less
// context), so that drafting costs nothing while it is off and a probe at
// most a window. So does a recurrent draft model after a rejection (its
// state cannot rewind) and one near the end of its context. The output
// never depends on it; only how much is accepted.
#include <algorithm>

#include "model/model.h"
#include "runtime/drafter.h"
#include "util/error.h"

namespace strata {

namespace {

constexpr int64_t kWindowTokens = 32;

class ModelStream final : public DraftStream {
 public:
  ModelStream(Model& draft, const SamplingParams& sampling) : draft_(draft), sampling_(sampling) {
    // Penalties and biases are the target's to apply; the guess is plain.
    sampling_.logit_bias.clear();
  }

  // The prompt into the draft model's cache (all but the last token, whose
  // logits the first propose() needs).
  void prepare(std::span<const int32_t> tokens) override {
    // (A prompt near the end of the draft model's context is left to the
    // first proposal, which starts at its last window.)
    if (tokens.size() < 2 || static_cast<int64_t>(tokens.size()) + kWindowTokens > draft_.context()) return;
    cache_ = draft_.new_cache();
    logits_.resize(static_cast<size_t>(draft_.config().vocab_size));
    const auto head = tokens.first(tokens.size() - 1);
    draft_.prefill(head, 0, *cache_, logits_.data());
    cached_.assign(head.begin(), head.end());
  }

  void propose(std::span<const int32_t> tokens, uint64_t first_index, int max, std::vector<int32_t>& out) override {
    if (max <= 0 || tokens.empty()) return;
    const int64_t L = static_cast<int64_t>(tokens.size());
    // Keep what the cache holds of `tokens` (from base_ on), all but the
    // last at most (its logits are needed).
    size_t common = 0;
    const auto tail = base_ < L ? tokens.subspan(static_cast<size_t>(base_)) : std::span<const int32_t>();
    while (common < cached_.size() && common + 1 < tail.size() && cached_[common] == tail[common]) ++common;
    const bool behind = L - (base_ + static_cast<int64_t>(common)) > kWindowTokens;
    const bool full = L - base_ + max > draft_.context();
    // Start over at the last window: far behind, near the end of the draft
    // model's context, or a cache that cannot rewind to where the sequence
    // parted from it (a recurrent state).
    if (!cache_ || behind || full || !cache_->can_rewind_to(static_cast<int64_t>(common))) {
      base_ = std::max<int64_t>(0, L - kWindowTokens);
      cache_ = draft_.new_cache();
      common = 0;
    }
    const auto fed = tokens.subspan(static_cast<size_t>(base_));
    const int64_t n = static_cast<int64_t>(fed.size());
    max = static_cast<int>(std::min<int64_t>(max, draft_.context() - n));
    if (max <= 0) return;  // the draft model's context is shorter than a window and a token
    cache_->set_length(static_cast<int64_t>(common));
    cached_.assign(fed.begin(), fed.end());
    logits_.resize(static_cast<size_t>(draft_.config().vocab_size));
    draft_.prefill(fed, common, *cache_, logits_.data());
    for (int i = 0;; ++i) {
      const int32_t t = pick_token(logits_, sampling_, first_index + static_cast<uint64_t>(i));
      out.push_back(t);
      if (i + 1 == max) break;
      const Row row{t, n + i, cache_.get(), true};
      draft_.forward(std::span<const Row>(&row, 1), logits_.data());
      cached_.push_back(t);
    }
  }

 private:
  Model& draft_;
  SamplingParams sampling_;
  std::unique_ptr<KvCache> cache_;
  int64_t base_ = 0;              // the position in the sequence of cache_'s row 0
  std::vector<int32_t> cached_;  // the tokens whose rows cache_ holds (from base_)
  std::vector<float> logits_;
};

class ModelDrafter final : public Drafter {
 public:
  explicit ModelDrafter(Model& draft) : draft_(draft) {}
  std::string name() const override { return "model " + draft_.dir().string(); }
  std::unique_ptr<DraftStream> start(const SamplingParams& sampling) override {
    return std::make_unique<ModelStream>(draft_, sampling);
  }

 private:
  Model& draft_;
};

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(Model& draft, const Model& target) {
  if (draft.config().vocab_size != target.config().vocab_size)
    throw Error("draft model " + draft.dir().string() + " has a vocabulary of " +
                std::to_string(draft.config().vocab_size) + " tokens but the model it drafts for has " +
                std::to_string(target.config().vocab_size) + ": a draft model must share the tokenizer");
  return std::make_unique<ModelDrafter>(draft);
}

}  // namespace strata
