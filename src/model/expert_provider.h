#pragma once
// Where routed experts' weights come from. The model asks for the experts a
// batch selected in a layer and never opens a file itself: the in-memory
// provider below serves them from the mapped checkpoint; the streaming
// provider (runtime/streaming_experts.h: cache + drives) implements the same
// interface.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/expert.h"
#include "kernels/linear.h"
#include "backend/backend.h"
#include "model/interleaved_weights.h"
#include "model/model_config.h"

namespace strata {

class WeightBinder;

// One layer's request. Experts are handed out as they become ready (cached
// ones first, the rest as their reads land), so the caller computes while the
// drives work; the caller makes the result independent of that order.
class ExpertFetch {
 public:
  virtual ~ExpertFetch() = default;
  // Releases every expert of the request; the fetch is over (the provider's
  // next fetch() may reuse this object).
  virtual void end() {}
  // Hands out up to `max` (>= 1) experts of the request that are ready and
  // not yet handed out, as (position in the request, weights): at least one,
  // blocking while none is ready. They stay valid until the next call (or the
  // end of the fetch). Returns how many; 0 once all have been handed out.
  virtual size_t next_batch(std::vector<std::pair<int, const ExpertWeights*>>& out, size_t max) = 0;
  // True when every expert of the request is in memory already and each one
  // handed out stays valid until the fetch ends.
  virtual bool all_ready() const { return false; }
};

// Ends a fetch however the scope holding it is left.
class EndsFetch {
 public:
  explicit EndsFetch(ExpertFetch& f) : f_(f) {}
  ~EndsFetch() { f_.end(); }
  EndsFetch(const EndsFetch&) = delete;
  EndsFetch& operator=(const EndsFetch&) = delete;

