#include "pack/pull.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <cctype>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <map>
#include <set>

#include "formats/safetensors.h"
#include "model/checkpoint.h"
#include "pack/shard_feed.h"
#include "remote/remote_mirror.h"
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

// What every install starts with: the source opened (a hub revision
// pinned), the files it has and what it says of each, and the lock on DIR.
struct Start {
  RemoteSource src;
  std::vector<Wanted> files;
  nlohmann::json listing;
};

Start start_pull(const PullOptions& o, PullReport& report) {
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
  return Start{std::move(src), std::move(files), std::move(listing)};
}

// One pull at a time into a folder; the lock file sits beside the staging
// folder (which goes at the end) and is held until the process is done.
class DirLock {
 public:
  explicit DirLock(const fs::path& out) : path_(out / kPullLock) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) throw Error(out.string() + ": cannot create: " + ec.message());
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw Error(out.string() + ": another strata pull is writing there");
    }
  }
  ~DirLock() { ::close(fd_); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  // The work is done: the file goes (still held, so a pull starting now
  // fails its lock, then finds the finished install).
  void done() {
    std::error_code ec;
    fs::remove(path_, ec);
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

}  // namespace

PullReport pull_full(const PullOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  PullReport report;
  Start st = start_pull(o, report);
  RemoteSource& src = st.src;
  const std::vector<Wanted>& files = st.files;
  const nlohmann::json& listing = st.listing;
  const nlohmann::json pulled = {{"source", report.source}, {"files", listing}};

  std::error_code ec;
  const fs::path record_path = o.out / kPullRecord, staging = o.out / kPullStaging;
  if (RemoteMirror::is_mirror(o.out))
    throw Error(o.out.string() + " is a streaming install; completing one (strata upgrade) is not built yet");
  DirLock lock(o.out);

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
      lock.done();
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
    lock.done();
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
  lock.done();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata

namespace strata {

PullReport pull_streaming(const PullOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  PullReport report;
  Start st = start_pull(o, report);
  RemoteSource& src = st.src;
  if (!src.location().file.empty())
    throw Error(o.source + ": --streaming installs a safetensors model folder; a GGUF file is installed with --full");
  std::error_code ec;
  if (fs::exists(o.out / "manifest.json", ec) || fs::exists(o.out / kPackProgress, ec) || fs::exists(o.out / kPullStaging, ec))
    throw Error(o.out.string() + " holds a pack or a full install; choose another --out");
  DirLock lock(o.out);
  std::map<std::string, RemoteFileInfo> infos;
  for (const Wanted& w : st.files) infos[w.name] = w.info;
  if (RemoteMirror::is_mirror(o.out)) {
    const RemoteMirror before(o.out, o.env, o.retry);
    bool same = before.source() == report.source && before.files().size() == infos.size();
    for (const auto& [name, info] : before.files())
      same = same && infos.contains(name) && infos[name].size == info.size && infos[name].etag == info.etag &&
             infos[name].sha256 == info.sha256;
    if (!same)
      throw Error(o.out.string() + " is a streaming install of " + before.source() +
                  " as it was; the source has changed since (or is another): choose another --out");
  } else {
    RemoteMirror::create(o.out, report.source, infos, o.env("HF_ENDPOINT").value_or(""));
  }
  RemoteMirror mirror(o.out, o.env, o.retry);

  // Small files whole (resumably); every shard as a sparse file of its size.
  for (const Wanted& w : st.files) {
    const fs::path dest = o.out / w.name;
    if (w.name.ends_with(".safetensors")) {
      if (!fs::exists(dest, ec) || fs::file_size(dest, ec) != w.info.size) {
        const int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        const bool sized = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(w.info.size)) == 0;
        if (fd >= 0) ::close(fd);
        if (!sized) throw Error(dest.string() + ": cannot create: " + std::strerror(errno));
      }
      // The header: its length, then the JSON.
      mirror.ensure(w.name, 0, 8);
      uint8_t len[8];
      std::ifstream in(dest, std::ios::binary);
      in.read(reinterpret_cast<char*>(len), 8);
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
      if (!in || n > SafetensorsFile::kMaxHeaderBytes || 8 + n > w.info.size)
        throw Error(url_for_messages(src.url(w.name)) + ": not a safetensors file (a header of " + std::to_string(n) + " bytes)");
      mirror.ensure(w.name, 8, n);
    } else if (!fs::exists(dest, ec) || fs::file_size(dest, ec) != w.info.size) {
      report.fetched_bytes += src.download(w.name, w.info, dest);
    }
  }
  // The trunk: every tensor but the routed experts', fetched by range (runs
  // of tensors less than 1 MiB apart as one request).
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> runs;
  uint64_t trunk_bytes = 0;
  {
    const Checkpoint ck = open_checkpoint(o.out);
    std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> ranges;
    for (const std::string& name : ck.source->names()) {
      if (routed_expert_layer(name)) continue;
      const TensorView& t = ck.source->get(name);
      if (t.file.empty() || t.nbytes == 0) continue;
      ranges[fs::path(t.file).filename().string()].emplace_back(t.offset, t.offset + t.nbytes);
      trunk_bytes += t.nbytes;
    }
    for (auto& [file, rs] : ranges) {
      std::sort(rs.begin(), rs.end());
      for (const auto& [b, e] : rs) {
        auto& out = runs[file];
        if (!out.empty() && b <= out.back().second + (1u << 20))
          out.back().second = std::max(out.back().second, e);
        else
          out.emplace_back(b, e);
      }
    }
  }
  Progress progress("trunk", trunk_bytes, o.progress);
  for (const auto& [file, rs] : runs)
    for (const auto& [b, e] : rs) {
      mirror.ensure(file, b, e - b);
      progress.add(e - b);
    }
  progress.finish();
  report.fetched_bytes += mirror.stats().bytes;
  lock.done();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
