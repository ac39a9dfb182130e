#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace strata {

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(std::max<uint64_t>(total, 1)), enabled_(enabled), tty_(::isatty(2) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::add(uint64_t bytes) {
  done_ += bytes;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2000))) return;
  last_ = now;
  draw(false);
}

void Progress::finish() {
  if (enabled_) draw(true);
}

void Progress::draw(bool final) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
  const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0;
  constexpr int width = 30;
  const int fill = static_cast<int>(frac * width);
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  char tail[32] = "";
  if (!final && rate > 0) {
    const long s = static_cast<long>(static_cast<double>(total_ - std::min(done_, total_)) / rate);
    std::snprintf(tail, sizeof tail, "  ETA %ld:%02ld", s / 60, s % 60);
  } else if (final) {
    std::snprintf(tail, sizeof tail, "  in %.1f s", secs);
  }
  std::fprintf(stderr, "%s%s [%s] %3d%%  %.2f / %.2f GB  %.0f MB/s%s%s", tty_ ? "\r" : "", label_.c_str(), bar,
               static_cast<int>(frac * 100), done_ / 1e9, total_ / 1e9, rate / 1e6, tail,
               tty_ && !final ? "   " : "\n");
  std::fflush(stderr);
}

}  // namespace strata