 private:
  ExpertFetch& f_;
};

// Checksums of streamed experts where the catalog has them (packs).
// First: every read from a drive is hashed as it lands in memory, the
// blob's first read in the run or not (the file may have changed since, or
// the drive or the bus damaged this copy); a cache hit uses bytes that were
// checked when they landed. Always: that, and a cached expert is hashed again
// before each use (memory that changed after it landed). Off: none (blob
// headers, which name their layer and expert, are still checked). What the
// hashing costs: docs/PERFORMANCE.md ("Checksums").
enum class ExpertVerify { First, Always, Off };

// What a provider has done so far (all zero for the in-memory one).
struct ExpertStats {
  uint64_t requests = 0;        // (layer, expert) pairs asked for
  uint64_t hits = 0;            // of those, already in memory (or in flight from a prefetch; or held by the backend)
  uint64_t misses = 0;          // read from a drive on demand
  uint64_t bytes_needed = 0;    // payload bytes of the experts asked for
  uint64_t bytes_read = 0;      // bytes read from drives (demand + prefetch)
  uint64_t bytes_verified = 0;  // of those, checked against their checksum as they landed
  uint64_t unique_bytes = 0;    // payload of the distinct experts asked for since the epoch began
  uint64_t prefetch_issued = 0; // experts read ahead of their layer
  uint64_t prefetch_used = 0;   // of those, later asked for
  uint64_t prefetch_cancelled = 0;  // of those, not asked for and cancelled while still queued or in flight
  uint64_t predicted = 0;       // experts predicted for a layer
  uint64_t predicted_right = 0; // of those, selected by that layer's router
  double io_wait_s = 0;         // time the caller blocked waiting for reads
  uint64_t cache_slots = 0;
  uint64_t cache_slot_bytes = 0;
  uint64_t pinned = 0;          // slots held by heat-pinned experts
  DeviceExpertStats device;     // the backend's expert cache (VRAM tier)
  struct Drive {
    std::string name;
    uint64_t device = 0;        // st_dev of the files read from it (0: a remote source's)
    uint64_t bytes = 0;
    double busy_s = 0;          // wall time with at least one read of this drive in flight
    double in_flight_s = 0;     // reads in flight integrated over that time
    // A streaming install's source (storage/storage.h DriveInfo): reads that
    // waited for a fetch, their summed wait, reads served from the drive.
    uint64_t fetched_reads = 0, local_reads = 0;
    double fetch_wait_s = 0;
  };
  std::vector<Drive> drives;
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  // Starts making `experts` of `layer` available (reads of the missing ones
  // are all submitted at once) and returns at once. One fetch at a time: the
  // provider owns it, and it lasts until its end() (which the caller always
  // calls, also on an error) or the next fetch().
  virtual ExpertFetch& fetch(int64_t layer, std::span<const int32_t> experts) = 0;
  // Experts of `layer` the step needs that the backend holds in its own
  // memory (a GPU's expert cache), so they are not fetched: counted as
  // requests served from memory and in the heat, as a fetch would count
  // them. Called just before that layer's fetch() of the others.
  virtual void note_held(int64_t layer, std::span<const int32_t> experts) {
    (void)layer;
    (void)experts;
  }
  // Every expert of `layer` (`all`: ids 0 .. n-1), for a backend that takes
  // the layer whole (Model::hold_experts_on_device): a fetch() whose reads
  // are counted, but not as requests, hits or misses, nor in the heat
  // (nothing was routed to them).
  virtual ExpertFetch& fetch_whole(int64_t layer, std::span<const int32_t> all) { return fetch(layer, all); }
  // Whether a fetch may download (a streaming install's missing experts):
  // then no layer is taken whole at load, which would download them all.
  virtual bool downloads() const { return false; }
  // The backend holds every expert of `layer` for good (Backend::hold_layer)
  // and the model asks for none of them again: the provider may drop its
  // own copies (an in-RAM provider frees them; a fetch of them then throws).
  virtual void release_layer(int64_t layer) { (void)layer; }
  // A guess that `experts` of `layer` come next: a streaming provider may
  // start reading them. Never changes results. `of` says whose guess it is:
  // a pass of several parts' (Model::forward) at its next layer, which its
  // parts then ask for whole, may take three quarters of a cache's slots
  // (a step's, a quarter at most, so that the experts the next tokens need
  // stay), and while the pass is still in a layer (keep_layer) no more than
  // leaves that layer room for all its experts; a one-row step's (a decode
  // token of one sequence, or the last row of a prompt split into passes)
  // is counted in the heat (ExpertHeat::guesses), as `strata budget`
  // predicts decode. Returns false where the guess was cut short (some of
  // its experts neither cached nor being read): the pass guesses again at
  // the layer's last part.
  enum class GuessOf { Token, Step, Pass };
  virtual bool prefetch(int64_t layer, std::span<const int32_t> experts, GuessOf of = GuessOf::Step) {
    (void)layer;
    (void)experts;
    (void)of;
    return true;
  }
  // A pass of several parts (Model::forward) fetches `layer`'s experts for
  // each part in turn: until keep_layer(-1), a read for another expert takes
  // the slot of another layer's expert first, so the parts after the first
  // read only what the earlier ones did not. Never changes results.
  virtual void keep_layer(int64_t layer) { (void)layer; }
  // Whether prefetch() does anything (the model skips predicting if not).
  virtual bool wants_prefetch() const { return false; }
  // The memory cached experts live in (a streaming provider's RAM cache;
  // empty for one that hands out the checkpoint's own mapping), and a hook
  // called with each part of it just before it is overwritten (a read into
  // a slot): a backend reading that memory in place finishes with it first.
  virtual std::span<const uint8_t> cache_memory() const { return {}; }
  virtual void before_cache_write(std::function<void(const void*, size_t)> hook) { (void)hook; }
  // Whether every expert of `layer` is in memory or on its way (or the
  // backend holds the layer: release_layer), so that a guess at it would read nothing (the model skips predicting it: a router
  // product a layer that a model whose experts all fit would pay each token).
  virtual bool holds_layer(int64_t layer) const {
    (void)layer;
    return false;
  }
  // Whether experts come from drives through a cache (not held in RAM whole).
  virtual bool streams() const { return false; }
  // Whether fetch() serves `layer`'s experts. A streaming provider serves
  // the MTP layers too when its catalog lists them (a checkpoint streamed in
  // place, a pack made since they stream); otherwise they are bound in RAM.
  virtual bool serves_layer(int64_t layer) const { return false; }
  // Persists what this run learned about which experts are hot, for the next
  // run's cache (a streaming provider's heat file; nothing otherwise).
  virtual void save_heat() const {}
  virtual ExpertStats stats() const { return {}; }
  // Starts counting distinct experts afresh (ExpertStats::unique_bytes): the
  // generator marks prefill and decode, so read amplification is per phase.
  virtual void begin_epoch() {}
  // Waits until no read is in flight or queued (the guesses the last step
  // did not use), so that stats() counts every read the run made, each
  // whole: the generator calls it when a run ends, after its timing.
  virtual void settle() {}
};

// Binds one expert's weights from the checkpoint; each architecture knows
// its own tensor layout.
using ExpertBindFn = std::function<ExpertWeights(int64_t layer, int64_t expert)>;

// The per-expert tensor names of DeepSeek-V3 and Qwen3-MoE checkpoints
// (model.layers.L.mlp.experts.E.{gate,up,down}_proj).
ExpertBindFn per_expert_tensors(WeightBinder& w, const ModelConfig& c);

// Serves every routed expert straight from the checkpoint's tensors: those of
// the MoE layers in [first, end) (end -1: the decoder layers' end,
// num_layers); fetch() takes the layer's own index.
class InMemoryExpertProvider : public ExpertProvider {
 public:
  // The matrices take the interleaved layouts where their format has one,
  // as a pack stores them, on every backend: an expert then gives the same
  // bits whether it was in RAM, streamed from the checkpoint or from a pack.
  InMemoryExpertProvider(const ModelConfig& c, const ExpertBindFn& bind, int64_t first = 0, int64_t end = -1);
  ExpertFetch& fetch(int64_t layer, std::span<const int32_t> experts) override;
  void release_layer(int64_t layer) override;

 private:
  ExpertBindFn bind_;  // kept: it may own converted weights the handles point into
  std::vector<std::vector<ExpertWeights>> experts_;  // [layer][expert]; empty for dense layers
  InterleavedWeights interleaved_;  // the experts' matrices that have an interleaved layout
  std::vector<size_t> copy_of_;     // [layer]: its copy in interleaved_ (InterleavedWeights::kNone: none)
  std::vector<bool> released_;      // [layer]: release_layer() dropped it
  // A fetch whose experts are all ready: hands them out in request order.
  class ReadyFetch : public ExpertFetch {
   public:
    size_t next_batch(std::vector<std::pair<int, const ExpertWeights*>>& out, size_t max) override;
    bool all_ready() const override { return true; }
    void end() override { weights_.clear(); }
    std::vector<const ExpertWeights*> weights_;  // capacity: the experts of a layer
    size_t next_ = 0;
  };
  ReadyFetch fetch_;
};

}  // namespace strata
