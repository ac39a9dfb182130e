#include "pack/pull.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <map>
#include <set>

#include "model/checkpoint.h"
#include "pack/shard_feed.h"
#include "storage/atomic_file.h"
#include "storage/pack_dir.h"
#include "util/error.h"
#include "util/json_file.h"
#include "util/progress.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// Files a model may have beside its weights; absent ones are skipped.
constexpr const char* kSideFiles[] = {"generation_config.json", "tokenizer.json",     "tokenizer_config.json",
                                      "special_tokens_map.json", "chat_template.jinja", "tiktoken.model"};
constexpr uint64_t kSmallFileLimit = 64ull << 20;

struct Wanted {
  std::string name;
  RemoteFileInfo info;
};

nlohmann::json record_of(const Wanted& w) {
  return {{"name", w.name}, {"size", w.info.size}, {"etag", w.info.etag}, {"sha256", w.info.sha256}};
}

// The weight files: the index's shards, else model.safetensors.
std::vector<std::string> weight_files(RemoteSource& src, const std::string& shown) {
  if (!src.stat("model.safetensors.index.json", /*optional=*/true).exists) return {"model.safetensors"};
  const std::optional<std::string> index = src.read_small("model.safetensors.index.json", kSmallFileLimit);
  if (!index) return {"model.safetensors"};
  const std::string where = shown + ": model.safetensors.index.json";
  nlohmann::json j = parse_json(*index, where);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(where + ": has no \"weight_map\" object");
  std::set<std::string> names;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(where + ": the file of " + tensor + " is not a string");
    const std::string f = file.get<std::string>();
    const bool plain = std::all_of(f.begin(), f.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
    });
    if (!plain || !f.ends_with(".safetensors") || f.starts_with("."))
      throw Error(where + ": a shard name that is not NAME.safetensors beside the index (letters, digits, '-', '_', '.')");
    names.insert(f);
  }
  if (names.empty()) throw Error(where + ": the weight_map is empty");
  std::vector<std::string> out = {"model.safetensors.index.json"};
  out.insert(out.end(), names.begin(), names.end());
  return out;
}

}  // namespace

