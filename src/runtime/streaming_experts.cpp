#include "runtime/streaming_experts.h"

#include <algorithm>
#include <cerrno>
#include <limits>
#include <tuple>

#include "kernels/interleave.h"
#include "model/expert_layout.h"
#include "remote/remote_mirror.h"
#include "storage/checksum.h"
#include "util/error.h"
#include "util/timeline.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kReadsPerSlot = 256;  // tag = slot * kReadsPerSlot + read

// The matrices read into a slot take the interleaved layout where their
// format has one, exactly as the in-memory provider gives them, so a token's
// bits never depend on where its experts came from.
bool has_interleaved_layout(ExpertWeights& w) {
  for (kernels::WeightMatrix* m : w.matrices())
    if (kernels::interleavable(*m)) return true;
  return false;
}

}  // namespace

// One layer's request: positions ready to hand out, positions whose reads are
// in flight, and positions still waiting for a free slot.
class StreamingExpertProvider::Fetch : public ExpertFetch {
 public:
  Fetch(StreamingExpertProvider& p, int64_t layer) : p_(p), layer_(layer) {}
  ~Fetch() override { end(); }
  void end() override {
    for (int s : held_) --p_.slots_[s].users;
    held_.clear();
    p_.waiting_ -= waiting_.size();
    waiting_.clear();
    loading_.clear();
    handed_.clear();
  }

  size_t next_batch(std::vector<std::pair<int, const ExpertWeights*>>& out, size_t max) override {
    try {
      return take_ready(out, max);
    } catch (...) {
      p_.abandon_reads_in_flight();  // the step fails here
      throw;
    }
  }

  void hold(int pos, int slot) {
    ++p_.slots_[slot].users;
    held_.push_back(slot);
    loading_.emplace_back(pos, slot);
  }
  void defer(int pos, int32_t expert) {
    waiting_.emplace_back(pos, expert);
    ++p_.waiting_;
  }

 private:
  size_t take_ready(std::vector<std::pair<int, const ExpertWeights*>>& out, size_t max) {
    out.clear();
    for (int s : handed_) release(s);  // the caller is done with the last batch
    handed_.clear();
    while (max > 0) {
      top_up();
      for (size_t i = 0; i < loading_.size() && out.size() < max;) {
        const auto [pos, slot] = loading_[i];
        if (p_.slots_[slot].state != State::Ready) {
          ++i;
          continue;
        }
        loading_.erase(loading_.begin() + static_cast<long>(i));
        handed_.push_back(slot);
        out.emplace_back(pos, &p_.slots_[slot].weights);
      }
      if (!out.empty() || (loading_.empty() && waiting_.empty())) break;
      // Nothing of ours in flight: only reads still landing (cancelled
      // guesses) can free a slot for the experts still waiting.
      if (loading_.empty() && p_.storage_->pending() == 0)
        throw Error("expert cache: no slot can be freed for layer " + std::to_string(layer_) +
                    " (every slot is in use); give --ram more room");
      p_.wait_for_reads();
      p_.poll_reads();  // whatever else landed meanwhile joins the batch
    }
    return out.size();
  }

  void release(int slot) {
    auto it = std::find(held_.begin(), held_.end(), slot);
    if (it != held_.end()) {
      held_.erase(it);
      --p_.slots_[slot].users;
    }
  }
  // Starts reads for deferred experts as slots become free.
  void top_up() {
    if (waiting_.empty()) return;
    std::vector<Extent> batch;
    while (!waiting_.empty()) {
      const auto [pos, expert] = waiting_.front();
      int slot = -1;
      auto it = p_.where_.find(key(layer_, expert));
      if (it != p_.where_.end()) slot = it->second;  // a prefetch got there meanwhile
      else slot = p_.start_read(layer_, expert, false, batch);
      if (slot < 0) break;
      waiting_.erase(waiting_.begin());
      --p_.waiting_;
      hold(pos, slot);
    }
    p_.submit(batch);
  }

  StreamingExpertProvider& p_;
  int64_t layer_;
  std::vector<std::pair<int, int>> loading_;      // (position, slot), ready or in flight
  std::vector<std::pair<int, int32_t>> waiting_;  // (position, expert) without a slot yet
  std::vector<int> held_;
  std::vector<int> handed_;  // slots of the last next_batch()
};

