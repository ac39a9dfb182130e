#include "pack/upgrade.h"

#include <chrono>
#include <optional>

#include "pack/dir_lock.h"
#include "remote/block_sums.h"
#include "remote/remote_mirror.h"
#include "remote/sha256.h"
#include "util/error.h"
#include "util/progress.h"

namespace strata {

namespace fs = std::filesystem;

UpgradeReport upgrade_full(const UpgradeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!RemoteMirror::is_mirror(o.dir))
    throw Error(o.dir.string() + " is not a streaming install (strata pull --streaming makes one)");
  DirLock lock(o.dir);
  RemoteMirror mirror(o.dir, o.env, o.retry);
  if (!mirror.complete())
    throw Error(o.dir.string() + " is a streaming install that did not finish: run the same strata pull --streaming again");
  UpgradeReport report;
  report.source = mirror.source();
  report.files = static_cast<int64_t>(mirror.files().size());
  for (const auto& [name, info] : mirror.files()) report.bytes += info.size;
  if (mirror.full()) {
    report.already_full = true;
    report.local_bytes = report.bytes;
    lock.done();
    return report;
  }
  // Files downloaded whole at install (config, tokenizer, index) are there
  // whole: an install made before they were recorded says so now.
  for (const auto& [name, info] : mirror.files()) {
    std::error_code ec;
    if (!name.ends_with(".safetensors") && fs::file_size(o.dir / name, ec) == info.size && !ec)
      mirror.record_present(name, 0, info.size);
  }
  mirror.set_connections(o.connections);
  mirror.set_background_rate(o.max_rate);
  uint64_t missing = 0;
  for (const auto& r : mirror.missing()) missing += r.length;
  report.local_bytes = report.bytes - missing;

  auto fetch_missing = [&](const char* label) {
    const std::vector<RemoteMirror::Range> todo = mirror.missing();
    uint64_t total = 0;
    for (const auto& r : todo) total += r.length;
    if (total == 0) return;
    Progress progress(label, total, o.progress);
    // Nobody reads in this process: full-size pieces over every connection,
    // unless a rate is asked for (only Background fetches are paced).
    mirror.ensure_all(todo, o.max_rate > 0 ? FetchPriority::Background : FetchPriority::Demand,
                      [&](uint64_t n) { progress.add(n); });
    progress.finish();
  };
  fetch_missing("upgrade");
  // Whole files against what the source publishes: their sha256 (hub LFS
  // files), else the block sums (which the ranges were checked against as
  // they came; this reads them back from the drive once more).
  std::optional<BlockSums> sums;
  if (std::error_code ec; fs::exists(o.dir / kBlockSumsFile, ec)) sums = read_block_sums(o.dir / kBlockSumsFile);
  auto mismatch = [&](const std::string& name, const RemoteFileInfo& info) -> std::string {
    if (!info.sha256.empty()) {
      const std::string got = sha256_of_file(o.dir / name);
      return got == info.sha256 ? "" : "sha256 " + got + ", the source publishes " + info.sha256;
    }
    const std::optional<BadBlock> bad = first_bad_block(o.dir / name, name, *sums);
    if (bad) return bad->message;
    return "";
  };
  for (const auto& [name, info] : mirror.files()) {
    if (info.sha256.empty() && !(sums && sums->find(name))) continue;
    if (!mismatch(name, info).empty()) {
      mirror.forget(name);
      ++report.refetched;
      fetch_missing(("upgrade: " + name + " again").c_str());
      const std::string again = mismatch(name, info);
      if (!again.empty()) throw Error(o.dir.string() + ": " + name + " fetched twice has " + again);
    }
    ++report.verified;
  }
  report.fetched_bytes = mirror.stats().bytes;
  mirror.set_full();
  lock.done();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
