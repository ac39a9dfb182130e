#include "remote/remote_mirror.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "storage/atomic_file.h"
#include "storage/write_at.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "strata-remote-mirror";

// Where a file's fetched pieces are written: one descriptor per file for
// the mirror's life, the modification time taken when it was first opened
// and put back after each piece (weights_identity hashes it).
std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return "";
  if (!j[key].is_string()) throw Error(where + ": \"" + key + "\" is not a string");
  return j[key].get<std::string>();
}

bool is_hub_default(const std::string& endpoint) {
  return endpoint.empty() || endpoint == "https://huggingface.co" || endpoint == "https://huggingface.co/";
}

}  // namespace

class RemoteMirror::PieceWriter {
 public:
  explicit PieceWriter(const fs::path& p) : path_(p), fd_(::open(p.c_str(), O_WRONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw Error(p.string() + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) == 0) {
      times_[0] = st.st_atim;
      times_[1] = st.st_mtim;
      have_times_ = true;
    }
  }
  ~PieceWriter() { ::close(fd_); }
  void write(std::span<const uint8_t> bytes, uint64_t at) { write_all_at(fd_, bytes, at, path_); }
  // Synced, with the time put back: then the piece may be logged.
  void finish() {
    if (::fdatasync(fd_) != 0) throw Error(path_.string() + ": cannot sync: " + std::strerror(errno));
    if (have_times_) ::futimens(fd_, times_);
  }

 private:
  fs::path path_;
  int fd_;
  timespec times_[2]{};
  bool have_times_ = false;
};

bool RemoteMirror::is_mirror(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::exists(dir / kRemoteMirrorRecord, ec)) return false;
  try {
    const nlohmann::json j = read_json_file(dir / kRemoteMirrorRecord);
    return j.is_object() && j.contains("format") && j["format"] == kFormat;
  } catch (const Error&) {
    return true;  // damaged: opening it says so, rather than reading sparse files as whole
  }
}

std::shared_ptr<RemoteMirror> RemoteMirror::open_shared(const fs::path& dir) {
  static std::mutex m;
  static std::map<std::string, std::weak_ptr<RemoteMirror>> open;
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(dir, ec);
  const std::string key = (ec ? dir : canonical).string();
  std::lock_guard<std::mutex> lock(m);
  if (std::shared_ptr<RemoteMirror> there = open[key].lock()) return there;
  auto made = std::make_shared<RemoteMirror>(dir);
  open[key] = made;
  return made;
}

bool RemoteMirror::is_full(const fs::path& dir) {
  try {
    const nlohmann::json j = read_json_file(dir / kRemoteMirrorRecord);
    return j.is_object() && j.contains("full") && j["full"].is_boolean() && j["full"].get<bool>();
  } catch (const Error&) {
    return false;
  }
}

void RemoteMirror::set_full() {
  std::lock_guard<std::mutex> lock(mu_);
  record_["full"] = true;
  write_file_atomically(dir_ / kRemoteMirrorRecord, record_.dump(1));
  full_ = true;
}

std::vector<RemoteMirror::Range> RemoteMirror::missing() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Range> out;
  for (const auto& [name, info] : files_) {
    uint64_t at = 0;
    if (const auto f = present_.find(name); f != present_.end())
      for (const auto& [b, e] : f->second) {
        if (b > at) out.push_back({name, at, b - at});
        at = std::max(at, e);
      }
    if (at < info.size) out.push_back({name, at, info.size - at});
  }
  return out;
}

void RemoteMirror::drop_background() {
  Calls calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail_wants_locked([](const Want& w) { return w.priority == FetchPriority::Background; }, "stopped", calls);
  }
  for (auto& [done, error] : calls) done(error);
}

void RemoteMirror::set_background_rate(double bytes_per_s) {
  std::lock_guard<std::mutex> lock(mu_);
  background_rate_ = std::max(0.0, bytes_per_s);
  background_handed_ = 0;
  background_since_ = std::chrono::steady_clock::now();
}