StreamingExpertProvider::StreamingExpertProvider(const ModelConfig& c, ExpertCatalog catalog,
                                                 std::unique_ptr<Storage> storage, StreamingOptions options)
    : c_(c), catalog_(std::move(catalog)), storage_(std::move(storage)), options_(std::move(options)) {
  if (options_.slots < 1) throw Error("expert cache: needs at least one slot");
  pool_ = std::make_unique<BufferPool>(std::max<uint64_t>(catalog_.max_slot_bytes, kIoAlign), options_.slots);
  storage_->register_buffers(pool_->regions());
  slots_.resize(options_.slots);
  rewrite_scratch_.resize(options_.pool ? static_cast<size_t>(options_.pool->size()) : 1);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].mem = pool_->buffer(i);
  // The catalog may hold the MTP layers after the decoder layers; the heat
  // persisted between runs covers the decoder layers only (a drafter's
  // layer is cached as it is used, not pinned from earlier runs).
  const size_t layers = catalog_.layers.size();
  if (layers < static_cast<size_t>(c.num_layers))
    throw Error("internal: an expert catalog of " + std::to_string(layers) + " layers for a model of " +
                std::to_string(c.num_layers));
  freq_.assign(layers, std::vector<double>(c.n_routed_experts, 0.0));
  placed_.assign(layers, 0);
  released_.assign(layers, false);
  pin_.assign(layers, std::vector<uint8_t>(c.n_routed_experts, 0));
  seen_.assign(layers, std::vector<uint8_t>(c.n_routed_experts, 0));
  heat_ = ExpertHeat(c.num_layers, c.n_routed_experts);
  if (options_.prior.layers() == c.num_layers) {
    heat_.merge(options_.prior);
    max_pinned_ = static_cast<size_t>(options_.pin_fraction * static_cast<double>(slots_.size()));
    for (auto [l, e] : options_.prior.hottest(max_pinned_)) pin_[l][e] = 1;
    // Earlier runs' counts seed the frequencies, scaled to "a few uses".
    const double total = options_.prior.total();
    if (total > 0)
      for (int64_t l = 0; l < c.num_layers; ++l)
        for (int64_t e = 0; e < c.n_routed_experts; ++e)
          freq_[l][e] = 8.0 * options_.prior.count(l, e) * static_cast<double>(c.n_routed_experts) / total;
  }
  stats_.cache_slots = slots_.size();
  stats_.cache_slot_bytes = pool_->buffer_bytes();
}

StreamingExpertProvider::~StreamingExpertProvider() {
  fetch_.reset();
  // Guesses still queued need not be read; reads already issued may still be
  // landing in the slots: let them finish before the buffers go away.
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].prefetched && slots_[s].state == State::Loading) storage_->cancel(slot_tags(static_cast<int>(s)));
  std::vector<Completion> done;
  while (storage_->pending() > 0) storage_->wait(done, storage_->pending());
}

void StreamingExpertProvider::save_heat() const {
  if (!options_.heat_path.empty()) heat_.save(options_.heat_path, options_.heat_model);
}

void StreamingExpertProvider::note_use(int64_t layer, int64_t expert) {
  freq_[layer][expert] += 1.0;
  if (layer < heat_.layers()) heat_.add(layer, expert);
  // Halve every count after a few turnovers of the cache: frequency that is
  // not renewed fades, so the cache follows what the text is doing now.
  if (++since_decay_ >= 4 * slots_.size()) {
    since_decay_ = 0;
    for (auto& l : freq_)
      for (double& f : l) f *= 0.5;
  }
}

int StreamingExpertProvider::choose_victim(bool for_prefetch, double guess_score) const {
  // The coldest slot of another layer than the kept one, else (for a read
  // the step waits for, not a guess) the kept layer's coldest, else a landed
  // guess no one has asked for yet (a guess never keeps a request from its
  // reads: a pass stopped before the layer it guessed for leaves them, and a
  // pass guesses its next layer while its first part runs).
  int best = -1, best_kept = -1, best_guess = -1;
  auto colder = [&](const Slot& s, int than) {
    if (than < 0) return true;
    const Slot& b = slots_[than];
    const double fs = score(s.layer, s.expert), fb = score(b.layer, b.expert);
    return fs < fb || (fs == fb && s.last_use < b.last_use);
  };
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.state == State::Free) return static_cast<int>(i);
    if (s.state != State::Ready || s.users > 0 || s.pinned) continue;
    if (s.prefetched) {
      if (best_guess < 0) best_guess = static_cast<int>(i);
      continue;
    }
    int& into = s.layer == kept_layer_ ? best_kept : best;
    if (colder(s, into)) into = static_cast<int>(i);
  }
  if (best < 0) return for_prefetch ? -1 : best_kept >= 0 ? best_kept : best_guess;
  // A guess may not push out an expert that is much hotter than itself.
  if (for_prefetch && score(slots_[best].layer, slots_[best].expert) > 4.0 * guess_score + 4.0) return -1;
  return best;
}

