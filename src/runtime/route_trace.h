#pragma once
// Router traces (`generate --trace FILE`, `serve --trace FILE`): one JSON
// line per row a step computed, the experts its token chose in every layer:
//   {"seq": 3, "pos": 17, "token": 1234, "n_experts": 384, "experts": [[], [5, 81, ...], ...]}
// "n_experts" is the routed experts per layer; "experts" has one array per layer (empty for dense layers), each in the
// router's order. "seq" numbers the sequences of one run from 1 in the
// order they started (0: a row of no registered sequence). Prompt rows are
// traced too. A step's lines are held until the scheduler commits them,
// after it dropped the rows whose tokens were not kept (a speculative step's
// rejected drafts) or that computed a kept position again (a recurrent state
// rolled back): each position of a sequence appears once, as kept. Off by
// default, and never on in benchmarks (it writes a line per row). A write
// error stops tracing with one warning on stderr; generation goes on.
//
// `strata heat` (runtime/heat_summary.h) reads these files.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/route_observer.h"

namespace strata {

class KvCache;

class RouteTrace final : public RouteObserver {
 public:
  // Creates (truncates) `path`; throws strata::Error when it cannot.
  RouteTrace(const std::filesystem::path& path, int64_t layers, int64_t experts);
  ~RouteTrace() override;

  // The scheduler names the sequence whose rows use `cache`, and forgets it.
  void begin_sequence(const KvCache* cache);
  void end_sequence(const KvCache* cache);

  void routed(int64_t layer, size_t first, std::span<const Row> rows, std::span<const int32_t> ids,
              size_t k) override;
  void step_done(std::span<const Row> rows) override;
  // Drops this step's lines of `cache`'s sequence at positions [from, to).
  void discard(const KvCache* cache, int64_t from, int64_t to);
  // Writes this step's lines.
  void commit();

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  int64_t layers_, experts_;
  uint64_t next_seq_ = 1;
  std::unordered_map<const KvCache*, uint64_t> seq_;
  // The current forward step's choices: [row][layer] -> ids.
  std::vector<std::vector<std::vector<int32_t>>> step_;
  struct Line {
    const KvCache* cache;
    int64_t pos;
    std::string text;
  };
  std::vector<Line> pending_;  // lines not yet committed
  bool failed_ = false;
};

}  // namespace strata
