#pragma once
// A sequence's attention cache, made by the backend that computes with it
// (Backend::new_cache()) and kept where that backend works: host memory for
// the CPU. The model and the runtime see only what is here (how far the
// sequence got, saving and loading it for a session); the attention ops read
// and write its rows.
//
// For each layer and position the cache holds a key row and a value row of
// fixed widths. MLA stores its compressed latent (normalised kv_lora +
// rotated k_rope) as the key row and no value row. A sliding-window layer
// keeps a ring: its window plus one step's rows of the sequence (a step
// writes all its rows before any of them attends, so the oldest row of the
// step still needs positions a window back from it). Other layers grow by
// doubling up to `max_positions` (the context, --ctx).
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

namespace strata {

struct CacheShape {
  int64_t layers = 0;
  int64_t key_width = 0, value_width = 0;
  int64_t max_positions = 0;    // the context
  std::vector<int64_t> windows; // per layer: 0 = keeps every position, else that layer's sliding window
  int64_t max_batch = 4096;     // rows of one sequence in a step
  // Per layer (empty: none): f32 values of a fixed-size recurrent state
  // instead of rows per position (Kimi Delta Attention: the delta-rule state
  // and the short convolutions' last inputs), zero for a new sequence.
  std::vector<int64_t> state_floats = {};
};

// A cache's state at one length (KvCache::snapshot()): what a speculative
// step rolls back to, or a shared prefix is reused from (a session keeps one
// at the end of its prompt, runtime/session.h).
class CacheSnapshot {
 public:
  virtual ~CacheSnapshot() = default;
  virtual int64_t length() const = 0;
  // Bytes it holds (the recurrent states it copied).
  virtual uint64_t bytes() const = 0;
  // As bytes (for a session file, after its cache's save()); the same cache,
  // loaded, reads them back with KvCache::load_snapshot().
  virtual void save(std::ostream& out) const = 0;
};

// A cache lives no longer than the backend that made it.
class KvCache {
 public:
  virtual ~KvCache() = default;
  // Makes room for positions [0, n); throws strata::Error past max_positions.
  virtual void ensure(int64_t n) = 0;
  // Number of positions whose rows are valid; the next token goes here.
  virtual int64_t length() const = 0;
  virtual void set_length(int64_t n) = 0;
  virtual int64_t max_positions() const = 0;
  // Whether positions [0, n) are still all available after length() went
  // past n (a ring may have dropped what the next position would attend to;
  // a recurrent state holds only its latest position).
  virtual bool can_rewind_to(int64_t n) const = 0;
  // Whether a layer keeps a recurrent state: then the way back to an earlier
  // position is a snapshot taken there, not set_length().
  virtual bool keeps_state() const = 0;
  // The cache as bytes (for a session file) and back; load() throws
  // strata::Error when the shape differs from this cache's.
  virtual void save(std::ostream& out) const = 0;
  virtual void load(std::istream& in) = 0;
  // Bytes the cache holds now.
  virtual uint64_t bytes() const = 0;
  // The cache as it is now, to come back to with restore(): recurrent states
  // are copied whole; rows per position are not (those below the length stay
  // as they are, so a snapshot costs the states' size only).
  virtual std::unique_ptr<CacheSnapshot> snapshot() const = 0;
  // Back to `s` (made by this cache, at a length not above the current one):
  // the length and every recurrent state as they were, so what follows gives
  // the bits it gave after the snapshot. A snapshot holds while the rows
  // below its length are not rewritten, i.e. until the cache is restored to
  // an earlier point and runs on from there. Throws strata::Error when `s` is
  // another cache's, lies ahead, or a sliding-window ring has since dropped
  // rows it needs.
  virtual void restore(const CacheSnapshot& s) = 0;
  // Whether restore(s) would succeed now.
  virtual bool can_restore(const CacheSnapshot& s) const = 0;
  // A snapshot written by CacheSnapshot::save() of this cache as it was
  // saved, read after load() restored that cache: one of this cache's. Throws
  // strata::Error when the bytes are truncated, of another shape, or lie
  // ahead of the cache.
  virtual std::unique_ptr<CacheSnapshot> load_snapshot(std::istream& in) = 0;
};

}  // namespace strata
