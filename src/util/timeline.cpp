#include "util/timeline.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace strata::timeline {

namespace {

struct Span {
  uint32_t track;  // index into Recorder::tracks
  std::string name;
  Clock::time_point begin, end;
  uint64_t bytes;
};

struct Track {
  std::string name;
  bool overlapping = false;
};

struct Recorder {
  std::mutex mutex;
  std::vector<Track> tracks;  // few: found by a linear search
  std::deque<Span> spans;     // grows without moving what it holds
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

void detail::record(std::string_view track, std::string_view name, Clock::time_point begin, Clock::time_point end,
                    uint64_t bytes, bool overlapping) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> guard(r.mutex);
  uint32_t t = 0;
  while (t < r.tracks.size() && r.tracks[t].name != track) ++t;
  if (t == r.tracks.size()) r.tracks.push_back(Track{std::string(track), false});
  r.tracks[t].overlapping = r.tracks[t].overlapping || overlapping;
  r.spans.push_back(Span{t, std::string(name), begin, end, bytes});
}

void enable() { detail::on.store(true, std::memory_order_relaxed); }

void check_writable(const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": could not write the timeline");
}

void write(const std::string& path) {
  std::vector<Track> tracks;
  std::deque<Span> spans;
  {
    Recorder& r = recorder();
    std::lock_guard<std::mutex> guard(r.mutex);
    tracks = r.tracks;
    spans.swap(r.spans);
  }
  // Rows: a track whose spans nest is one; an overlapping one is split into
  // lanes, each span to the first lane free at its start (by start time).
  std::vector<std::vector<Span*>> by_track(tracks.size());
  for (Span& s : spans) by_track[s.track].push_back(&s);
  std::vector<std::string> rows;
  std::vector<std::pair<Span*, size_t>> placed;  // span, row
  placed.reserve(spans.size());
  Clock::time_point zero = spans.empty() ? Clock::time_point{} : spans.front().begin;
  for (size_t t = 0; t < tracks.size(); ++t) {
    std::vector<Span*>& list = by_track[t];
    std::stable_sort(list.begin(), list.end(), [](const Span* a, const Span* b) { return a->begin < b->begin; });
    std::vector<Clock::time_point> lane_end;  // per lane of this track: where its last span ends
    const size_t first_row = rows.size();
    for (Span* s : list) {
      zero = std::min(zero, s->begin);
      size_t lane = 0;
      if (tracks[t].overlapping)
        while (lane < lane_end.size() && lane_end[lane] > s->begin) ++lane;
      if (lane == lane_end.size()) {
        lane_end.push_back(s->end);
        rows.push_back(lane == 0 ? tracks[t].name : tracks[t].name + " #" + std::to_string(lane + 1));
      }
      lane_end[lane] = std::max(lane_end[lane], s->end);
      placed.emplace_back(s, first_row + lane);
    }
  }
  auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - zero).count(); };
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    sep();
    out << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":" << i + 1 << ",\"args\":{\"name\":" << quoted(rows[i])
        << "}}";
  }
  char times[96];
  for (const auto& [s, row] : placed) {
    sep();
    std::snprintf(times, sizeof times, "\"ts\":%.3f,\"dur\":%.3f", us(s->begin), std::max(0.0, us(s->end) - us(s->begin)));
    out << "{\"ph\":\"X\",\"name\":" << quoted(s->name) << ",\"pid\":1,\"tid\":" << row + 1 << "," << times;
    if (s->bytes) out << ",\"args\":{\"bytes\":" << s->bytes << "}";
    out << "}";
  }
  out << "]}\n";
  out.close();
  if (!out) throw Error(path + ": could not write the timeline");
}

}  // namespace strata::timeline
