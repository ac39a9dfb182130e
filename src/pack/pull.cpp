#include "pack/pull.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <set>

#include "storage/atomic_file.h"
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
    if (!f.ends_with(".safetensors") || f.find('/') != std::string::npos || f.starts_with("."))
      throw Error(where + ": '" + f + "' is not a shard name (NAME.safetensors beside the index)");
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
    Wanted w{name, src.stat(name)};
    const bool required = name == "config.json" || name.ends_with(".safetensors") || name.ends_with(".index.json") ||
                          name == src.location().file;
    if (!w.info.exists) {
      if (required) throw Error(o.source + ": has no " + name);
      continue;
    }
    if (!name.ends_with(".safetensors") && name != src.location().file && w.info.size > kSmallFileLimit)
      throw Error(src.url(name) + ": " + std::to_string(w.info.size) + " bytes, more than such a file may have");
    files.push_back(std::move(w));
    report.bytes += files.back().info.size;
  }
  report.files = static_cast<int64_t>(files.size());
  nlohmann::json listing = nlohmann::json::array();
  for (const Wanted& w : files) listing.push_back(record_of(w));
  const nlohmann::json pulled = {{"source", report.source}, {"files", listing}};

  std::error_code ec;
  const fs::path record_path = o.out / kPullRecord;
  if (fs::exists(record_path, ec) && fs::exists(o.out / "manifest.json", ec)) {
    nlohmann::json old;
    try {
      old = read_json_file(record_path);
    } catch (const Error&) {
      old = nullptr;  // damaged: pull again, the pack then says whether it matches
    }
    if (old == pulled) {
      // Killed after the record was written: the staging folder may be left.
      fs::remove_all(o.out / kPullStaging, ec);
      report.already_pulled = true;
      report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return report;
    }
  }

  // Download into the staging folder, each finished file recorded so that a
  // re-run keeps it while the source still says the same of it.
  const fs::path staging = o.out / kPullStaging, into = staging / "files", done_path = staging / "done.json";
  fs::create_directories(into, ec);
  if (ec) throw Error(into.string() + ": cannot create: " + ec.message());
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
  std::vector<const Wanted*> todo;
  for (const Wanted& w : files) {
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
  int64_t weights_done = 0;
  auto worker = [&](RemoteSource& conn) {
    try {
      for (size_t i = next++; i < todo.size() && !failed; i = next++) {
        const Wanted& w = *todo[i];
        const fs::path dest = into / w.name;
        std::error_code gone;
        fs::remove(dest, gone);
        const uint64_t fetched = conn.download(w.name, dest, [&](uint64_t n) {
          std::lock_guard<std::mutex> lock(mu);
          progress.add(n);
        });
        std::lock_guard<std::mutex> lock(mu);
        report.fetched_bytes += fetched;
        done[w.name] = record_of(w);
        write_file_atomically(done_path, done.dump());
        if ((w.name.ends_with(".safetensors") || w.name.ends_with(".gguf")) && ++weights_done == o.stop_after_files)
          throw Error("pull stopped after " + std::to_string(weights_done) + " weight files (test)");
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
  progress.finish();

  PackOptions po;
  po.source = src.location().file.empty() ? into : into / src.location().file;
  po.out = o.out;
  po.drives = o.drives;
  po.probe = o.probe;
  po.progress = o.progress;
  po.notice = o.notice;
  po.source_label = report.source;
  report.pack = pack_model(po);
  write_file_atomically(record_path, pulled.dump(1));
  fs::remove_all(staging, ec);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace strata
