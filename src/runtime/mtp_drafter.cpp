// The target's next-token-prediction layer as a drafter (runtime/drafter.h,
// model/mtp_layer.h). Each sequence has an MTP cache whose rows were fed
// token t_{p+1} and the target's final hidden state h_p for the positions p
// of a stretch of the kept sequence, [base_, fed_); the last of them gives
// the logits of the token after the pending one, the first proposal; each
// further proposal is one more row on the token just proposed and the
// previous row's output hidden state (the target's h for it does not exist
// yet), and those rows are dropped again once the proposal is made: the
// next rows fed write over them.
//
// The prompt's rows go in as they come. Later rows are not fed as the
// hidden states come: they wait until the next proposal and go in as one
// batch, and at most kWindowRows of them wait.
// While drafting is off (the draft length control found it does not pay)
// older ones are dropped, and the next proposal (a probe) starts the cache
// over at the rows still waiting, so that the layer costs nothing while it
// is not used and a probe costs kWindowRows rows at most. A cache started
// over holds its rows at positions p - base_: RoPE sees the same distances,
// the layer less context. Positions whose hidden state never came (a
// session's reused prefix) start the cache over in the same way. The
// output never depends on any of this; only how much is accepted does.
#include <algorithm>

#include "model/model.h"
#include "runtime/drafter.h"
#include "util/error.h"

namespace strata {

namespace {

// Kept rows waiting to be fed, at most: older ones are dropped.
constexpr int64_t kWindowRows = 32;

class MtpStream final : public DraftStream {
 public:
  MtpStream(Model& target, const SamplingParams& sampling)
      : model_(target),
        sampling_(sampling),
        width_(static_cast<size_t>(target.config().hidden_size)),
        cache_(target.new_mtp_cache()),
        logits_(static_cast<size_t>(target.config().vocab_size)),
        out_(width_),
        chain_logits_(logits_.size()),
        chain_in_(width_),
        chain_out_(width_) {
    // Penalties and biases are the target's to apply; the guess is plain.
    sampling_.logit_bias.clear();
  }

  bool wants_hidden() const override { return true; }

  void observe(std::span<const int32_t> tokens, int64_t from, std::span<const float> hidden) override {
    int64_t n = static_cast<int64_t>(hidden.size() / width_);
    const float* h = hidden.data();
    const int64_t known = wait_from_ + waiting_rows();
    if (from < known) {  // positions it has already: not the contract's, skipped
      const int64_t skip = std::min(n, known - from);
      h += static_cast<size_t>(skip) * width_;
      n -= skip;
      from += skip;
    }
    if (n <= 0) return;
    if (from + n >= static_cast<int64_t>(tokens.size()))
      throw Error("internal: an MTP stream was handed a hidden state before the token after it");
    if (from > known) {  // a gap: what came before it is of no use
      waiting_.clear();
      wait_from_ = from;
    }
    waiting_.insert(waiting_.end(), h, h + static_cast<size_t>(n) * width_);
    // The prompt goes in whole (as a draft model's prepare() catches up on
    // it), its last rows once it is all there (then the rows reach the
    // token before the pending one); later, only a window waits.
    if (!prompt_in_) {
      prompt_in_ = from + n + 1 == static_cast<int64_t>(tokens.size());
      if (prompt_in_ || waiting_rows() >= kWindowRows) catch_up(tokens);
      return;
    }
    if (const int64_t excess = waiting_rows() - kWindowRows; excess > 0) {
      waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(excess * static_cast<int64_t>(width_)));
      wait_from_ += excess;
    }
  }

  void propose(std::span<const int32_t> tokens, uint64_t first_index, int max, std::vector<int32_t>& out) override {
    prompt_in_ = true;
    catch_up(tokens);
    const int64_t last = static_cast<int64_t>(tokens.size()) - 1;  // the pending token's position
    // The rows up to the pending token's must all be in: else nothing to go on.
    if (fed_ == base_ || fed_ != last) return;
    // Further rows sit at positions last, last + 1, ... (less base_ in the cache)
    max = static_cast<int>(std::min<int64_t>(max, cache_->max_positions() - (last - base_) + 1));
    if (max <= 0) return;
    int32_t t = pick_token(logits_, sampling_, first_index);
    out.push_back(t);
    std::copy(out_.begin(), out_.end(), chain_in_.begin());
    for (int i = 1; i < max; ++i) {
      const Row row{t, last + i - 1 - base_, cache_.get(), true};
      model_.mtp_forward(0, std::span<const Row>(&row, 1), chain_in_.data(), chain_logits_.data(), chain_out_.data());
      t = pick_token(chain_logits_, sampling_, first_index + static_cast<uint64_t>(i));
      out.push_back(t);
      chain_in_.swap(chain_out_);
    }
    cache_->set_length(fed_ - base_);  // the proposal's own rows go
  }

 private:
  int64_t waiting_rows() const { return static_cast<int64_t>(waiting_.size() / width_); }
  // The waiting rows into the cache, in one batch; after a gap (rows
  // dropped or never handed over) the cache starts over at them.
  void catch_up(std::span<const int32_t> tokens) {
    const int64_t n = waiting_rows();
    if (n == 0) return;
    if (wait_from_ != fed_) {
      cache_->set_length(0);
      base_ = fed_ = wait_from_;
    }
    rows_.clear();
    for (int64_t p = fed_; p < fed_ + n; ++p)
      rows_.push_back(Row{tokens[static_cast<size_t>(p + 1)], p - base_, cache_.get(), p + 1 == fed_ + n});
    model_.mtp_forward(0, rows_, waiting_.data(), logits_.data(), out_.data());
    fed_ += n;
    wait_from_ = fed_;
    waiting_.clear();
  }

  Model& model_;
  SamplingParams sampling_;
  size_t width_;
  std::unique_ptr<KvCache> cache_;
  // cache_ holds the kept positions [base_, fed_) at rows [0, fed_ - base_).
  int64_t base_ = 0, fed_ = 0;
  std::vector<float> waiting_;  // hidden states of positions wait_from_, wait_from_ + 1, ... not fed yet
  int64_t wait_from_ = 0;
  bool prompt_in_ = false;  // the prompt's rows are all in: from now on only a window waits
  std::vector<Row> rows_;
  std::vector<float> logits_, out_;  // row fed_ - 1's: its logits and output hidden state
  std::vector<float> chain_logits_, chain_in_, chain_out_;
};

class MtpDrafter final : public Drafter {
 public:
  explicit MtpDrafter(Model& target) : target_(target) {}
  std::string name() const override { return "mtp"; }
  std::unique_ptr<DraftStream> start(const SamplingParams& sampling) override {
    return std::make_unique<MtpStream>(target_, sampling);
  }

 private:
  Model& target_;
};

}  // namespace

std::unique_ptr<Drafter> make_mtp_drafter(Model& target) {
  if (target.mtp_layers().empty())
    throw Error(target.dir().string() +
                " has no next-token-prediction (MTP) layer to draft with (num_nextn_predict_layers is 0): --draft "
                "mtp needs a checkpoint that ships one, as DeepSeek-V3's does");
  return std::make_unique<MtpDrafter>(target);
}

}  // namespace strata
