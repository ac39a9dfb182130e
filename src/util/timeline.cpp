#include "util/timeline.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace strata::timeline {

namespace {

struct Span {
  std::string track, name;
  Clock::time_point begin, end;
  uint64_t bytes;
};

std::mutex& lock() {
  static std::mutex m;
  return m;
}
std::vector<Span>& spans() {
  static std::vector<Span> s;
  return s;
}

}  // namespace

void detail::record(std::string_view track, std::string_view name, Clock::time_point begin, Clock::time_point end,
                    uint64_t bytes) {
  std::lock_guard<std::mutex> guard(lock());
  spans().push_back(Span{std::string(track), std::string(name), begin, end, bytes});
}

void enable() { detail::on.store(true, std::memory_order_relaxed); }

size_t size() {
  std::lock_guard<std::mutex> guard(lock());
  return spans().size();
}

void write(const std::string& path) {
  std::vector<Span> all;
  {
    std::lock_guard<std::mutex> guard(lock());
    all = spans();
  }
  // One trace "thread" per track, numbered in the order tracks first appear,
  // each named by a metadata event (Perfetto shows the names).
  std::vector<std::string> tracks;
  Clock::time_point zero = all.empty() ? Clock::time_point{} : all.front().begin;
  for (const Span& s : all) {
    zero = std::min(zero, s.begin);
    if (std::find(tracks.begin(), tracks.end(), s.track) == tracks.end()) tracks.push_back(s.track);
  }
  auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - zero).count(); };
  nlohmann::json events = nlohmann::json::array();
  for (size_t i = 0; i < tracks.size(); ++i)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", i + 1}, {"args", {{"name", tracks[i]}}}});
  for (const Span& s : all) {
    const size_t tid = static_cast<size_t>(std::find(tracks.begin(), tracks.end(), s.track) - tracks.begin()) + 1;
    nlohmann::json e = {{"ph", "X"}, {"name", s.name}, {"pid", 1}, {"tid", tid}, {"ts", us(s.begin)},
                        {"dur", std::max(0.0, us(s.end) - us(s.begin))}};
    if (s.bytes) e["args"] = {{"bytes", s.bytes}};
    events.push_back(std::move(e));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << '\n';
  out.close();
  if (!out) throw Error(path + ": could not write the timeline");
}

}  // namespace strata::timeline