int StreamingExpertProvider::start_read(int64_t layer, int64_t expert, bool for_prefetch, std::vector<Extent>& batch) {
  const StreamedExpert& se = catalog_.at(layer, expert);
  const int s = choose_victim(for_prefetch, score(layer, expert));
  if (s < 0) return -1;
  Slot& slot = slots_[s];
  if (before_write_) {
    // A device reading it in place is done with it first. Should that fail
    // (a device lost), the reads this batch took slots for still go out, so
    // that those slots land and are reused as any others.
    try {
      before_write_(slot.mem, pool_->buffer_bytes());
    } catch (...) {
      submit(batch);
      throw;
    }
  }
  if (slot.state != State::Free) unplace(slot.layer, slot.expert);
  if (se.reads.size() > kReadsPerSlot) throw Error("internal: expert has too many reads");
  slot.layer = static_cast<int32_t>(layer);
  slot.expert = static_cast<int32_t>(expert);
  slot.state = State::Loading;
  slot.pending_reads = static_cast<int>(se.reads.size());
  slot.prefetched = for_prefetch;
  if (slot.pinned) {
    slot.pinned = false;
    --pinned_;
  }
  if (pin_[layer][expert] && pinned_ < max_pinned_) {
    slot.pinned = true;
    ++pinned_;
  }
  slot.last_use = ++clock_;
  slot.weights = rebase(se.layout, slot.mem, se.relative_mask);
  slot.rewrites = has_interleaved_layout(slot.weights);
  // Every read from a drive is checked as it lands (not only a blob's first
  // read in the run: the file may have changed since, or the drive or the
  // bus may have damaged this copy); a cache hit uses bytes checked then.
  slot.verifying = options_.verify != StreamingOptions::Verify::Off;
  slot.failure.clear();
  place(layer, expert, s);
  for (size_t r = 0; r < se.reads.size(); ++r) {
    const ExpertRead& rd = se.reads[r];
    Extent x;
    x.file = rd.file;
    x.offset = rd.offset;
    x.length = rd.length;
    x.dest = slot.mem + rd.slot_offset;
    x.capacity = pool_->buffer_bytes() - rd.slot_offset;
    x.tag = static_cast<uint64_t>(s) * kReadsPerSlot + r;
    x.verify = slot.verifying && rd.verify;
    x.xxh3 = rd.xxh3;
    x.background = for_prefetch;
    batch.push_back(x);
  }
  if (se.reads.empty()) slot.state = State::Ready;
  return s;
}

void StreamingExpertProvider::submit(std::vector<Extent>& batch) {
  if (batch.empty()) return;
  // In file-offset order: a layer's experts come in the router's order, but
  // a checkpoint read in place holds them in its own (a published shard
  // sorts "experts.10" before "experts.2"); each drive's queue then sweeps
  // forward through a file instead of seeking back and forth.
  std::stable_sort(batch.begin(), batch.end(),
                   [](const Extent& a, const Extent& b) { return std::tie(a.file, a.offset) < std::tie(b.file, b.offset); });
  storage_->submit(batch);
  batch.clear();
}

std::vector<uint64_t> StreamingExpertProvider::slot_tags(int s) const {
  std::vector<uint64_t> tags;
  const size_t reads = catalog_.at(slots_[s].layer, slots_[s].expert).reads.size();
  for (size_t r = 0; r < reads; ++r) tags.push_back(static_cast<uint64_t>(s) * kReadsPerSlot + r);
  return tags;
}

void StreamingExpertProvider::cancel_guess(int s) {
  Slot& slot = slots_[s];
  slot.prefetched = false;
  if (slot.state != State::Loading) return;  // landed: an ordinary cache entry now
  abandon(s);
  if (storage_->cancel(slot_tags(s)) > 0) ++stats_.prefetch_cancelled;
}

