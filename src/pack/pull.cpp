#include "pack/pull.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <map>

#include "formats/safetensors.h"
#include "model/checkpoint.h"
#include "model/expert_catalog.h"
#include "model/weights.h"
#include "pack/remote_headers.h"
#include "pack/shard_feed.h"
#include "remote/block_sums.h"
#include "remote/remote_mirror.h"
#include "storage/atomic_file.h"
#include "storage/storage.h"
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
constexpr uint64_t kBlockSumsLimit = 256ull << 20;  // 16 digits a block: 16 TB of weights in 1 MiB blocks

struct Wanted {
  std::string name;
  RemoteFileInfo info;
};

nlohmann::json record_of(const Wanted& w) {
  return {{"name", w.name}, {"size", w.info.size}, {"etag", w.info.etag}, {"sha256", w.info.sha256}};
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
    for (const std::string& w : remote_weight_files(src, o.source)) names.push_back(w);
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
    if (!name.ends_with(".safetensors") && name != src.location().file && w.info.size > kRemoteSmallFileLimit)
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


// Sums of a size other than the source serves are of another version of
// the file: one clear error (`where` names the sums).
void check_sums_describe(const BlockSums& sums, const std::vector<Wanted>& files, const std::string& where) {
  for (const Wanted& w : files)
    if (const BlockSums::File* f = sums.find(w.name); f && f->size != w.info.size)
      throw Error(where + ": describes another version of " + w.name + " (" + std::to_string(f->size) +
                  " bytes, the source has " + std::to_string(w.info.size) + "): the source's sums are stale");
}

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
    throw Error(o.out.string() + " is a streaming install; `strata upgrade " + o.out.string() + " --full` completes it");
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
  // The source's block sums, when it publishes them: each file is checked
  // against them too (the only check of a server that publishes no sha256).
  std::optional<BlockSums> sums;
  if (const std::optional<std::string> text = src.read_small(kBlockSumsFile, kBlockSumsLimit)) {
    sums = parse_block_sums(*text, url_for_messages(src.url(kBlockSumsFile)));
    check_sums_describe(*sums, files, url_for_messages(src.url(kBlockSumsFile)));
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
        if (sums && w.info.sha256.empty())  // a matched sha256 says more
          if (const std::optional<BadBlock> bad = first_bad_block(dest, w.name, *sums)) {
            fs::remove(dest, gone);
            throw Error(url_for_messages(conn.url(w.name)) + ": the download is not what the source publishes: " +
                        bad->message + "; it was removed (run again to fetch it anew)");
          }
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
    if (sums) feed.check_blocks(&*sums);
    feed.prepare();
    // Each layer's routed-expert bytes, by shard, from the headers.
    std::map<int64_t, std::vector<ShardRange>> layer_ranges;
    {
      std::optional<Checkpoint> opened;
      try {
        opened.emplace(open_checkpoint(into));
      } catch (const Error& e) {
        // A header spoiled on its way (none of it checked yet, where the
        // source publishes no block sums): fetched anew by the next run,
        // rather than failing the same way on every run.
        if (feed.forget_partial() > 0)
          throw Error(std::string(e.what()) + " (shards whose headers could be what is wrong will be fetched again by "
                      "the next run)");
        throw;
      }
      const Checkpoint& ck = *opened;
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
  // The source's block sums, when it publishes them: every range fetched
  // later is then checked (remote/block_sums.h).
  Wanted sums{kBlockSumsFile, src.stat(kBlockSumsFile, /*optional=*/true)};
  if (sums.info.exists) {
    if (sums.info.size > kBlockSumsLimit)
      throw Error(url_for_messages(src.url(sums.name)) + ": " + std::to_string(sums.info.size) +
                  " bytes, more than such a file may have");
    st.files.insert(st.files.begin(), sums);
  }
  // Later runs fetch from the source as it is then: only a pinned hub
  // commit, files whose every answer names their version (an ETag), or
  // files the source's block sums describe (every byte fetched is checked
  // against them) can be told from another version of themselves.
  if (src.commit().empty())
    for (const Wanted& w : st.files)
      if (w.info.etag.empty() && !sums.info.exists)
        throw Error(o.source + ": " + w.name + " comes without an ETag (and no hub commit pins it, nor block sums "
                    "describe it): a streaming install could not tell a changed file from this one; use --full, or "
                    "publish its block sums (strata checksums)");
  std::error_code ec;
  DirLock lock(o.out);
  std::map<std::string, RemoteFileInfo> infos;
  for (const Wanted& w : st.files) infos[w.name] = w.info;
  const fs::path sums_path = o.out / kBlockSumsFile;
  if (fs::exists(sums_path, ec)) {
    try {
      read_block_sums(sums_path);
    } catch (const Error&) {
      fs::remove(sums_path, ec);  // damaged on the drive: fetched anew below
    }
  }
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
    // (The lock, and a record a killed run was writing, are this pull's own.)
    for (const auto& e : fs::directory_iterator(o.out, ec))
      if (e.path().filename() != kPullLock && e.path().filename() != std::string(kRemoteMirrorRecord) + ".tmp")
        throw Error(o.out.string() + " is not empty; a streaming install goes into a folder of its own");
    RemoteMirror::create(o.out, report.source, infos, o.env("HF_ENDPOINT").value_or(""));
  }
  if (!sums.info.exists && o.notice)
    o.notice(o.source + " publishes no " + kBlockSumsFile + ": experts fetched later are checked by transport only "
             "(status, range, ETag) until `strata upgrade " + o.out.string() + " --full` checks whole files against "
             "their sha256 (where the source publishes one)");
  std::optional<BlockSums> block_sums;
  if (sums.info.exists) {
    // Into place only once it reads as sums of these files: the mirror
    // trusts what it finds there.
    if (!fs::exists(sums_path, ec) || fs::file_size(sums_path, ec) != sums.info.size) {
      const fs::path fresh = o.out / (std::string(kBlockSumsFile) + ".new");
      report.fetched_bytes += src.download(sums.name, sums.info, fresh);
      try {
        check_sums_describe(read_block_sums(fresh), st.files, url_for_messages(src.url(sums.name)));
      } catch (const Error& e) {
        fs::remove(fresh, ec);
        throw Error(std::string(e.what()) + " (run again to fetch it anew)");
      }
      fs::rename(fresh, sums_path);
    }
    block_sums = read_block_sums(sums_path);
    for (const Wanted& w : st.files) {
      if (!w.name.ends_with(".safetensors") || block_sums->find(w.name)) continue;
      if (src.commit().empty() && w.info.etag.empty())
        throw Error(o.source + ": " + w.name + " comes without an ETag (and no hub commit pins it, nor do its block "
                    "sums describe it): a streaming install could not tell a changed file from this one; use --full");
      if (o.notice)
        o.notice(std::string(kBlockSumsFile) + " has no sums for " + w.name + ": its ranges are checked by transport only");
    }
  }
  RemoteMirror mirror(o.out, o.env, o.retry);
  mirror.set_connections(o.connections);

  // Small files whole (resumably); every shard as a sparse file of its size.
  for (const Wanted& w : st.files) {
    const fs::path dest = o.out / w.name;
    if (w.name.ends_with(".safetensors")) {
      if (!fs::exists(dest, ec) || fs::file_size(dest, ec) != w.info.size) {
        mirror.forget(w.name);  // whatever the log said of an earlier file there
        create_sparse_file(dest, w.info.size);
      }
      // The header: its length, then the JSON.
      mirror.ensure(w.name, 0, 8);
      uint8_t len[8] = {0};
      std::ifstream in(dest, std::ios::binary);
      if (!in.read(reinterpret_cast<char*>(len), 8)) throw Error(dest.string() + ": cannot read its header back");
      const uint64_t n = safetensors_header_length(len, w.info.size, url_for_messages(src.url(w.name)));
      mirror.ensure(w.name, 8, n);
    } else {
      if (!fs::exists(dest, ec) || fs::file_size(dest, ec) != w.info.size)
        report.fetched_bytes += src.download(w.name, w.info, dest);
      // Checked on every run (a kill may have come between the download and its check).
      if (block_sums)
        if (const std::optional<BadBlock> bad = first_bad_block(dest, w.name, *block_sums)) {
          fs::remove(dest, ec);
          throw Error(url_for_messages(src.url(w.name)) + ": the download is not what the source publishes: " +
                      bad->message + "; it was removed (run again to fetch it anew)");
        }
      mirror.record_present(w.name, 0, w.info.size);  // whole (downloads are renamed into place when complete)
    }
  }

  // What must be on disk before the model loads: every tensor but the
  // routed experts', and of the experts' tensors whatever the expert cache
  // does not read through the storage (FP8 scales, gpt-oss biases, shapes:
  // copied when the experts are bound). The small expert tensors first, so
  // that binding can read them; then the catalog says which bytes it reads.
  using Runs = std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>>;
  auto fetch_runs = [&](Runs ranges, const char* label) {
    // Ranges less than 16 KiB apart are one request, of at most 64 MiB: a
    // wider gap could be an expert's weights (MXFP4 checkpoints interleave
    // each matrix with its small scales), fetched for nothing.
    Runs runs;
    uint64_t total = 0;
    for (auto& [file, rs] : ranges) {
      std::sort(rs.begin(), rs.end());
      for (const auto& [b, e] : rs) {
        auto& out = runs[file];
        if (!out.empty() && b <= out.back().second + (16u << 10) && e - out.back().first <= (64u << 20))
          out.back().second = std::max(out.back().second, e);
        else
          out.emplace_back(b, e);
      }
      for (const auto& [b, e] : runs[file]) total += e - b;
    }
    Progress progress(label, total, o.progress);
    std::vector<RemoteMirror::Range> all;
    for (const auto& [file, rs] : runs)
      for (const auto& [b, e] : rs) all.push_back({file, b, e - b});
    mirror.ensure_all(all, FetchPriority::Demand, [&](uint64_t n) { progress.add(n); });
    progress.finish();
  };
  {
    const Checkpoint ck = open_checkpoint(o.out);
    Runs trunk, small_experts;
    for (const std::string& name : ck.source->names()) {
      const TensorView& t = ck.source->get(name);
      if (t.file.empty() || t.nbytes == 0) continue;
      const std::string file = fs::path(t.file).filename().string();
      // An expert's main matrices (".weight", int4 "weight_packed", MXFP4
      // "_blocks", gpt-oss's fused BF16 "gate_up_proj"/"down_proj") are what
      // streams; its other tensors are small (scales, shapes, biases).
      const bool main_weight = name.ends_with(".weight") || name.ends_with("weight_packed") ||
                               name.ends_with("_blocks") || name.ends_with("gate_up_proj") || name.ends_with("down_proj");
      if (!routed_expert_layer(name))
        trunk[file].emplace_back(t.offset, t.offset + t.nbytes);
      else if (!main_weight)
        small_experts[file].emplace_back(t.offset, t.offset + t.nbytes);
    }
    fetch_runs(std::move(trunk), "trunk");
    fetch_runs(std::move(small_experts), "experts' small tensors");
  }
  {
    const Checkpoint ck = open_checkpoint(o.out);
    WeightBinder binder(*ck.source, ck.config);
    const ExpertBindFn bind = expert_binder(ck.config, *ck.source, binder);
    const std::unique_ptr<Storage> storage = make_storage();
    const ExpertCatalog catalog = catalog_from_bound_experts(ck.config, bind, *ck.source, *storage);
    std::map<std::string, std::map<uint64_t, uint64_t>> read;  // file -> start -> end of the cache's reads
    for (const auto& layer : catalog.layers)
      for (const StreamedExpert& e : layer)
        for (const ExpertRead& r : e.reads) {
          auto& m = read[fs::path(storage->file(r.file).path).filename().string()];
          m[r.offset] = std::max(m[r.offset], r.offset + r.length);
        }
    auto covered = [&](const std::string& file, uint64_t b, uint64_t e) {
      const auto f = read.find(file);
      if (f == read.end()) return false;
      uint64_t at = b;
      for (auto it = f->second.begin(); it != f->second.end() && it->first <= at; ++it) at = std::max(at, it->second);
      return at >= e;
    };
    Runs rest;
    for (const std::string& name : ck.source->names()) {
      if (!routed_expert_layer(name)) continue;
      const TensorView& t = ck.source->get(name);
      if (t.file.empty() || t.nbytes == 0) continue;
      const std::string file = fs::path(t.file).filename().string();
      if (!covered(file, t.offset, t.offset + t.nbytes)) rest[file].emplace_back(t.offset, t.offset + t.nbytes);
    }
    fetch_runs(std::move(rest), "experts' resident tensors");
  }
  mirror.set_complete();
  report.fetched_bytes += mirror.stats().bytes;
  lock.done();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
