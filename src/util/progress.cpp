#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace strata {

bool stderr_is_terminal() { return ::isatty(2) == 1; }

Progress::Progress(std::string label, uint64_t total, bool enabled, ProgressUnit unit, bool quiet_if_quick)
    : label_(std::move(label)),
      total_(std::max<uint64_t>(total, 1)),
      enabled_(enabled),
      tty_(stderr_is_terminal()),
      unit_(unit),
      quiet_if_quick_(quiet_if_quick) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::add(uint64_t n) {
  done_ += n;
  maybe_draw();
}

void Progress::set(uint64_t done) {
  done_ = done;
  maybe_draw();
}

void Progress::maybe_draw() {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (quiet_if_quick_ && !drawn_ && now - start_ < std::chrono::milliseconds(500)) return;
  if (now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2000))) return;
  last_ = now;
  draw(false);
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (quiet_if_quick_ && !drawn_ && std::chrono::steady_clock::now() - start_ < std::chrono::milliseconds(500)) return;
  draw(true);
}

void Progress::draw(bool final) {
  drawn_ = true;
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
  char amount[96];
  if (unit_ == ProgressUnit::Bytes)
    std::snprintf(amount, sizeof amount, "%.2f / %.2f GB  %.0f MB/s", done_ / 1e9, total_ / 1e9, rate / 1e6);
  else
    std::snprintf(amount, sizeof amount, "%llu / %llu tokens  %.1f tok/s", static_cast<unsigned long long>(done_),
                  static_cast<unsigned long long>(total_), rate);
  std::fprintf(stderr, "%s%s [%s] %3d%%  %s%s%s", tty_ ? "\r" : "", label_.c_str(), bar, static_cast<int>(frac * 100),
               amount, tail, tty_ && !final ? "   " : "\n");
  std::fflush(stderr);
}

}  // namespace strata