bool RemoteMirror::is_complete(const fs::path& dir) {
  try {
    const nlohmann::json j = read_json_file(dir / kRemoteMirrorRecord);
    return j.is_object() && j.contains("complete") && j["complete"].is_boolean() && j["complete"].get<bool>();
  } catch (const Error&) {
    return false;
  }
}

void RemoteMirror::create(const fs::path& dir, const std::string& source,
                          const std::map<std::string, RemoteFileInfo>& files, const std::string& hf_endpoint) {
  nlohmann::json f = nlohmann::json::object();
  for (const auto& [name, info] : files)
    f[name] = {{"size", info.size}, {"etag", info.etag}, {"sha256", info.sha256}};
  write_file_atomically(dir / kRemoteMirrorRecord,
                        nlohmann::json{{"format", kFormat},
                                       {"version", 1},
                                       {"source", source},
                                       {"hf_endpoint", hf_endpoint},
                                       {"complete", false},
                                       {"files", f}}
                            .dump(1));
}

RemoteMirror::RemoteMirror(fs::path dir, EnvLookup env, RetryPolicy retry)
    : dir_(std::move(dir)), env_(std::move(env)), retry_(retry) {
  const fs::path record = dir_ / kRemoteMirrorRecord;
  const nlohmann::json j = read_json_file(record);
  const std::string where = record.string();
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat || !j.contains("version") ||
      !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    throw Error(where + ": not a strata remote mirror record of version 1");
  record_ = j;
  source_ = string_field(j, "source", where);
  if (source_.empty()) throw Error(where + ": no \"source\"");
  hf_endpoint_ = string_field(j, "hf_endpoint", where);
  complete_ = j.contains("complete") && j["complete"].is_boolean() && j["complete"].get<bool>();
  full_ = j.contains("full") && j["full"].is_boolean() && j["full"].get<bool>();
  if (!j.contains("files") || !j["files"].is_object()) throw Error(where + ": no \"files\"");
  for (const auto& [name, e] : j["files"].items()) {
    if (!e.is_object() || !e.contains("size") || !e["size"].is_number_unsigned())
      throw Error(where + ": file " + name + " has no size");
    if (name.empty() || name.find('/') != std::string::npos || name.starts_with(".") ||
        name.find_first_of(" \t\r\n") != std::string::npos)
      throw Error(where + ": '" + name + "' is not a file of the folder");
    RemoteFileInfo info;
    info.exists = true;
    info.size = e["size"].get<uint64_t>();
    info.etag = string_field(e, "etag", where);
    info.sha256 = string_field(e, "sha256", where);
    files_[name] = info;
  }
  // The source's block sums, when the install fetched them: they must
  // describe the files as they were installed.
  if (std::error_code ec; fs::exists(dir_ / kBlockSumsFile, ec)) {
    sums_ = read_block_sums(dir_ / kBlockSumsFile);
    for (const auto& [name, f] : sums_->files)
      if (const auto it = files_.find(name); it != files_.end() && it->second.size != f.size)
        throw Error((dir_ / kBlockSumsFile).string() + ": its block sums describe another version of " + name + " (" +
                    std::to_string(f.size) + " bytes, not the install's " + std::to_string(it->second.size) +
                    "): the source's sums are stale; install it again into another folder once they are not");
  }
  // The log: only whole lines (a crash may leave a torn last one) that
  // describe a range of a known file; the rest is fetched again when wanted.
  std::ifstream log(dir_ / kRemoteMirrorLog, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  size_t begin = 0;
  for (size_t nl = text.find('\n'); nl != std::string::npos; begin = nl + 1, nl = text.find('\n', begin)) {
    std::istringstream in(text.substr(begin, nl - begin));
    std::string name;
    uint64_t offset = 0, length = 0;
    if (!(in >> name >> offset >> length)) continue;
    if (length == 0 && offset == 0) {  // "NAME 0 0": the file was recreated, nothing of it is there
      present_.erase(name);
      continue;
    }
    const auto it = files_.find(name);
    if (it == files_.end() || length == 0 || offset > it->second.size || length > it->second.size - offset) continue;
    uint64_t b = offset, e = offset + length;
    if (const BlockSums::File* sums = sums_ ? sums_->find(name) : nullptr) {
      // Whole checked blocks only: what a torn line (ended by the next
      // write) says of a block's part is not believed.
      if (const size_t k = sums->block_of(b); sums->begin(k) != b) b = sums->end(k);
      if (e < sums->size) e = sums->begin(sums->block_of(e));
      if (b >= e) continue;
    }
    add(present_[name], b, e);
  }
}

RemoteMirror::~RemoteMirror() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (remote_) remote_->http().cancel();  // what is in flight ends now, "cancelled"
  }
  wake_.notify_all();
  if (fetcher_.joinable()) fetcher_.join();
  if (log_fd_ >= 0) ::close(log_fd_);
}

