#pragma once
// A one-line progress bar on stderr (bytes done of a total, rate, ETA):
// redrawn in place on a terminal, a line every two seconds otherwise.
#include <chrono>
#include <cstdint>
#include <string>

namespace strata {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled);
  void add(uint64_t bytes);
  void finish();
  uint64_t done() const { return done_; }

 private:
  void draw(bool final);
  std::string label_;
  uint64_t total_, done_ = 0;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace strata