PullReport pull_full(const PullOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  PullReport report;
  RemoteSource src(parse_source(o.source, o.env), o.retry);
  report.commit = src.commit();
  report.source = src.location().kind == SourceLocation::Kind::Hub && !report.commit.empty()
                      ? "hf://" + src.location().repo + "@" + report.commit
                      : o.source;

  // What to fetch, and what the source says of each file now.
  std::vector<std::string> names;
  if (!src.location().file.empty()) {
    names.push_back(src.location().file);  // a GGUF file holds its config and tokenizer
  } else {
    names.push_back("config.json");
    for (const char* side : kSideFiles) names.push_back(side);
    for (const std::string& w : weight_files(src, o.source)) names.push_back(w);
  }
  std::vector<Wanted> files;
  for (const std::string& name : names) {
    const bool required = name == "config.json" || name.ends_with(".safetensors") || name.ends_with(".index.json") ||
                          name == src.location().file;
    Wanted w{name, src.stat(name, /*optional=*/!required)};
    if (!w.info.exists) {
      if (required) throw Error(o.source + ": has no " + name);
      continue;
    }
    if (!name.ends_with(".safetensors") && name != src.location().file && w.info.size > kSmallFileLimit)
      throw Error(url_for_messages(src.url(name)) + ": " + std::to_string(w.info.size) +
                  " bytes, more than such a file may have");
    files.push_back(std::move(w));
    report.bytes += files.back().info.size;
  }
  report.files = static_cast<int64_t>(files.size());
  nlohmann::json listing = nlohmann::json::array();
  for (const Wanted& w : files) listing.push_back(record_of(w));
  const nlohmann::json pulled = {{"source", report.source}, {"files", listing}};

  std::error_code ec;
  const fs::path record_path = o.out / kPullRecord, staging = o.out / kPullStaging;
  fs::create_directories(o.out, ec);
  if (ec) throw Error(o.out.string() + ": cannot create: " + ec.message());
  // One pull at a time into a folder; the lock sits beside the staging
  // folder (which goes at the end) and is held until then.
  const int lock_fd = ::open((o.out / kPullLock).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (lock_fd >= 0) ::close(lock_fd);
    throw Error(o.out.string() + ": another strata pull is writing there");
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{lock_fd};

  const fs::path listing_path = staging / "listing.json";
  auto read_or_null = [](const fs::path& p) {
    try {
      return read_json_file(p);
    } catch (const Error&) {
      return nlohmann::json();
    }
  };
  const bool has_manifest = fs::exists(o.out / "manifest.json", ec);
  if (has_manifest) {
    // Killed while the staging folder was being removed: the record is there.
    const nlohmann::json old = read_or_null(record_path);
    if (old.is_object() && old.value("files", nlohmann::json()) == listing) fs::remove_all(staging, ec);
  }
  const bool has_staging = fs::exists(staging, ec);
  if (has_manifest && !has_staging) {
    // A finished install: unchanged files (a new commit that changed none of
    // them included) need nothing; anything else is not this install.
    const nlohmann::json old = read_or_null(record_path);
    if (old.is_object() && old.value("files", nlohmann::json()) == listing && old["source"].is_string()) {
      report.source = old["source"].get<std::string>();
      report.already_pulled = true;
      fs::remove(o.out / kPullLock, ec);
      report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return report;
    }
    throw Error(o.out.string() + " already holds a pack" +
                (old.is_object() ? " pulled from " + old.value("source", std::string("?")) + ", and the source has changed since"
                                 : " that was not pulled from " + report.source) +
                "; remove it or choose another --out");
  }
  if (!has_staging && fs::exists(o.out / kPackProgress, ec))
    throw Error(o.out.string() + " holds a pack in the making that this pull did not start (strata pack?); "
                "remove it or choose another --out");
  if (has_manifest && has_staging) {
    // Killed after the pack was complete: only the record was missing.
    if (read_or_null(listing_path) != listing)
      throw Error(o.out.string() + " already holds a pack, and the source has changed since it was pulled; "
                  "remove it or choose another --out");
    write_file_atomically(record_path, pulled.dump(1));
    fs::remove_all(staging, ec);
    fs::remove(o.out / kPullLock, ec);
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return report;
  }

  // Download into the staging folder, each finished file recorded so that a
  // re-run keeps it while the source still says the same of it.
  const fs::path into = staging / "files", done_path = staging / "done.json";
  // The source changed since an interrupted run (another size, ETag or
  // hash of any file), or that run's record of it is gone: what it packed
  // may not be of this source, and the pack's own signature cannot tell when
  // no hash is published.
  const bool start_over = has_staging && read_or_null(listing_path) != listing;
  if (start_over && o.notice && fs::exists(o.out / kPackProgress, ec))
    o.notice(o.out.string() + ": the source changed since the interrupted pull: starting over");
  fs::create_directories(into, ec);
  if (ec) throw Error(into.string() + ": cannot create: " + ec.message());
  write_file_atomically(listing_path, listing.dump());
  nlohmann::json done = nlohmann::json::object();
  if (fs::exists(done_path, ec)) {
    try {
      done = read_json_file(done_path);
      if (!done.is_object()) done = nlohmann::json::object();
    } catch (const Error&) {
      done = nlohmann::json::object();
    }
  }
  Progress progress("pull", report.bytes, o.progress);
  // A safetensors checkpoint's shards arrive while they are packed
  // (pack/shard_feed.h); every other file is fetched whole first.
  const bool feed_shards = src.location().file.empty();
  std::vector<const Wanted*> todo;
  for (const Wanted& w : files) {
    if (feed_shards && w.name.ends_with(".safetensors")) continue;
    const fs::path dest = into / w.name;
    if (done.contains(w.name) && done[w.name] == record_of(w) && fs::exists(dest, ec) &&
        fs::file_size(dest, ec) == w.info.size) {
      progress.add(w.info.size);
    } else {
      todo.push_back(&w);
    }
  }
  // Files in parallel, one connection each; the first failure stops the
  // others from starting a file and is the run's error (the files finished
  // by then are recorded and kept).
  std::mutex mu;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  auto worker = [&](RemoteSource& conn) {
    try {
      for (size_t i = next++; i < todo.size() && !failed; i = next++) {
        const Wanted& w = *todo[i];
        const fs::path dest = into / w.name;
        std::error_code gone;
        fs::remove(dest, gone);
        const uint64_t fetched = conn.download(w.name, w.info, dest, [&](uint64_t n) {
          std::lock_guard<std::mutex> lock(mu);
          progress.add(n);
        });
        std::lock_guard<std::mutex> lock(mu);
        report.fetched_bytes += fetched;
        done[w.name] = record_of(w);
        write_file_atomically(done_path, done.dump());
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  const size_t connections = std::clamp<size_t>(static_cast<size_t>(std::max(o.connections, 1)), 1, std::max<size_t>(todo.size(), 1));
  std::vector<RemoteSource> conns;
  for (size_t c = 1; c < connections; ++c) conns.push_back(src.another_connection());
  std::vector<std::thread> threads;
  for (RemoteSource& c : conns) threads.emplace_back(worker, std::ref(c));
  worker(src);
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);

  // Only this source's files go into the pack (its signature hashes the
  // folder): what an earlier version of the source left is removed.
  for (const auto& e : fs::directory_iterator(into)) {
    const std::string name = e.path().filename().string();
    if (std::none_of(files.begin(), files.end(), [&](const Wanted& w) { return w.name == name; }))
      fs::remove_all(e.path(), ec);
  }
  PackOptions po;
  po.source = src.location().file.empty() ? into : into / src.location().file;
  po.out = o.out;
  po.drives = o.drives;
  po.probe = o.probe;
  po.notice = o.notice;
  po.source_label = report.source;
  po.start_over = start_over;
  if (!feed_shards) {
    progress.finish();
    po.progress = o.progress;
    report.pack = pack_model(po);
  } else {
    std::vector<FeedShard> shards;
    for (const Wanted& w : files)
      if (w.name.ends_with(".safetensors")) shards.push_back({w.name, w.info});
    ShardFeed feed(src, std::move(shards), into, o.connections, [&](uint64_t n) {
      std::lock_guard<std::mutex> lock(mu);
      progress.add(n);
    });
    feed.prepare();
    // Each layer's routed-expert bytes, by shard, from the headers.
    std::map<int64_t, std::vector<ShardRange>> layer_ranges;
    {
      const Checkpoint ck = open_checkpoint(into);
      for (const std::string& name : ck.source->names()) {
        const auto layer = routed_expert_layer(name);
        if (!layer) continue;
        const TensorView& t = ck.source->get(name);
        if (t.file.empty()) continue;
        layer_ranges[*layer].push_back({fs::path(t.file).filename().string(), t.offset, t.nbytes});
      }
    }
    feed.start();
    PackOptions::Feed f;
    f.before_layer = [&](int64_t l) { feed.wait_for(layer_ranges[l]); };
    f.after_layer = [&](int64_t l) { feed.release(layer_ranges[l]); };
    f.before_trunk = [&] { feed.wait_all(); };
    // What the source says of each shard's content: its sha256, else its
    // size and ETag (the same bytes from another server then make another
    // signature, which only renames the expert files).
    for (const Wanted& w : files)
      if (w.name.ends_with(".safetensors"))
        f.source_identity += w.name + " " + (w.info.sha256.empty() ? std::to_string(w.info.size) + " " + w.info.etag : w.info.sha256) + "\n";
    po.feed = std::move(f);
    report.pack = pack_model(po);
    report.fetched_bytes += feed.fetched_bytes();
    progress.finish();
  }
  write_file_atomically(record_path, pulled.dump(1));
  fs::remove_all(staging, ec);
  fs::remove(o.out / kPullLock, ec);  // still held: a pull starting now fails its lock, then finds the record
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
