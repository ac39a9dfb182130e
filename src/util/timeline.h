#pragma once
// A timeline of what the process did and when, for finding where a drive or
// the step sat idle: spans (a track, a name, a start and an end, and an
// optional byte count) recorded from any thread, written as Chrome's trace
// event format (JSON: open it in Perfetto or chrome://tracing; each track a
// row). Off until enable(): while off, a call is one relaxed load (so the
// hot paths may call span() always); on, a span costs a clock read, a lock
// and its name kept in memory (about 60 bytes) until write().
//
// Tracks in use: "phase" (the prompt, up to the first token, and the
// decode after it), "step" (the model's layers' sublayers, the output head
// and the waits for expert reads, on the thread that runs the step; on a GPU
// backend the host's recording, not the GPU's work) and "drive N (name)"
// (each read piece from its issue to its completion; background reads, the
// next layer's guesses, named so).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::timeline {

using Clock = std::chrono::steady_clock;

namespace detail {
inline std::atomic<bool> on{false};
void record(std::string_view track, std::string_view name, Clock::time_point begin, Clock::time_point end,
            uint64_t bytes, bool overlapping);
}  // namespace detail

inline bool enabled() { return detail::on.load(std::memory_order_relaxed); }
// From now on spans are kept (in memory, until write()).
void enable();

// A span on a track whose spans nest (one thing at a time, or one inside
// another).
inline void span(std::string_view track, std::string_view name, Clock::time_point begin, Clock::time_point end,
                 uint64_t bytes = 0) {
  if (enabled()) detail::record(track, name, begin, end, bytes, false);
}
// A span on a track whose spans overlap (reads in flight together): written
// in lanes, tracks "TRACK", "TRACK #2", ..., each a row of spans that do not
// overlap (viewers drop or misdraw overlapping spans of one row).
inline void overlapping_span(std::string_view track, std::string_view name, Clock::time_point begin,
                             Clock::time_point end, uint64_t bytes = 0) {
  if (enabled()) detail::record(track, name, begin, end, bytes, true);
}

// Fails (strata::Error naming it) unless `path` can be written: before a run,
// so that a bad path costs nothing. Creates the file.
void check_writable(const std::string& path);
// Every span kept so far, as {"traceEvents": [...]} (complete events, "ph":
// "X", times in µs from the first span's start; "args": {"bytes": n} where
// given; a metadata event naming each track), written to `path`; the spans
// are let go. Throws strata::Error when it cannot be written.
void write(const std::string& path);

// A span from construction to destruction on `track` (when enabled), named
// `what` or "what index" (the name is made only when the span is kept).
class Scope {
 public:
  explicit Scope(std::string_view track, std::string_view what, int64_t index = -1)
      : track_(track), what_(what), index_(index), begin_(enabled() ? Clock::now() : Clock::time_point{}) {}
  ~Scope() {
    if (begin_ != Clock::time_point{})
      span(track_, index_ < 0 ? std::string(what_) : std::string(what_) + " " + std::to_string(index_), begin_,
           Clock::now());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string_view track_, what_;
  int64_t index_;
  Clock::time_point begin_;
};

}  // namespace strata::timeline
