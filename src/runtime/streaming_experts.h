#pragma once
// Routed experts streamed from drives into a fixed RAM cache.
//
// The cache is `slots` equal buffers (huge-page backed, registered with the
// storage). A layer's request hands out cached experts at once and submits
// the reads of all missing ones in one go; they are handed out as they land,
// so the model computes while the drives work. When every slot is busy, the
// remaining misses wait for the caller to finish an expert (a big prefill
// batch still runs in a small cache, just in waves).
//
// Eviction: least frequently used, with the counts halved every few cache
// turnovers so that old habits fade; ties go to the least recently used.
// Experts that were hottest in earlier runs (ExpertHeat) are pinned: once
// read they stay for the rest of the run, up to `pin_fraction` of the slots.
// While a pass of several parts runs a layer (keep_layer), that layer's
// experts go last: its later parts find what the earlier ones read.
// Prefetched reads take a slot only from an expert colder than the guess;
// they go to the drives as background reads (only when a drive is otherwise
// idle), are promoted when their layer asks for them and cancelled when it
// does not.
//
// Nothing here changes what the kernels compute: a slot holds the very bytes
// of the checkpoint (or pack blob), and the layout re-points the same weights.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <memory>
#include <unordered_map>
#include <vector>

#include "model/expert_provider.h"
#include "model/expert_catalog.h"
#include "model/expert_heat.h"
#include "storage/aligned_buffer.h"
#include "storage/storage.h"
#include "util/thread_pool.h"

namespace strata {

struct StreamingOptions {
  size_t slots = 0;            // cache size in experts (>= 1)
  double pin_fraction = 0.5;   // share of slots heat may pin
  using Verify = ExpertVerify;
  Verify verify = Verify::First;
  ExpertHeat prior;            // heat of earlier runs (may be empty)
  // Where save_heat() writes this run's heat added to the prior, and the
  // model it names there; an empty path: nowhere.
  std::filesystem::path heat_path;
  std::string heat_model;
  // The threads the step computes with (the CPU backend's), which rewrite
  // landed experts into the kernels' layout between the step's products;
  // nullptr: the step's own thread alone.
  ThreadPool* pool = nullptr;
};

class StreamingExpertProvider : public ExpertProvider {
 public:
  StreamingExpertProvider(const ModelConfig& c, ExpertCatalog catalog, std::unique_ptr<Storage> storage,
                          StreamingOptions options);
  ~StreamingExpertProvider() override;

  ExpertFetch& fetch(int64_t layer, std::span<const int32_t> experts) override;
  void note_held(int64_t layer, std::span<const int32_t> experts) override;
  ExpertFetch& fetch_whole(int64_t layer, std::span<const int32_t> all) override;
  bool downloads() const override;
  void release_layer(int64_t layer) override;
  bool prefetch(int64_t layer, std::span<const int32_t> experts, GuessOf of = GuessOf::Step) override;
  void keep_layer(int64_t layer) override { kept_layer_ = layer; }
  bool wants_prefetch() const override { return true; }
  bool streams() const override { return true; }
  bool serves_layer(int64_t layer) const override {
    return layer >= 0 && layer < static_cast<int64_t>(catalog_.layers.size()) && !catalog_.layers[layer].empty();
  }
  std::span<const uint8_t> cache_memory() const override;
  void before_cache_write(std::function<void(const void*, size_t)> hook) override { before_write_ = std::move(hook); }
  bool holds_layer(int64_t layer) const override {
    return layer >= 0 && layer < static_cast<int64_t>(placed_.size()) &&
           (released_[layer] || placed_[layer] >= static_cast<size_t>(c_.n_routed_experts));
  }
  void save_heat() const override;
  ExpertStats stats() const override;
  void begin_epoch() override;
  void settle() override;

  // This run's selections added to the prior heat (what to persist).
  const ExpertHeat& heat() const { return heat_; }
  Storage& storage() { return *storage_; }

 private:
  class Fetch;
  enum class State : uint8_t { Free, Loading, Ready };
  struct Slot {
    uint8_t* mem = nullptr;
    int32_t layer = -1, expert = -1;
    State state = State::Free;
    int pending_reads = 0;
    int users = 0;            // fetches holding it
    bool pinned = false;
    bool prefetched = false;  // read ahead and not yet asked for
    bool failed = false;      // a read of it failed or was cancelled (until its last read lands)
    bool cancelled = false;   // a guess given up on while loading; no longer in where_
    bool verifying = false;   // its reads carry checksums
    bool rewrites = false;    // its matrices are interleaved in place once it lands
    std::string failure;      // why a read of it failed (with `failed`)
    uint64_t last_use = 0;
    ExpertWeights weights;    // valid when Ready
  };
  static uint64_t key(int64_t layer, int64_t expert) { return static_cast<uint64_t>(layer) << 32 | uint32_t(expert); }

