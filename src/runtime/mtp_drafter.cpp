// The target's next-token-prediction layer as a drafter (runtime/drafter.h,
// model/mtp_layer.h). Each sequence has an MTP cache whose row p was fed
// token t_{p+1} and the target's final hidden state h_p, at RoPE position p;
// rows [0, fed_) are the kept sequence's. The last of them gives the logits
// of the token after the pending one, the first proposal; each further
// proposal is one more row on the token just proposed and the previous
// row's output hidden state (the target's h for it does not exist yet), and
// those rows are dropped again once the proposal is made: the next
// observe() writes the real ones over them.
//
// The rows are not fed as the hidden states come: they wait (at most
// kLagRows of them) until the next proposal, and go in as one batch. While
// drafting is off (the draft length control found it does not pay) the
// layer then costs a batched forward every kLagRows tokens instead of a
// one-row forward every token; the cache is the same either way (the
// kernels are batch-invariant), so the proposals are too.
//
// Positions whose hidden state never came (a session's reused prefix: the
// target did not run them this time) are fed a zero state, which hnorm
// keeps zero: the layer sees their tokens alone. Its guesses are then not
// quite the checkpoint's; the output never depends on them.
#include <algorithm>

#include "model/model.h"
#include "runtime/drafter.h"
#include "util/error.h"

namespace strata {

namespace {

// Rows of zero hidden states fed at a time.
constexpr int64_t kZeroRows = 64;
// Kept rows waiting to be fed, at most (then fed, drafting or not).
constexpr int64_t kLagRows = 256;

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
    const int64_t known = fed_ + waiting_rows();
    if (from < known) {  // positions it has already: not the contract's, skipped
      const int64_t skip = std::min(n, known - from);
      h += static_cast<size_t>(skip) * width_;
      n -= skip;
      from += skip;
    }
    if (n <= 0) return;
    if (from + n >= static_cast<int64_t>(tokens.size()))
      throw Error("internal: an MTP stream was handed a hidden state before the token after it");
    if (from > known) {  // a gap (never fed): the waiting rows, then zeros for it
      catch_up(tokens);
      feed(tokens, fed_, from - fed_, nullptr);
    }
    waiting_.insert(waiting_.end(), h, h + static_cast<size_t>(n) * width_);
    if (waiting_rows() >= kLagRows) catch_up(tokens);
  }

  void propose(std::span<const int32_t> tokens, uint64_t first_index, int max, std::vector<int32_t>& out) override {
    catch_up(tokens);
    const int64_t last = static_cast<int64_t>(tokens.size()) - 1;  // the pending token's position
    // The rows up to the pending token's must all be in: else nothing to go on.
    if (fed_ == 0 || fed_ != last) return;
    // Further rows sit at positions last, last + 1, ...
    max = static_cast<int>(std::min<int64_t>(max, cache_->max_positions() - last + 1));
    if (max <= 0) return;
    int32_t t = pick_token(logits_, sampling_, first_index);
    out.push_back(t);
    std::copy(out_.begin(), out_.end(), chain_in_.begin());
    for (int i = 1; i < max; ++i) {
      const Row row{t, last + i - 1, cache_.get(), true};
      model_.mtp_forward(0, std::span<const Row>(&row, 1), chain_in_.data(), chain_logits_.data(), chain_out_.data());
      t = pick_token(chain_logits_, sampling_, first_index + static_cast<uint64_t>(i));
      out.push_back(t);
      chain_in_.swap(chain_out_);
    }
    cache_->set_length(fed_);  // the proposal's own rows go
  }

 private:
  int64_t waiting_rows() const { return static_cast<int64_t>(waiting_.size() / width_); }
  // The waiting rows, fed in batches of at most kLagRows.
  void catch_up(std::span<const int32_t> tokens) {
    for (int64_t at = 0, n = waiting_rows(); at < n; at += kLagRows)
      feed(tokens, fed_, std::min(kLagRows, n - at), waiting_.data() + static_cast<size_t>(at) * width_);
    waiting_.clear();
  }
  // MTP rows [p0, p0 + n): token t_{p+1} and hidden state row p - p0 of
  // `hidden` (null: zeros). Keeps the last row's logits and output.
  void feed(std::span<const int32_t> tokens, int64_t p0, int64_t n, const float* hidden) {
    const int64_t chunk = hidden ? n : kZeroRows;
    if (!hidden) zeros_.assign(static_cast<size_t>(kZeroRows) * width_, 0.0f);
    for (int64_t begin = p0; begin < p0 + n; begin += chunk) {
      const int64_t end = std::min(p0 + n, begin + chunk);
      rows_.clear();
      for (int64_t p = begin; p < end; ++p)
        rows_.push_back(Row{tokens[static_cast<size_t>(p + 1)], p, cache_.get(), p + 1 == p0 + n});
      model_.mtp_forward(0, rows_, hidden ? hidden + static_cast<size_t>(begin - p0) * width_ : zeros_.data(),
                         logits_.data(), out_.data());
    }
    fed_ = p0 + n;
  }

  Model& model_;
  SamplingParams sampling_;
  size_t width_;
  std::unique_ptr<KvCache> cache_;
  int64_t fed_ = 0;  // MTP rows of the kept sequence in cache_
  std::vector<float> waiting_;  // hidden states of rows fed_, fed_ + 1, ... not fed yet
  std::vector<Row> rows_;
  std::vector<float> logits_, out_;  // row fed_ - 1's: its logits and output hidden state
  std::vector<float> chain_logits_, chain_in_, chain_out_;
  std::vector<float> zeros_;
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