std::span<const uint8_t> StreamingExpertProvider::cache_memory() const {
  return {pool_->buffer(0), pool_->buffer_bytes() * pool_->count()};
}

void StreamingExpertProvider::place(int64_t layer, int64_t expert, int slot) {
  if (where_.insert_or_assign(key(layer, expert), slot).second) ++placed_[static_cast<size_t>(layer)];
}

void StreamingExpertProvider::unplace(int64_t layer, int64_t expert) {
  if (where_.erase(key(layer, expert)) > 0) --placed_[static_cast<size_t>(layer)];
}

void StreamingExpertProvider::abandon(int s) {
  // Its slot is no longer where this expert lives; a request for it from now
  // on reads it afresh into another slot (absorb decides what becomes of
  // this one when its reads have landed).
  unplace(slots_[s].layer, slots_[s].expert);
  slots_[s].cancelled = true;
}

void StreamingExpertProvider::abandon_reads_in_flight() {
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.state != State::Loading || slot.cancelled) continue;
    if (slot.prefetched) cancel_guess(static_cast<int>(s));
    else abandon(static_cast<int>(s));
  }
}

void StreamingExpertProvider::absorb(std::vector<Completion>& done) {
  std::string failure;
  for (const Completion& c : done) {
    const size_t s = c.tag / kReadsPerSlot;
    Slot& slot = slots_[s];
    const StreamedExpert& se = catalog_.at(slot.layer, slot.expert);
    if (!c.ok()) {
      slot.failed = true;  // incomplete; a cancelled read (ECANCELED) has nothing else to say
      if (c.error != ECANCELED && slot.failure.empty()) slot.failure = c.message;
    }
    stats_.bytes_read += c.bytes;
    if (c.ok() && slot.verifying && se.reads[c.tag % kReadsPerSlot].verify) stats_.bytes_verified += c.bytes;
    if (--slot.pending_reads > 0) continue;
    if (!slot.failed && se.blob_header) {  // 64 bytes: checked even with checksums off
      try {
        check_blob_header(slot.mem, slot.layer, slot.expert, se.reads[0].length,
                          storage_->file(se.reads[0].file).path + " offset " + std::to_string(se.reads[0].offset));
      } catch (const Error& e) {
        slot.failure = e.what();
        slot.failed = true;
      }
    }
    if (slot.cancelled) {
      // Given up on (a guess not asked for, a read of a step that failed):
      // nothing to report. If every read had gone out before the cancel it
      // still landed whole: keep it, unless the expert was read elsewhere since.
      slot.cancelled = false;
      if (slot.failed || where_.count(key(slot.layer, slot.expert)) || released_[static_cast<size_t>(slot.layer)]) {
        free_slot(slot);
        continue;
      }
      place(slot.layer, slot.expert, static_cast<int>(s));
    }
    if (slot.failed) {
      // Forget it (a later request reads it again) and fail the step,
      // unless it was a guess nobody has asked for yet (a streaming
      // install's source away for a moment): the request that needs it
      // reads it again, and fails then if it must.
      if (failure.empty() && !slot.prefetched) failure = slot.failure;
      unplace(slot.layer, slot.expert);
      free_slot(slot);
      continue;
    }
    if (slot.rewrites) to_rewrite_.push_back(static_cast<int>(s));  // Ready once rewritten
    else slot.state = State::Ready;
  }
  done.clear();
  rewrite_landed();  // the batch's good reads, before a failed one is reported
  if (!failure.empty()) throw Error("expert read failed: " + failure);
}

