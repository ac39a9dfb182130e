#include "runtime/route_trace.h"

#include <cstdio>
#include <string>

#include "util/error.h"

namespace strata {

RouteTrace::RouteTrace(const std::filesystem::path& path, int64_t layers, int64_t experts)
    : path_(path), out_(path, std::ios::trunc), layers_(layers), experts_(experts) {
  if (!out_) throw Error(path.string() + ": cannot write the router trace");
}

RouteTrace::~RouteTrace() = default;

void RouteTrace::begin_sequence(const KvCache* cache) { seq_[cache] = next_seq_++; }

void RouteTrace::end_sequence(const KvCache* cache) { seq_.erase(cache); }

void RouteTrace::routed(int64_t layer, size_t first, std::span<const Row> rows, std::span<const int32_t> ids,
                        size_t k) {
  if (step_.size() < first + rows.size()) step_.resize(first + rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    auto& row = step_[first + r];
    if (row.size() != static_cast<size_t>(layers_)) row.assign(static_cast<size_t>(layers_), {});
    if (layer < 0 || layer >= layers_) continue;
    row[static_cast<size_t>(layer)].assign(ids.begin() + static_cast<long>(r * k),
                                           ids.begin() + static_cast<long>((r + 1) * k));
  }
}

void RouteTrace::step_done(std::span<const Row> rows) {
  if (failed_) return;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto it = seq_.find(rows[r].cache);
    std::string line = "{\"seq\": " + std::to_string(it == seq_.end() ? 0 : it->second) + ", \"pos\": " +
                       std::to_string(rows[r].pos) + ", \"token\": " + std::to_string(rows[r].token) +
                       ", \"n_experts\": " + std::to_string(experts_) + ", \"experts\": [";
    for (int64_t l = 0; l < layers_; ++l) {
      line += l ? ", [" : "[";
      if (r < step_.size() && step_[r].size() == static_cast<size_t>(layers_)) {
        const auto& ids = step_[r][static_cast<size_t>(l)];
        for (size_t j = 0; j < ids.size(); ++j) line += (j ? ", " : "") + std::to_string(ids[j]);
      }
      line += "]";
    }
    line += "]}\n";
    pending_.push_back({rows[r].cache, rows[r].pos, std::move(line)});
  }
  for (auto& row : step_)
    for (auto& ids : row) ids.clear();
}

void RouteTrace::discard(const KvCache* cache, int64_t from, int64_t to) {
  std::erase_if(pending_, [&](const Line& l) { return l.cache == cache && l.pos >= from && l.pos < to; });
}

void RouteTrace::commit() {
  if (!failed_) {
    for (const Line& l : pending_) out_ << l.text;
    out_.flush();
    if (!out_) {
      failed_ = true;
      std::fprintf(stderr, "strata: warning: %s: cannot write the router trace (disk full?); tracing stops\n",
                   path_.string().c_str());
    }
  }
  pending_.clear();
}

}  // namespace strata