void RemoteMirror::remove(Intervals& set, uint64_t begin, uint64_t end) {
  auto it = set.upper_bound(begin);
  if (it != set.begin()) --it;
  while (it != set.end() && it->first < end) {
    const uint64_t b = it->first, e = it->second;
    if (e <= begin) {
      ++it;
      continue;
    }
    it = set.erase(it);
    if (b < begin) set[b] = begin;
    if (e > end) set[end] = e;
  }
}

void RemoteMirror::add(Intervals& set, uint64_t begin, uint64_t end) {
  auto it = set.upper_bound(begin);
  if (it != set.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= begin) {
      begin = prev->first;
      end = std::max(end, prev->second);
      it = set.erase(prev);
    }
  }
  while (it != set.end() && it->first <= end) {
    end = std::max(end, it->second);
    it = set.erase(it);
  }
  set[begin] = end;
}

uint64_t RemoteMirror::covered_until(uint64_t at, std::initializer_list<const Intervals*> sets) {
  for (bool moved = true; moved;) {
    moved = false;
    for (const Intervals* set : sets) {
      auto next = set->upper_bound(at);
      if (next != set->begin() && std::prev(next)->second > at) {
        at = std::prev(next)->second;
        moved = true;
      }
    }
  }
  return at;
}

bool RemoteMirror::present_locked(const std::string& file, uint64_t begin, uint64_t end) const {
  const auto f = present_.find(file);
  if (f == present_.end()) return begin >= end;
  auto it = f->second.upper_bound(begin);
  if (it == f->second.begin()) return begin >= end;
  --it;
  return it->first <= begin && it->second >= end;
}

bool RemoteMirror::present(const std::string& file, uint64_t offset, uint64_t length) const {
  std::lock_guard<std::mutex> lock(mu_);
  return present_locked(file, offset, offset + length);
}

void RemoteMirror::open_log() {
  if (log_fd_ >= 0) return;
  // Opened at the first write only: a complete install on a read-only
  // folder still loads.
  log_fd_ = ::open((dir_ / kRemoteMirrorLog).c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0) throw Error((dir_ / kRemoteMirrorLog).string() + ": cannot open: " + std::strerror(errno));
  // A torn last line (a crash mid-append) is ended before anything follows it.
  struct stat st {};
  char last = '\n';
  if (::fstat(log_fd_, &st) == 0 && st.st_size > 0 && ::pread(log_fd_, &last, 1, st.st_size - 1) == 1 && last != '\n')
    if (::write(log_fd_, "\n", 1) != 1) throw Error((dir_ / kRemoteMirrorLog).string() + ": cannot write");
}