  // fetch() itself; on an error fetch() gives up on the reads in flight.
  ExpertFetch& begin_fetch(int64_t layer, std::span<const int32_t> experts);
  // A slot for (layer, expert) with its reads submitted; -1 if none can be freed.
  int start_read(int64_t layer, int64_t expert, bool for_prefetch, std::vector<Extent>& batch);
  int choose_victim(bool for_prefetch, double guess_score) const;
  double score(int64_t layer, int64_t expert) const { return freq_[layer][expert]; }
  void note_use(int64_t layer, int64_t expert);
  // One request for (layer, e): the counts, the distinct bytes, the heat.
  void note_request(int64_t layer, int32_t e);
  // Of `experts` asked for in `layer`, those its guess named (when it was guessed for).
  void count_predicted(int64_t layer, std::span<const int32_t> experts);
  // Adds to the guessed and right counts (a negative count takes an earlier
  // guess back), in the stats and, for a one-row step's guess (by_token), in
  // the heat.
  void count_guesses(int64_t predicted, int64_t right, bool by_token);
  // Empties a slot that where_ no longer names.
  void free_slot(Slot& slot);
  // Applies landed completions (throws strata::Error on a failed read, but
  // not for a slot given up on: abandon()).
  void absorb(std::vector<Completion>& done);
  // Interleaves the matrices of the slots absorb() found landed whole, on
  // the pool, and makes them Ready.
  void rewrite_landed();
  // --verify always: hashes a cached expert again before it is used (throws
  // strata::Error and forgets it when its bytes changed in memory).
  void recheck(int slot);
  // Blocks until at least one read lands; counts the time as I/O wait.
  void wait_for_reads();
  // Applies whatever reads have landed, without waiting.
  void poll_reads();
  void submit(std::vector<Extent>& batch);
  std::vector<uint64_t> slot_tags(int slot) const;
  // A guess its layer did not ask for: cancel its reads if they are still queued.
  void cancel_guess(int slot);
  // A slot still loading that no request is to wait for any more.
  void abandon(int slot);
  // where_'s entries come and go through these, which keep placed_.
  void place(int64_t layer, int64_t expert, int slot);
  void unplace(int64_t layer, int64_t expert);
  // After a failed step: every slot still loading. Its reads were issued
  // while the drive was failing; the next step reads those experts afresh
  // rather than inherit their fate.
  void abandon_reads_in_flight();

  const ModelConfig& c_;
  ExpertCatalog catalog_;
  std::unique_ptr<Storage> storage_;
  StreamingOptions options_;
  std::unique_ptr<BufferPool> pool_;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, int> where_;  // (layer, expert) -> slot
  std::vector<size_t> placed_;               // per layer: its entries in where_
  std::vector<bool> released_;               // per layer: release_layer() (the backend holds it whole)
  bool uncounted_ = false;                   // within fetch_whole(): not requests, not heat
  std::function<void(const void*, size_t)> before_write_;  // before_cache_write()
  std::vector<std::vector<double>> freq_;    // decayed selection counts
  std::vector<std::vector<uint8_t>> pin_;    // hot in earlier runs
  std::vector<std::vector<uint8_t>> seen_;   // asked for since the epoch began
  size_t pinned_ = 0, max_pinned_ = 0;
  ExpertHeat heat_;
  uint64_t clock_ = 0, since_decay_ = 0;
  int64_t kept_layer_ = -1;  // keep_layer()
  size_t waiting_ = 0;                       // experts of live fetches without a slot yet
  // The guesses not yet asked for, for their accuracy: the next layer's,
  // and a pass's current layer's (a pass guesses its next layer while its
  // first part runs, and its later parts still ask for this one's).
  struct Guessed {
    int64_t layer = -1;
    bool by_token = false;          // a one-row step's guess (counted in the heat)
    std::vector<int32_t> experts;  // sorted
  };
  std::vector<Guessed> guessed_;
  // A guess ended with its experts never asked for: a token's go into the
  // heat as wrong (ExpertHeat::add_wrong).
  void note_wrong(const Guessed& g);
  std::vector<int> to_rewrite_;              // absorb()'s landed slots for rewrite_landed()
  std::vector<std::pair<kernels::WeightMatrix*, int64_t>> rewrite_groups_;  // (matrix, group of 16 rows)
  std::vector<std::vector<uint8_t>> rewrite_scratch_;  // [pool thread]: a group being rewritten
  ExpertStats stats_;
  std::unique_ptr<Fetch> fetch_;  // the current one; last, so it goes before the slots it holds
};

}  // namespace strata
