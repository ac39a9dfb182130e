#include "remote/remote_mirror.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
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

// Writes `bytes` at `at` as the sink hands them over, synced at the end,
// with the file's modification time put back (weights_identity hashes it).
class RangeWriter {
 public:
  explicit RangeWriter(const fs::path& p) : path_(p), fd_(::open(p.c_str(), O_WRONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw Error(p.string() + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) == 0) {
      times_[0] = st.st_atim;
      times_[1] = st.st_mtim;
      have_times_ = true;
    }
  }
  ~RangeWriter() { ::close(fd_); }
  void write(std::span<const uint8_t> bytes, uint64_t at) { write_all_at(fd_, bytes, at, path_); }
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

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return "";
  if (!j[key].is_string()) throw Error(where + ": \"" + key + "\" is not a string");
  return j[key].get<std::string>();
}

bool is_hub_default(const std::string& endpoint) {
  return endpoint.empty() || endpoint == "https://huggingface.co" || endpoint == "https://huggingface.co/";
}

}  // namespace

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
    add(present_[name], offset, offset + length);
  }
}

RemoteMirror::~RemoteMirror() {
  if (log_fd_ >= 0) ::close(log_fd_);
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

void RemoteMirror::open_log_locked() {
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

void RemoteMirror::append_log_locked(const std::string& file, uint64_t offset, uint64_t length) {
  open_log_locked();
  const std::string line = file + " " + std::to_string(offset) + " " + std::to_string(length) + "\n";
  if (::write(log_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fdatasync(log_fd_) != 0)
    throw Error((dir_ / kRemoteMirrorLog).string() + ": cannot record a fetched range: " + std::strerror(errno));
  if (length > 0) add(present_[file], offset, offset + length);
}

void RemoteMirror::forget(const std::string& file) {
  std::lock_guard<std::mutex> lock(mu_);
  append_log_locked(file, 0, 0);
  present_.erase(file);
}

void RemoteMirror::set_complete() {
  std::lock_guard<std::mutex> lock(mu_);
  record_["complete"] = true;
  write_file_atomically(dir_ / kRemoteMirrorRecord, record_.dump(1));
  complete_ = true;
}

RemoteSource& RemoteMirror::source_locked() {
  if (!remote_) {
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
    remote_ = std::make_unique<RemoteSource>(parse_source(source_, env), retry_);
  }
  return *remote_;
}

void RemoteMirror::check_unchanged_locked(const std::string& file) {
  if (checked_[file]) return;
  const RemoteFileInfo& want = files_.at(file);
  const RemoteFileInfo now = source_locked().stat(file);
  if (!now.exists || now.size != want.size || now.etag != want.etag || now.sha256 != want.sha256)
    throw Error(dir_.string() + ": " + file + " is not at the source as it was when this streaming install was made (" +
                source_ + "); install it again into another folder");
  checked_[file] = true;
}

void RemoteMirror::ensure(const std::string& file, uint64_t offset, uint64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto f = files_.find(file);
  if (f == files_.end()) return;  // not a file of the mirror: on disk whole
  if (offset >= f->second.size) return;
  const uint64_t end = length > f->second.size - offset ? f->second.size : offset + length;
  if (present_locked(file, offset, end)) return;
  // The gaps in [offset, end), each fetched whole.
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  uint64_t at = offset;
  const Intervals& have = present_[file];
  auto it = have.upper_bound(at);
  if (it != have.begin() && std::prev(it)->second > at) at = std::prev(it)->second;
  for (; at < end;) {
    while (it != have.end() && it->second <= at) ++it;
    const uint64_t gap_end = it == have.end() ? end : std::min(end, it->first);
    if (gap_end > at) gaps.emplace_back(at, gap_end);
    if (it == have.end()) break;
    at = it->second;
  }
  if (gaps.empty()) return;
  check_unchanged_locked(file);
  RemoteSource& src = source_locked();
  for (const auto& [b, e] : gaps) {
    const auto t0 = std::chrono::steady_clock::now();
    RangeWriter out(dir_ / file);
    uint64_t pos = b;
    try {
      src.http().read_range(
          src.url(file), b, e - b,
          [&](std::span<const uint8_t> chunk) {
            out.write(chunk, pos);
            pos += chunk.size();
          },
          f->second.etag);
      out.finish();
    } catch (const Error& err) {
      throw Error(dir_.string() + " is a streaming install; fetching " + file + " bytes " + std::to_string(b) + "-" +
                  std::to_string(e - 1) + " failed: " + err.what());
    }
    append_log_locked(file, b, e - b);
    stats_.bytes += e - b;
    stats_.requests += 1;
    stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

RemoteFetchStats RemoteMirror::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

RangeFillingStorage::RangeFillingStorage(std::unique_ptr<Storage> inner, std::shared_ptr<RemoteMirror> mirror)
    : ForwardingStorage(std::move(inner)), mirror_(std::move(mirror)) {}

FileId RangeFillingStorage::open(const fs::path& path, OpenMode mode) {
  const FileId id = inner_->open(path, mode);
  const std::string name = path.filename().string();
  if (mirror_->files().contains(name)) {
    std::lock_guard<std::mutex> lock(mu_);
    names_[id] = name;
  }
  return id;
}

void RangeFillingStorage::submit(std::span<const Extent> extents) {
  std::vector<Extent> ready;
  ready.reserve(extents.size());
  for (const Extent& e : extents) {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = names_.find(e.file);
      if (it != names_.end()) name = it->second;
    }
    try {
      if (!name.empty()) mirror_->ensure(name, e.offset, e.length);
      ready.push_back(e);
    } catch (const Error& err) {
      Completion c;
      c.tag = e.tag;
      c.error = EIO;
      c.message = err.what();
      c.landed = std::chrono::steady_clock::now();
      std::lock_guard<std::mutex> lock(mu_);
      failed_.push_back(std::move(c));
    }
  }
  if (!ready.empty()) inner_->submit(ready);
}

std::vector<DriveInfo> RangeFillingStorage::drives() const {
  std::vector<DriveInfo> d = inner_->drives();
  const RemoteFetchStats st = mirror_->stats();
  DriveInfo remote;
  remote.name = kRemoteDrivePrefix + mirror_->source();
  remote.bytes_read = st.bytes;
  remote.busy_s = st.seconds;
  d.push_back(remote);
  return d;
}

size_t RangeFillingStorage::take_failed(std::vector<Completion>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = failed_.size();
  while (!failed_.empty()) {
    out.push_back(std::move(failed_.front()));
    failed_.pop_front();
  }
  return n;
}

size_t RangeFillingStorage::poll(std::vector<Completion>& out) { return take_failed(out) + inner_->poll(out); }

size_t RangeFillingStorage::wait(std::vector<Completion>& out, size_t min_count, std::chrono::milliseconds timeout) {
  const size_t failed = take_failed(out);
  if (failed >= min_count) return failed + inner_->poll(out);
  return failed + inner_->wait(out, min_count - failed, timeout);
}

size_t RangeFillingStorage::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_.size() + inner_->pending();
}

}  // namespace strata