void RemoteMirror::append_log(const std::string& file, uint64_t offset, uint64_t length) {
  std::lock_guard<std::mutex> lock(log_mu_);
  open_log();
  const std::string line = file + " " + std::to_string(offset) + " " + std::to_string(length) + "\n";
  if (::write(log_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fdatasync(log_fd_) != 0)
    throw Error((dir_ / kRemoteMirrorLog).string() + ": cannot record a fetched range: " + std::strerror(errno));
}

void RemoteMirror::record_present(const std::string& file, uint64_t offset, uint64_t length) {
  if (length == 0 || present(file, offset, length)) return;
  append_log(file, offset, length);
  std::lock_guard<std::mutex> lock(mu_);
  add(present_[file], offset, offset + length);
}

void RemoteMirror::forget(const std::string& file) {
  append_log(file, 0, 0);
  std::lock_guard<std::mutex> lock(mu_);
  present_.erase(file);
}

void RemoteMirror::set_complete() {
  std::lock_guard<std::mutex> lock(mu_);
  record_["complete"] = true;
  write_file_atomically(dir_ / kRemoteMirrorRecord, record_.dump(1));
  complete_ = true;
}

std::unique_ptr<RemoteSource> RemoteMirror::open_source() const {
  {
    // The hub the install came from, unless the environment names one now;
    // a recorded endpoint other than huggingface.co gets no token of the
    // user's (the folder chose it, not the user).
    const bool recorded = !env_("HF_ENDPOINT").value_or("").size() && !hf_endpoint_.empty();
    const EnvLookup env = [this, recorded](const std::string& name) -> std::optional<std::string> {
      if (recorded && name == "HF_ENDPOINT") return hf_endpoint_;
      if (recorded && !is_hub_default(hf_endpoint_) &&
          (name == "HF_TOKEN" || name == "HUGGING_FACE_HUB_TOKEN" || name == "HF_TOKEN_PATH" || name == "HF_HOME" ||
           name == "XDG_CACHE_HOME" || name == "HOME"))
        return std::nullopt;
      return env_(name);
    };
    return std::make_unique<RemoteSource>(parse_source(source_, env), retry_);
  }
}

void RemoteMirror::check_unchanged(const std::string& file) {
  const RemoteFileInfo& want = files_.at(file);
  const RemoteFileInfo now = remote_->stat(file);
  if (!now.exists || now.size != want.size || now.etag != want.etag || now.sha256 != want.sha256)
    throw Error(dir_.string() + ": " + file + " is not at the source as it was when this streaming install was made (" +
                source_ + "); install it again into another folder");
}

void RemoteMirror::set_connections(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_ = std::max(1, n);
}

bool RemoteMirror::request(const std::string& file, uint64_t offset, uint64_t length, FetchPriority priority,
                           std::function<void(const std::string&)> done, uint64_t* id) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto f = files_.find(file);
  if (f == files_.end() || offset >= f->second.size || length == 0) return true;  // not the mirror's, or nothing
  const uint64_t end = length > f->second.size - offset ? f->second.size : offset + length;
  if (present_locked(file, offset, end)) {
    if (priority == FetchPriority::Demand) ++stats_.local_reads;
    return true;
  }
  if (stopping_) {
    done(dir_.string() + ": the streaming install is closing");
    return false;
  }
  const uint64_t want_id = next_want_id_++;
  if (id) *id = want_id;
  if (!fetcher_.joinable()) fetcher_ = std::thread([this] { fetch_loop(); });
  wants_.push_back(Want{file, offset, end, priority, std::move(done), std::chrono::steady_clock::now(), want_id});
  if (remote_) remote_->http().wake();
  wake_.notify_all();
  return false;
}

void RemoteMirror::reprioritize(uint64_t id, FetchPriority priority) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Want& w : wants_)
    if (w.id == id) w.priority = priority;
  if (remote_) remote_->http().wake();
}

void RemoteMirror::withdraw(uint64_t id) {
  Calls calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail_wants_locked([id](const Want& w) { return w.id == id; }, "withdrawn", calls);
  }
  for (auto& [done, error] : calls) done(error);
}

void RemoteMirror::ensure(const std::string& file, uint64_t offset, uint64_t length) {
  const Range r{file, offset, length};
  ensure_all(std::span<const Range>(&r, 1));
}