void StreamingExpertProvider::rewrite_landed() {
  if (to_rewrite_.empty()) return;
  const timeline::Scope span("step", "interleave");
  try {
    // Every 16-row group of every landed matrix, spread over the pool (a
    // step waits for its experts, and one thread rewrote them at about
    // 6 GB/s: docs/PERFORMANCE.md).
    rewrite_groups_.clear();
    for (int s : to_rewrite_)
      for (kernels::WeightMatrix* m : slots_[s].weights.matrices()) {
        if (!kernels::interleavable(*m)) continue;
        if (m->data < slots_[s].mem || m->data >= slots_[s].mem + pool_->buffer_bytes())
          throw Error("internal: an expert matrix with an interleaved layout is not in its cache slot");
        for (int64_t g = 0, groups = kernels::interleave_groups(*m); g < groups; ++g) rewrite_groups_.emplace_back(m, g);
      }
    const auto rewrite = [this](int worker, size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i)
        kernels::interleave_group_in_place(*rewrite_groups_[i].first, rewrite_groups_[i].second, rewrite_scratch_[worker]);
    };
    if (options_.pool) options_.pool->parallel_for_indexed(rewrite_groups_.size(), rewrite, 4);
    else rewrite(0, 0, rewrite_groups_.size());
  } catch (...) {
    for (int s : to_rewrite_) {  // half rewritten: read again when asked for
      unplace(slots_[s].layer, slots_[s].expert);
      free_slot(slots_[s]);
    }
    to_rewrite_.clear();
    throw;
  }
  for (const auto& [m, g] : rewrite_groups_)  // each rewritten matrix once, by its first group
    if (g == 0) *m = kernels::interleaved_in_place(*m);
  for (int s : to_rewrite_) slots_[s].state = State::Ready;
  to_rewrite_.clear();
}

void StreamingExpertProvider::recheck(int s) {
  Slot& slot = slots_[s];
  if (slot.rewrites) return;  // its bytes are no longer the file's (no source with checksums does this)
  const StreamedExpert& se = catalog_.at(slot.layer, slot.expert);
  for (const ExpertRead& rd : se.reads) {
    if (!rd.verify) continue;
    const uint64_t got = xxh3_64(slot.mem + rd.slot_offset, rd.length);
    stats_.bytes_verified += rd.length;
    if (got == rd.xxh3) continue;
    const std::string what = "expert cache: layer " + std::to_string(slot.layer) + " expert " +
                             std::to_string(slot.expert) + " changed in memory since it was read: " +
                             checksum_mismatch_message(storage_->file(rd.file).path, rd.offset, rd.length, rd.xxh3, got);
    unplace(slot.layer, slot.expert);
    free_slot(slot);
    throw Error(what);
  }
}

void StreamingExpertProvider::free_slot(Slot& slot) {
  slot.state = State::Free;
  slot.failed = false;
  if (slot.pinned) --pinned_;
  slot.pinned = slot.prefetched = false;
}

void StreamingExpertProvider::poll_reads() {
  std::vector<Completion> done;
  storage_->poll(done);
  absorb(done);
}

void StreamingExpertProvider::wait_for_reads() {
  std::vector<Completion> done;
  if (storage_->pending() == 0) throw Error("internal: waiting for an expert read that was never submitted");
  const auto t0 = Clock::now();
  storage_->wait(done, 1);
  const auto t1 = Clock::now();
  stats_.io_wait_s += std::chrono::duration<double>(t1 - t0).count();
  timeline::span("step", "wait for reads", t0, t1);
  absorb(done);
}

ExpertFetch& StreamingExpertProvider::fetch(int64_t layer, std::span<const int32_t> experts) {
  try {
    return begin_fetch(layer, experts);
  } catch (...) {
    abandon_reads_in_flight();  // as when next_batch() fails
    throw;
  }
}

ExpertFetch& StreamingExpertProvider::fetch_whole(int64_t layer, std::span<const int32_t> all) {
  uncounted_ = true;
  try {
    ExpertFetch& f = fetch(layer, all);
    uncounted_ = false;
    return f;
  } catch (...) {
    uncounted_ = false;
    throw;
  }
}

bool StreamingExpertProvider::downloads() const {
  for (const DriveInfo& d : storage_->drives())
    if (d.name.starts_with(kRemoteDrivePrefix)) return true;
  return false;
}

void StreamingExpertProvider::release_layer(int64_t layer) {
  if (layer < 0 || static_cast<size_t>(layer) >= released_.size() || released_[layer]) return;
  released_[layer] = true;
  // Its cached copies go: their slots serve other layers (none is asked for
  // again). One still being read (a guess) is given up on.
  for (int64_t e = 0; e < c_.n_routed_experts; ++e) {
    const auto it = where_.find(key(layer, e));
    if (it == where_.end()) continue;
    const int s = it->second;
    Slot& slot = slots_[s];
    if (slot.users > 0) continue;
    if (slot.state == State::Loading) {
      if (slot.prefetched) cancel_guess(s);
      else abandon(s);
      continue;
    }
    unplace(layer, e);
    free_slot(slot);
  }
}

