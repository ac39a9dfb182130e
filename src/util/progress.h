#pragma once
// A one-line progress bar on stderr (done of a total, rate, ETA): redrawn in
// place on a terminal, a line every two seconds otherwise. Bytes (load,
// pack, synth) or tokens (prefill, compare).
//
// Callers that show progress only to a person (generate, serve, compare)
// enable it only when stderr is a terminal (stderr_is_terminal()): what
// tests, pipes and --json read stays as it was.
#include <chrono>
#include <cstdint>
#include <string>

namespace strata {

enum class ProgressUnit { Bytes, Tokens };

class Progress {
 public:
  // `quiet_if_quick`: nothing at all is drawn for work that ends within half
  // a second (a short prompt's prefill is no news).
  Progress(std::string label, uint64_t total, bool enabled, ProgressUnit unit = ProgressUnit::Bytes,
           bool quiet_if_quick = false);
  void add(uint64_t n);
  void set(uint64_t done);  // absolute
  void finish();
  uint64_t done() const { return done_; }

 private:
  void maybe_draw();
  void draw(bool final);
  std::string label_;
  uint64_t total_, done_ = 0;
  bool enabled_, tty_;
  ProgressUnit unit_;
  bool quiet_if_quick_, drawn_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

bool stderr_is_terminal();

}  // namespace strata