bool RemoteMirror::ensure_all(std::span<const Range> ranges, FetchPriority priority,
                              const std::function<void(uint64_t)>& progress, const std::function<bool()>& stop) {
  std::mutex m;
  std::condition_variable cv;
  size_t left = 0;
  uint64_t landed = 0;
  std::string first_error;
  auto ended = [&](uint64_t bytes, const std::string& error) {
    std::lock_guard<std::mutex> lock(m);
    if (!error.empty() && error != "stopped" && first_error.empty()) first_error = error;
    if (error.empty()) landed += bytes;
    --left;
    cv.notify_all();
  };
  for (const Range& r : ranges) {
    {
      std::lock_guard<std::mutex> lock(m);
      ++left;
    }
    try {
      if (request(r.file, r.offset, r.length, priority, [&ended, n = r.length](const std::string& e) { ended(n, e); }))
        ended(r.length, "");
    } catch (const std::exception& e) {
      ended(0, e.what());  // and wait for the ones already asked for: their callbacks point here
      break;
    }
  }
  bool stopped = false;
  std::unique_lock<std::mutex> lock(m);
  for (;;) {
    if (stop) cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return left == 0 || landed > 0; });
    else cv.wait(lock, [&] { return left == 0 || landed > 0; });
    const uint64_t n = std::exchange(landed, 0);
    if (progress && n > 0) {
      lock.unlock();
      progress(n);
      lock.lock();
    }
    if (left == 0 && landed == 0) break;
    if (stop && !stopped && left > 0) {
      lock.unlock();
      stopped = stop();
      if (stopped) drop_background();
      lock.lock();
    }
  }
  if (!first_error.empty()) throw Error(first_error);
  return !stopped;
}

std::pair<uint64_t, uint64_t> RemoteMirror::fetched_span(const Want& w) const {
  const BlockSums::File* sums = sums_ ? sums_->find(w.file) : nullptr;
  if (!sums) return {w.begin, w.end};
  return {sums->begin(sums->block_of(w.begin)), sums->end(sums->block_of(w.end - 1))};
}

void RemoteMirror::fail_wants_locked(const std::function<bool(const Want&)>& which, const std::string& error,
                                     Calls& calls) {
  for (auto it = wants_.begin(); it != wants_.end();)
    if (which(*it)) {
      calls.emplace_back(std::move(it->done), error);
      it = wants_.erase(it);
    } else {
      ++it;
    }
}

namespace {
void call_all(std::vector<std::pair<std::function<void(const std::string&)>, std::string>>& calls) {
  for (auto& [done, error] : calls) done(error);
  calls.clear();
}
}  // namespace

void RemoteMirror::fetch_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (wants_.empty()) {
      wake_.wait(lock);
      continue;
    }
    if (!remote_) {
      // Opened without the lock: pinning a hub revision is a request.
      lock.unlock();
      std::unique_ptr<RemoteSource> opened;
      std::string error;
      try {
        opened = open_source();
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      if (!opened) {
        Calls calls;
        fail_wants_locked([](const Want&) { return true; },
                          dir_.string() + " is a streaming install; its source cannot be reached: " + error, calls);
        lock.unlock();
        call_all(calls);
        lock.lock();
        continue;
      }
      remote_ = std::move(opened);
      if (stopping_) remote_->http().cancel();
    }
    HttpClient* http = &remote_->http();
    const int connections = connections_;
    lock.unlock();
    try {
      http->fetch_ranges(connections, [this] { return next_piece(); },
                         [this] {
                           std::lock_guard<std::mutex> l(mu_);
                           return !stopping_ && !wants_.empty();
                         });
    } catch (const std::exception& e) {
      lock.lock();
      Calls calls;
      fail_wants_locked([](const Want&) { return true; }, e.what(), calls);
      lock.unlock();
      call_all(calls);
    }
    lock.lock();
  }
  Calls calls;
  fail_wants_locked([](const Want&) { return true; }, dir_.string() + ": the streaming install was closed", calls);
  lock.unlock();
  call_all(calls);
}