void StreamingExpertProvider::note_held(int64_t layer, std::span<const int32_t> experts) {
  count_predicted(layer, experts);  // the fetch() that follows for the same layer ends the count
  for (int32_t e : experts) {
    note_request(layer, e);
    ++stats_.hits;
  }
}

void StreamingExpertProvider::count_predicted(int64_t layer, std::span<const int32_t> experts) {
  for (Guessed& g : guessed_) {
    if (g.layer != layer) continue;
    // Each guessed expert counts once, whichever of a pass's parts asks first.
    for (int32_t e : experts) {
      const auto it = std::lower_bound(g.experts.begin(), g.experts.end(), e);
      if (it == g.experts.end() || *it != e) continue;
      count_guesses(0, 1, g.by_token);
      g.experts.erase(it);
    }
  }
}

void StreamingExpertProvider::count_guesses(int64_t predicted, int64_t right, bool by_token) {
  stats_.predicted += static_cast<uint64_t>(predicted);  // (a negative count takes back: modular)
  stats_.predicted_right += static_cast<uint64_t>(right);
  if (by_token) heat_.add_guesses(static_cast<double>(predicted), static_cast<double>(right));
}

void StreamingExpertProvider::note_wrong(const Guessed& g) {
  if (g.by_token && g.layer < heat_.layers())
    for (int32_t e : g.experts) heat_.add_wrong(g.layer, e);
}

void StreamingExpertProvider::note_request(int64_t layer, int32_t e) {
  ++stats_.requests;
  stats_.bytes_needed += catalog_.at(layer, e).payload_bytes;
  if (!seen_[layer][e]) {
    seen_[layer][e] = 1;
    stats_.unique_bytes += catalog_.at(layer, e).payload_bytes;
  }
  note_use(layer, e);
}

ExpertFetch& StreamingExpertProvider::begin_fetch(int64_t layer, std::span<const int32_t> experts) {
  fetch_.reset();  // a fetch left open ends here
  poll_reads();
  // A part of a pass before its last (keep_layer): the later parts ask for
  // the layer again, so its guesses stay counted and in flight until then.
  const bool more_parts = kept_layer_ == layer;
  if (!experts.empty() && released_.at(static_cast<size_t>(layer)))
    throw Error("internal: experts of layer " + std::to_string(layer) + " asked for after the backend took them");
  if (!uncounted_) count_predicted(layer, experts);
  if (!more_parts)
    std::erase_if(guessed_, [&](const Guessed& g) {
      if (g.layer != layer) return false;
      note_wrong(g);  // what count_predicted() left of them
      return true;
    });
  auto f = std::make_unique<Fetch>(*this, layer);
  std::vector<Extent> batch;
  // Slots of this request are marked in use first, so that starting the
  // reads of its misses never evicts one of its hits.
  std::vector<int> hit(experts.size(), -1);
  for (size_t i = 0; i < experts.size(); ++i) {
    const int32_t e = experts[i];
    if (!uncounted_) note_request(layer, e);
    auto it = where_.find(key(layer, e));
    if (it == where_.end()) continue;
    Slot& s = slots_[it->second];
    if (options_.verify == StreamingOptions::Verify::Always && s.state == State::Ready) recheck(it->second);
    if (!uncounted_) ++stats_.hits;
    if (s.prefetched) {
      ++stats_.prefetch_used;
      s.prefetched = false;
      if (s.state == State::Loading) storage_->promote(slot_tags(it->second));  // needed now
    }
    s.last_use = ++clock_;
    hit[i] = it->second;
    f->hold(static_cast<int>(i), it->second);
  }
  for (size_t i = 0; i < experts.size(); ++i) {
    if (hit[i] >= 0) continue;
    if (!uncounted_) ++stats_.misses;
    const int s = start_read(layer, experts[i], false, batch);
    if (s >= 0)
      f->hold(static_cast<int>(i), s);
    else
      f->defer(static_cast<int>(i), experts[i]);
  }
  submit(batch);
  // Guesses for this layer that it did not ask for: those still being read
  // are cancelled (their queued pieces never reach the drive), those that
  // landed become ordinary entries.
  if (!more_parts)
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].prefetched && slots_[s].layer == layer) cancel_guess(static_cast<int>(s));
  fetch_ = std::move(f);
  return *fetch_;
}

