#include "runtime/install_warmup.h"

#include <algorithm>
#include <chrono>

#include "model/checkpoint.h"
#include "model/expert_catalog.h"
#include "model/expert_heat.h"
#include "model/weights.h"
#include "remote/remote_mirror.h"
#include "runtime/heat_summary.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/progress.h"

namespace strata {

namespace fs = std::filesystem;

InstallWarmupReport warm_install(const InstallWarmupOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!RemoteMirror::is_mirror(o.dir))
    throw Error(o.dir.string() + " is not a streaming install (strata pull --streaming makes one): nothing to warm");
  if (!RemoteMirror::is_complete(o.dir))
    throw Error(o.dir.string() + " is a streaming install that did not finish: run the same strata pull --streaming again");
  InstallWarmupReport report;
  const std::shared_ptr<RemoteMirror> mirror = RemoteMirror::open_shared(o.dir);

  // Where every expert's bytes are.
  const Checkpoint ck = open_checkpoint(o.dir);
  WeightBinder binder(*ck.source, ck.config);
  const ExpertBindFn bind = expert_binder(ck.config, *ck.source, binder);
  const std::unique_ptr<Storage> storage = make_storage();
  const ExpertCatalog catalog = catalog_from_bound_experts(ck.config, bind, *ck.source, *storage);

  // The ranking.
  std::vector<RankedExpert> ranked;
  if (!o.from.empty()) {
    ranked = hottest_experts(o.from);
    report.heat = std::to_string(o.from.size()) + " trace/heat file(s)";
  } else {
    const fs::path path = default_heat_path(ck.identity);
    // Heat is kept for the decoder layers (not an MTP layer's).
    const int64_t layers = std::min<int64_t>(ck.config.num_layers, static_cast<int64_t>(catalog.layers.size()));
    int64_t experts = 0;
    for (const auto& l : catalog.layers) experts = std::max<int64_t>(experts, static_cast<int64_t>(l.size()));
    const ExpertHeat heat = ExpertHeat::load(path, ck.identity, layers, experts);
    for (const auto& [l, e] : heat.hottest(static_cast<size_t>(layers * experts)))
      ranked.push_back({l, e, heat.count(l, e)});
    report.heat = path.string();
    if (ranked.empty() && o.any_order_without_heat) {
      for (int64_t l = 0; l < layers; ++l)
        for (int64_t e = 0; e < static_cast<int64_t>(catalog.layers[l].size()); ++e) ranked.push_back({l, e, 0});
      report.heat = "no heat: layer by layer";
    }
    if (ranked.empty())
      throw Error(o.dir.string() + ": no heat recorded for this install yet (" + path.string() +
                  "): give router traces or heat files (strata warm --from, serve --warm-from)");
  }
  report.ranked = static_cast<int64_t>(ranked.size());

  mirror->set_background_rate(o.max_rate);
  uint64_t budget = o.budget_bytes;
  if (o.budget_share > 0) {
    uint64_t all = 0;
    for (const auto& layer : catalog.layers)
      for (const StreamedExpert& e : layer)
        for (const ExpertRead& r : e.reads) all += r.length;
    budget = std::max<uint64_t>(1, static_cast<uint64_t>(o.budget_share * static_cast<double>(all)));
  }
  // What each expert reads, by file name (the mirror's names).
  auto ranges_of = [&](const StreamedExpert& e) {
    std::vector<RemoteMirror::Range> out;
    for (const ExpertRead& r : e.reads)
      out.push_back({fs::path(storage->file(r.file).path).filename().string(), r.offset, r.length});
    return out;
  };
  Progress progress("warm", budget, o.progress && budget > 0);
  if (o.connections > 0) mirror->set_connections(o.connections);
  const size_t batch = static_cast<size_t>(o.connections > 0 ? o.connections : 4);
  std::vector<RemoteMirror::Range> todo;
  int64_t in_batch = 0;
  uint64_t batch_bytes = 0;  // what the batch's experts lacked
  // One batch, given up when stop() says so (what is in flight still lands).
  auto flush = [&] {
    if (todo.empty()) return;
    const bool finished = mirror->ensure_all(todo, FetchPriority::Background, {}, o.stop);
    if (finished) {
      report.warmed += in_batch;
      report.fetched_bytes += batch_bytes;
      progress.add(batch_bytes);
    } else {
      report.stopped = true;
    }
    todo.clear();
    in_batch = 0;
    batch_bytes = 0;
  };
  uint64_t planned = 0;
  for (const RankedExpert& x : ranked) {
    if (x.layer < 0 || x.layer >= static_cast<int64_t>(catalog.layers.size()) ||
        x.expert >= static_cast<int64_t>(catalog.layers[x.layer].size()))
      continue;  // a trace of another model's shape: its ids name no expert here
    const std::vector<RemoteMirror::Range> ranges = ranges_of(catalog.at(x.layer, x.expert));
    uint64_t missing = 0;
    for (const auto& r : ranges)
      if (!mirror->present(r.file, r.offset, r.length)) missing += r.length;
    if (o.budget_share > 0) {
      // A share of all experts: those already on the drive count in it (a
      // re-run does not fetch another share).
      uint64_t bytes = 0;
      for (const auto& r : ranges) bytes += r.length;
      if (planned + bytes > budget) {
        report.budget_reached = true;
        break;
      }
      planned += bytes - missing;
    }
    if (missing == 0) {
      ++report.already_local;
      continue;
    }
    if (budget > 0 && planned + missing > budget) {
      report.budget_reached = true;
      break;
    }
    if (o.stop && o.stop()) {
      report.stopped = true;
      break;
    }
    planned += missing;
    batch_bytes += missing;
    todo.insert(todo.end(), ranges.begin(), ranges.end());
    if (++in_batch >= static_cast<int64_t>(batch)) flush();
    if (report.stopped) break;
  }
  if (!report.stopped) flush();
  progress.finish();
  mirror->set_background_rate(0);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