std::optional<RangeRequest> RemoteMirror::next_piece() {
  for (;;) {
    Calls calls;
    std::optional<RangeRequest> r;
    std::string to_check;  // a file to ask the source about first
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return std::nullopt;
      // Background pieces: at most one slot short of all (a reader's fetch
      // always finds one), no faster than the rate allows, and small, so
      // that a reader whose bytes one of them brings is not kept long.
      const auto now = std::chrono::steady_clock::now();
      const bool background_may =
          (connections_ == 1 || background_in_flight_ < connections_ - 1) &&
          (background_rate_ <= 0 || static_cast<double>(background_handed_) <=
                                        background_rate_ * std::chrono::duration<double>(now - background_since_).count());
      for (const FetchPriority pass : {FetchPriority::Demand, FetchPriority::Guess, FetchPriority::Background}) {
        if (pass == FetchPriority::Background && !background_may) break;
        for (auto it = wants_.begin(); it != wants_.end() && !r && to_check.empty(); ++it) {
          if (it->priority != pass) continue;
          // The first byte of the want that is neither on the drive nor
          // coming (nor landed, waiting for the rest of its block). With
          // published block sums, whole blocks are fetched: only those can
          // be checked.
          const Intervals& have = present_[it->file];
          const Intervals& coming = in_flight_[it->file];
          const Intervals& waiting = landed_[it->file];
          const BlockSums::File* sums = sums_ ? sums_->find(it->file) : nullptr;
          const auto [want_begin, want_end] = fetched_span(*it);
          const uint64_t at = covered_until(want_begin, {&have, &coming, &waiting});
          if (at >= want_end) continue;
          const std::string& file = it->file;
          if (!checked_[file]) {
            to_check = file;
            break;
          }
          const uint64_t piece = pass == FetchPriority::Background ? kBackgroundPieceBytes : kFetchPieceBytes;
          uint64_t gap_end = std::min(want_end, at + piece);
          // A piece that stops short of the want ends on a block's end where it can.
          if (sums && gap_end < want_end) {
            const uint64_t cut = sums->begin(sums->block_of(gap_end));
            if (cut > at) gap_end = cut;
          }
          for (const Intervals* set : {&have, &coming, &waiting})
            if (auto next = set->upper_bound(at); next != set->end()) gap_end = std::min(gap_end, next->first);
          RangeRequest q;
          try {
            if (!writers_.contains(file)) writers_[file] = std::make_unique<PieceWriter>(dir_ / file);
            q.url = remote_->url(file);
          } catch (const std::exception& e) {
            const std::string failed = file;
            fail_wants_locked([&](const Want& w) { return w.file == failed; }, e.what(), calls);
            break;  // the list changed: look again
          }
          q.offset = at;
          q.length = gap_end - at;
          q.expect_etag = files_.at(file).etag;
          PieceWriter* out = writers_.at(file).get();
          auto pos = std::make_shared<uint64_t>(at);
          q.sink = [out, pos](std::span<const uint8_t> chunk) {
            out->write(chunk, *pos);
            *pos += chunk.size();
          };
          const bool background = pass == FetchPriority::Background;
          q.done = [this, file, b = at, e = gap_end, background](const std::string& error) {
            piece_done(file, b, e, background, error);
          };
          // Marked only once nothing above can throw.
          add(in_flight_[file], at, gap_end);
          if (pieces_in_flight_++ == 0) busy_since_ = now;
          if (background) {
            ++background_in_flight_;
            background_handed_ += q.length;
          }
          r = std::move(q);
        }
        if (r || !to_check.empty() || !calls.empty()) break;
      }
    }
    if (!to_check.empty()) {
      std::string error;
      try {
        check_unchanged(to_check);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (error.empty()) checked_[to_check] = true;
      else fail_wants_locked([&](const Want& w) { return w.file == to_check; }, error, calls);
    }
    const bool failed_some = !calls.empty();
    call_all(calls);
    if (r) return r;
    if (to_check.empty() && !failed_some) return std::nullopt;  // nothing to fetch now
  }
}