bool StreamingExpertProvider::prefetch(int64_t layer, std::span<const int32_t> experts, GuessOf of) {
  if (layer >= 0 && static_cast<size_t>(layer) < released_.size() && released_[layer]) return true;  // read by none
  // A second guess at a layer before its fetch (a dense layer's, after the
  // MoE layer before it guessed past it) replaces the first in the counts.
  // Guesses at a layer other than this one and the one a pass is in are a
  // stopped pass's: nobody will ask for them (their reads stop below).
  std::erase_if(guessed_, [&](const Guessed& g) {
    if (g.layer == layer) {
      count_guesses(-static_cast<int64_t>(g.experts.size()), 0, g.by_token);
      return true;
    }
    if (g.layer == kept_layer_) return false;
    note_wrong(g);  // a stopped pass's, or a token's whose layer never came: guessed, never right
    return true;
  });
  Guessed& g = guessed_.emplace_back();
  g.layer = layer;
  g.by_token = of == GuessOf::Token;
  g.experts.assign(experts.begin(), experts.end());
  std::sort(g.experts.begin(), g.experts.end());
  count_guesses(static_cast<int64_t>(experts.size()), 0, g.by_token);
  // Guesses never take a slot that a request is waiting for, nor more than
  // a quarter of the cache: the experts the next tokens need stay. A pass's
  // next layer is asked for whole, so its guesses take up to three quarters;
  // the last quarter stays for the reads of a request they missed (a guess
  // not yet asked for is no one's to evict).
  if (waiting_ > 0) return false;
  // Guesses for another layer that no one asked for are stale: the model
  // guesses one layer ahead and that layer's fetch ends its guesses, so these
  // are a stopped pass's (it never reached the layer it guessed for). They
  // stop counting against the room (a pass's could hold three quarters of
  // the cache until its layer came round again) and their queued reads stop.
  // Not so the layer a pass is in (keep_layer): its later parts ask for its
  // guesses yet, while its first part guesses the next layer.
  size_t guessing = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s].prefetched) continue;
    if (slots_[s].layer != layer && slots_[s].layer != kept_layer_ &&
        slots_[s].users == 0)  // (a fetch holds none of them: kept safe all the same)
      cancel_guess(static_cast<int>(s));
    else
      ++guessing;
  }
  // While a pass is in a layer (its first part guesses the next), the
  // guesses leave room for all that layer's experts: its later parts read
  // the ones the earlier parts did not pick, and the guesses must not push
  // the earlier ones out (slots neither the kept layer's nor guesses' are
  // at least its experts not yet cached).
  const size_t slots = slots_.size(), experts_a_layer = static_cast<size_t>(std::max<int64_t>(c_.n_routed_experts, 0));
  size_t room = of == GuessOf::Pass ? slots - slots / 4 : slots / 4;
  if (of == GuessOf::Pass && kept_layer_ >= 0) room = std::min(room, slots > experts_a_layer ? slots - experts_a_layer : 0);
  std::vector<Extent> batch;
  bool whole = true;
  for (int32_t e : experts) {
    if (where_.count(key(layer, e))) continue;
    if (++guessing > room || start_read(layer, e, true, batch) < 0) {
      whole = false;
      break;
    }
    ++stats_.prefetch_issued;
  }
  submit(batch);
  return whole;
}

void StreamingExpertProvider::settle() {
  std::vector<Completion> done;
  while (storage_->pending() > 0) {
    storage_->wait(done, storage_->pending());
    absorb(done);
    done.clear();
  }
}

void StreamingExpertProvider::begin_epoch() {
  for (auto& l : seen_) std::fill(l.begin(), l.end(), 0);
  stats_.unique_bytes = 0;
}

ExpertStats StreamingExpertProvider::stats() const {
  ExpertStats s = stats_;
  s.pinned = pinned_;
  const auto drives = storage_->drives();
  // Per drive: what the drive transferred (whole 4 KiB pages, cancelled
  // guesses' pieces too); bytes_read above: the extents that landed.
  s.drives.resize(drives.size());
  for (size_t d = 0; d < drives.size(); ++d)
    s.drives[d] = {drives[d].name,          drives[d].device,      drives[d].bytes_read,  drives[d].busy_s,
                   drives[d].in_flight_s,   drives[d].fetched_reads, drives[d].local_reads, drives[d].fetch_wait_s};
  return s;
}

}  // namespace strata
