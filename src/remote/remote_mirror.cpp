#include "remote/remote_mirror.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "storage/atomic_file.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "strata-remote-mirror";

void write_at(const fs::path& p, std::span<const uint8_t> bytes, uint64_t at) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error(p.string() + ": cannot open: " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(p.string() + ": cannot write: " + why);
    }
    done += static_cast<size_t>(w);
  }
  const bool synced = ::fdatasync(fd) == 0;
  ::close(fd);
  if (!synced) throw Error(p.string() + ": cannot sync");
}

}  // namespace

bool RemoteMirror::is_mirror(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::exists(dir / kRemoteMirrorRecord, ec);
}

void RemoteMirror::create(const fs::path& dir, const std::string& source,
                          const std::map<std::string, RemoteFileInfo>& files, const std::string& hf_endpoint) {
  nlohmann::json f = nlohmann::json::object();
  for (const auto& [name, info] : files)
    f[name] = {{"size", info.size}, {"etag", info.etag}, {"sha256", info.sha256}};
  write_file_atomically(dir / kRemoteMirrorRecord,
                        nlohmann::json{{"format", kFormat}, {"version", 1}, {"source", source}, {"hf_endpoint", hf_endpoint}, {"files", f}}
                            .dump(1));
}

RemoteMirror::RemoteMirror(fs::path dir, EnvLookup env, RetryPolicy retry)
    : dir_(std::move(dir)), env_(std::move(env)), retry_(retry) {
  const fs::path record = dir_ / kRemoteMirrorRecord;
  const nlohmann::json j = read_json_file(record);
  const std::string where = record.string();
  if (!j.is_object() || j.value("format", std::string()) != kFormat || !j.contains("version") ||
      !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    throw Error(where + ": not a strata remote mirror record of version 1");
  if (!j.contains("source") || !j["source"].is_string()) throw Error(where + ": no \"source\"");
  source_ = j["source"].get<std::string>();
  if (j.contains("hf_endpoint") && j["hf_endpoint"].is_string()) hf_endpoint_ = j["hf_endpoint"].get<std::string>();
  if (!j.contains("files") || !j["files"].is_object()) throw Error(where + ": no \"files\"");
  for (const auto& [name, e] : j["files"].items()) {
    if (!e.is_object() || !e.contains("size") || !e["size"].is_number_unsigned())
      throw Error(where + ": file " + name + " has no size");
    if (name.empty() || name.find('/') != std::string::npos || name.starts_with("."))
      throw Error(where + ": '" + name + "' is not a file of the folder");
    RemoteFileInfo info;
    info.exists = true;
    info.size = e["size"].get<uint64_t>();
    info.etag = e.value("etag", std::string());
    info.sha256 = e.value("sha256", std::string());
    files_[name] = info;
  }
  // The log: lines that do not describe a range of a known file are left
  // out (their bytes are fetched again when wanted).
  std::ifstream log(dir_ / kRemoteMirrorLog);
  std::string line;
  while (std::getline(log, line)) {
    std::istringstream in(line);
    std::string name;
    uint64_t offset = 0, length = 0;
    if (!(in >> name >> offset >> length)) continue;
    const auto it = files_.find(name);
    if (it == files_.end() || length == 0 || offset > it->second.size || length > it->second.size - offset) continue;
    add(present_[name], offset, offset + length);
  }
  log_fd_ = ::open((dir_ / kRemoteMirrorLog).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0) throw Error((dir_ / kRemoteMirrorLog).string() + ": cannot open: " + std::strerror(errno));
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

void RemoteMirror::append_log_locked(const std::string& file, uint64_t offset, uint64_t length) {
  const std::string line = file + " " + std::to_string(offset) + " " + std::to_string(length) + "\n";
  if (::write(log_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fdatasync(log_fd_) != 0)
    throw Error((dir_ / kRemoteMirrorLog).string() + ": cannot record a fetched range: " + std::strerror(errno));
  add(present_[file], offset, offset + length);
}

void RemoteMirror::mark_present(const std::string& file, uint64_t offset, uint64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!files_.contains(file)) throw Error("internal: " + file + " is not a file of " + dir_.string());
  append_log_locked(file, offset, length);
}

RemoteSource& RemoteMirror::source_locked() {
  if (!remote_) {
    // The hub the install came from, unless the environment names one now.
    const EnvLookup env = [this](const std::string& name) -> std::optional<std::string> {
      auto v = env_(name);
      if (name == "HF_ENDPOINT" && (!v || v->empty()) && !hf_endpoint_.empty()) return hf_endpoint_;
      return v;
    };
    remote_ = std::make_unique<RemoteSource>(parse_source(source_, env), retry_);
  }
  return *remote_;
}

void RemoteMirror::ensure(const std::string& file, uint64_t offset, uint64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto f = files_.find(file);
  if (f == files_.end()) return;  // not a file of the mirror: on disk whole
  const uint64_t end = std::min(offset + length, f->second.size);
  if (offset >= end || present_locked(file, offset, end)) return;
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
  RemoteSource& src = source_locked();
  for (const auto& [b, e] : gaps) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<uint8_t> bytes;
    bytes.reserve(e - b);
    src.http().read_range(
        src.url(file), b, e - b, [&](std::span<const uint8_t> chunk) { bytes.insert(bytes.end(), chunk.begin(), chunk.end()); },
        f->second.sha256.empty() ? f->second.etag : std::string());
    write_at(dir_ / file, bytes, b);
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
    : inner_(std::move(inner)), mirror_(std::move(mirror)) {}

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
  for (const Extent& e : extents) {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = names_.find(e.file);
      if (it == names_.end()) continue;
      name = it->second;
    }
    mirror_->ensure(name, e.offset, e.length);
  }
  inner_->submit(extents);
}

}  // namespace strata