std::string RemoteMirror::check_blocks(const std::string& file, uint64_t begin, uint64_t end, Intervals& good,
                                      Calls& calls) {
  const BlockSums::File& sums = *sums_->find(file);
  // The blocks this piece finished: every byte landed, or there before
  // (bytes of the trunk fetched with a neighbouring range).
  std::vector<size_t> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Intervals& waiting = landed_[file];
    add(waiting, begin, end);
    for (size_t k = sums.block_of(begin); k < sums.ends.size() && sums.begin(k) < end; ++k) {
      if (covered_until(sums.begin(k), {&present_[file], &waiting}) >= sums.end(k)) done.push_back(k);
    }
    for (size_t k : done) remove(waiting, sums.begin(k), sums.end(k));
  }
  if (done.empty()) return "";
  // Read back from the drive: what is checked is what readers will read.
  const fs::path path = dir_ / file;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return path.string() + ": cannot open: " + std::strerror(errno);
  uint64_t longest = 0;
  for (size_t k : done) longest = std::max(longest, sums.end(k) - sums.begin(k));
  std::vector<uint8_t> buf(longest);
  std::string error;
  for (size_t k : done) {
    const uint64_t b = sums.begin(k), n = sums.end(k) - b;
    uint64_t got = 0;
    int read_error = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(b + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) read_error = errno;
      if (r <= 0) break;
      got += static_cast<uint64_t>(r);
    }
    if (got < n) {
      error = path.string() + ": cannot read back bytes " + std::to_string(b) + "-" + std::to_string(b + n - 1) +
              " just written: " + (read_error ? std::strerror(read_error) : "the file ends first");
      break;
    }
    const std::string wrong = first_mismatch(sums, file, b, std::span<const uint8_t>(buf.data(), n));
    std::lock_guard<std::mutex> lock(mu_);
    if (wrong.empty()) {
      add(good, b, b + n);
      bad_blocks_.erase({file, k});
      continue;
    }
    // Wrong bytes: not used. Fetched once more while someone waits for
    // them; wrong twice in a row, the waits end with the error.
    stats_.rejected_bytes += n;
    remove(present_[file], b, b + n);
    if (++bad_blocks_[{file, k}] < 2) continue;
    bad_blocks_.erase({file, k});
    const std::string message = dir_.string() + " is a streaming install; " + file + " bytes " + std::to_string(b) +
                                "-" + std::to_string(b + n - 1) + " came from " + source_ +
                                " twice, both times other than the source's " + kBlockSumsFile + " says (" + wrong +
                                "); they were not used (if it lasts, the source or a proxy on the way changes them, "
                                "or the sums are stale)";
    fail_wants_locked(
        [&](const Want& w) {
          const auto [wb, we] = fetched_span(w);
          return w.file == file && wb < b + n && b < we;
        },
        message, calls);
  }
  ::close(fd);
  return error;
}

void RemoteMirror::piece_done(const std::string& file, uint64_t begin, uint64_t end, bool background, std::string error) {
  Intervals good;  // what may be logged and used
  Calls calls;
  if (error.empty()) {
    try {
      writers_.at(file)->finish();
      if (sums_ && sums_->find(file)) error = check_blocks(file, begin, end, good, calls);
      else add(good, begin, end);
      // Synced: from now on the ranges are there, whatever happens.
      if (error.empty())
        for (const auto& [b, e] : good) append_log(file, b, e - b);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    remove(in_flight_[file], begin, end);
    const auto now = std::chrono::steady_clock::now();
    if (--pieces_in_flight_ == 0) stats_.seconds += std::chrono::duration<double>(now - busy_since_).count();
    if (background) --background_in_flight_;
    if (error.empty()) {
      for (const auto& [b, e] : good) add(present_[file], b, e);
      stats_.bytes += end - begin;
      stats_.requests += 1;
    } else {
      remove(landed_[file], begin, end);
      const std::string message = dir_.string() + " is a streaming install; fetching " + file + " bytes " +
                                  std::to_string(begin) + "-" + std::to_string(end - 1) + " failed: " + error;
      // Every wait this piece was fetched for (with block sums, a piece of
      // a block may lie outside the bytes asked for).
      fail_wants_locked(
          [&](const Want& w) {
            const auto [wb, we] = fetched_span(w);
            return w.file == file && wb < end && begin < we;
          },
          message, calls);
    }
    for (auto it = wants_.begin(); it != wants_.end();)
      if (it->file == file && present_locked(file, it->begin, it->end)) {
        if (it->priority == FetchPriority::Demand) {
          stats_.remote_reads += 1;
          stats_.remote_wait_s += std::chrono::duration<double>(now - it->since).count();
        }
        calls.emplace_back(std::move(it->done), "");
        it = wants_.erase(it);
      } else {
        ++it;
      }
  }
  call_all(calls);
  if (remote_) remote_->http().wake();  // a background piece may start now
}

RemoteFetchStats RemoteMirror::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RemoteFetchStats s = stats_;
  if (pieces_in_flight_ > 0) s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  return s;
}

}  // namespace strata
