#include "pack/shard_feed.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "remote/sha256.h"
#include "storage/atomic_file.h"
#include "storage/write_at.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kSyncEvery = 64ull << 20;

class Fd {
 public:
  Fd(const fs::path& p, int flags) : fd_(::open(p.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw Error(p.string() + ": cannot open: " + std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void sync_data(int fd, const fs::path& shown) {
  if (::fdatasync(fd) != 0) throw Error(shown.string() + ": cannot sync: " + std::strerror(errno));
}

}  // namespace

ShardFeed::ShardFeed(const RemoteSource& source, std::vector<FeedShard> shards, fs::path dir, int connections,
                     std::function<void(uint64_t)> progress)
    : shards_(std::move(shards)),
      dir_(std::move(dir)),
      journal_(dir_.parent_path() / "shards.json"),
      connections_(std::max(connections, 1)),
      progress_(std::move(progress)),
      source_(source.another_connection()) {
  // What an earlier run left, for the shards as the source describes them now.
  nlohmann::json j;
  try {
    if (fs::exists(journal_)) j = read_json_file(journal_);
  } catch (const Error&) {
    j = nullptr;  // damaged: every shard starts over
  }
  for (const FeedShard& s : shards_) {
    State st;
    if (j.is_object() && j.contains(s.name) && j[s.name].is_object()) {
      const nlohmann::json& e = j[s.name];
      const bool same = e.value("size", uint64_t{0}) == s.info.size && e.value("sha256", std::string()) == s.info.sha256 &&
                        e.value("etag", std::string()) == s.info.etag;
      std::error_code ec;
      if (same && fs::exists(path(s.name), ec) && fs::file_size(path(s.name), ec) == s.info.size) {
        st.have = std::min(e.value("have", uint64_t{0}), s.info.size);
        st.whole = e.value("whole", false) && st.have == s.info.size;
        // Freed ranges are only ever those of a whole shard; past its end
        // they are not of this file.
        if (st.whole && e.contains("punched") && e["punched"].is_array())
          for (const auto& r : e["punched"])
            if (r.is_array() && r.size() == 2 && r[0].is_number_unsigned() && r[1].is_number_unsigned() &&
                r[0].get<uint64_t>() <= s.info.size && r[1].get<uint64_t>() <= s.info.size - r[0].get<uint64_t>())
              st.punched.emplace_back(r[0].get<uint64_t>(), r[1].get<uint64_t>());
        if (!st.whole && e.contains("punched") && e["punched"].is_array() && !e["punched"].empty()) st.have = 0;
      }
    }
    // Bytes already there count only when they can be checked: by the
    // sha256 at the end, or by an ETag every answer must repeat.
    if (!st.whole && s.info.sha256.empty() && s.info.etag.empty()) st.have = 0;
    state_[s.name] = std::move(st);
  }
}

ShardFeed::~ShardFeed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  for (auto& c : conns_) c->http().cancel();  // a stalled or backing-off request ends now
  for (std::thread& t : threads_) t.join();
}

void ShardFeed::save_locked() {
  nlohmann::json j = nlohmann::json::object();
  for (const FeedShard& s : shards_) {
    const State& st = state_.at(s.name);
    nlohmann::json punched = nlohmann::json::array();
    for (const auto& [off, len] : st.punched) punched.push_back({off, len});
    j[s.name] = {{"size", s.info.size}, {"sha256", s.info.sha256}, {"etag", s.info.etag},
                 {"have", st.have},     {"whole", st.whole},        {"punched", punched}};
  }
  write_file_atomically(journal_, j.dump());
}

void ShardFeed::prepare() {
  for (const FeedShard& s : shards_) {
    State& st = state_.at(s.name);
    if (st.whole || st.have >= 8) continue;
    const fs::path p = path(s.name);
    // The header first: 8 bytes of length, then the JSON.
    if (s.info.size < 8) throw Error(url_for_messages(source_.url(s.name)) + ": too short for a safetensors file");
    const std::vector<uint8_t> len = source_.read(s.name, 0, 8);
    const uint64_t n = safetensors_header_length(len.data(), s.info.size, url_for_messages(source_.url(s.name)));
    // With block sums, up to the end of the header's last block, every
    // block checked now: the checkpoint is opened from this header long
    // before the shard is whole and checked.
    const BlockSums::File* sums = sums_ ? sums_->find(s.name) : nullptr;
    if (sums && sums->size != s.info.size)
      throw Error(url_for_messages(source_.url(s.name)) + ": " + std::to_string(s.info.size) + " bytes, the source's " +
                  kBlockSumsFile + " says " + std::to_string(sums->size));
    const uint64_t end = sums ? sums->end(sums->block_of(8 + n - 1)) : 8 + n;
    const std::vector<uint8_t> header = source_.read(s.name, 8, end - 8);
    if (sums) {
      std::vector<uint8_t> all(len);
      all.insert(all.end(), header.begin(), header.end());
      if (const std::string wrong = first_mismatch(*sums, s.name, 0, all); !wrong.empty())
        throw Error(url_for_messages(source_.url(s.name)) + ": the header's bytes are not what the source publishes: " +
                    wrong + " (" + kBlockSumsFile + "); run again to fetch them anew");
    }
    Fd fd(p, O_WRONLY | O_CREAT | O_TRUNC);
    if (::ftruncate(fd.get(), static_cast<off_t>(s.info.size)) != 0)
      throw Error(p.string() + ": cannot size it: " + std::strerror(errno));
    write_all_at(fd.get(), len, 0, p);
    write_all_at(fd.get(), header, 8, p);
    sync_data(fd.get(), p);
    std::lock_guard<std::mutex> lock(mu_);
    fetched_ += end;
    st.have = end;
    st.punched.clear();
    save_locked();
  }
}

int ShardFeed::forget_partial() {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (auto& [name, st] : state_)
    if (!st.whole && st.have > 0 && !(sums_ && sums_->find(name))) {
      st.have = 0;
      st.punched.clear();
      ++n;
    }
  if (n > 0) save_locked();
  return n;
}

ShardFeed::State& ShardFeed::state_locked(const std::string& shard) {
  const auto it = state_.find(shard);
  if (it == state_.end()) throw Error("internal: no shard named " + shard + " is being fetched");
  return it->second;
}

void ShardFeed::start() {
  for (int c = 0; c < connections_; ++c) conns_.push_back(std::make_unique<RemoteSource>(source_.another_connection()));
  for (auto& conn : conns_) threads_.emplace_back([this, c = conn.get()] { worker(*c); });
}

void ShardFeed::worker(RemoteSource& conn) {
  for (;;) {
    size_t i;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] {
        while (next_ < shards_.size() && state_.at(shards_[next_].name).whole) ++next_;
        return stop_ || error_ || next_ >= shards_.size() || next_ <= wanted_ + static_cast<size_t>(connections_);
      });
      if (stop_ || error_ || next_ >= shards_.size()) return;
      i = next_++;
    }
    try {
      download(i, conn);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_ && !stop_) error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
  }
}

void ShardFeed::download(size_t i, RemoteSource& conn) {
  const FeedShard& s = shards_[i];
  const fs::path p = path(s.name);
  uint64_t have;
  {
    std::lock_guard<std::mutex> lock(mu_);
    have = state_.at(s.name).have;
  }
  Fd fd(p, O_RDWR);
  Sha256 hash;
  if (!s.info.sha256.empty()) {
    // What is there already goes into the hash first.
    std::vector<uint8_t> buf(1 << 20);
    for (uint64_t at = 0; at < have;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), have - at));
      const ssize_t r = ::pread(fd.get(), buf.data(), want, static_cast<off_t>(at));
      if (r < 0) throw Error(p.string() + ": cannot read back: " + std::strerror(errno));
      if (r == 0) throw Error(p.string() + ": shorter than its record says");
      hash.update(std::span<const uint8_t>(buf.data(), static_cast<size_t>(r)));
      at += static_cast<uint64_t>(r);
    }
  }
  uint64_t at = have, synced = have;
  conn.http().read_range(
      conn.url(s.name), have, s.info.size - have,
      [&](std::span<const uint8_t> b) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_) throw Error("pull stopped");
          fetched_ += b.size();
        }
        write_all_at(fd.get(), b, at, p);
        if (!s.info.sha256.empty()) hash.update(b);
        at += b.size();
        if (progress_) progress_(b.size());
        if (at - synced >= kSyncEvery) {
          sync_data(fd.get(), p);
          synced = at;
          std::lock_guard<std::mutex> lock(mu_);
          state_.at(s.name).have = at;
          save_locked();
        }
      },
      s.info.sha256.empty() ? s.info.etag : std::string());
  sync_data(fd.get(), p);
  if (!s.info.sha256.empty()) {
    const std::string got = hash.hex();
    if (got != s.info.sha256) {
      std::lock_guard<std::mutex> lock(mu_);
      state_.at(s.name).have = 0;
      save_locked();
      throw Error(url_for_messages(conn.url(s.name)) + ": the download's sha256 is " + got +
                  ", the source publishes " + s.info.sha256 + "; run again to fetch it anew");
    }
  }
  // A published sha256 that matched says more than the block sums.
  if (sums_ && s.info.sha256.empty()) {
    if (const std::optional<BadBlock> bad = first_bad_block(p, s.name, *sums_)) {
      // From the bad block on; from the start when it is in the header,
      // which the next run must fetch (and check) before opening anything.
      uint8_t len[8] = {0};
      uint64_t n = 0;
      if (::pread(fd.get(), len, 8, 0) == 8)
        for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
      std::lock_guard<std::mutex> lock(mu_);
      state_.at(s.name).have = bad->offset < 8 + std::min<uint64_t>(n, s.info.size) ? 0 : bad->offset;
      save_locked();
      throw Error(url_for_messages(conn.url(s.name)) + ": the download is not what the source publishes: " +
                  bad->message + "; run again to fetch it anew from there");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  State& st = state_.at(s.name);
  st.have = s.info.size;
  st.whole = true;
  save_locked();
  changed_.notify_all();
}

void ShardFeed::wait_for(const std::vector<ShardRange>& ranges) {
  std::vector<ShardRange> again;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (const ShardRange& r : ranges) {
      state_locked(r.shard);
      for (size_t i = 0; i < shards_.size(); ++i)
        if (shards_[i].name == r.shard) wanted_ = std::max(wanted_, i);
    }
    changed_.notify_all();
    changed_.wait(lock, [&] {
      if (error_ || stop_) return true;
      for (const ShardRange& r : ranges)
        if (!state_locked(r.shard).whole) return false;
      return true;
    });
    if (error_) std::rethrow_exception(error_);
    if (stop_) throw Error("pull stopped");
    // Freed by an earlier run's packing, and wanted again (the pack started over).
    for (const ShardRange& r : ranges) {
      State& st = state_.at(r.shard);
      for (const auto& [off, len] : st.punched)
        if (r.offset < off + len && off < r.offset + r.length) {
          again.push_back(r);
          break;
        }
    }
  }
  for (const ShardRange& r : again) {
    // Checked against the source's block sums where it publishes them (the
    // range widened to whole blocks, fetched once more if wrong), else by
    // transport only (HTTP status, Content-Range, the ETag the shard had).
    const fs::path p = path(r.shard);
    Fd fd(p, O_WRONLY);
    std::string etag;
    for (const FeedShard& s : shards_)
      if (s.name == r.shard) etag = s.info.etag;
    const BlockSums::File* sums = sums_ ? sums_->find(r.shard) : nullptr;
    uint64_t b = r.offset, e = r.offset + r.length;
    if (sums && r.length > 0) {
      b = sums->begin(sums->block_of(b));
      e = sums->end(sums->block_of(e - 1));
    }
    std::vector<uint8_t> bytes;
    for (int attempt = 0; attempt < 2; ++attempt) {
      bytes.clear();
      source_.http().read_range(
          source_.url(r.shard), b, e - b,
          [&](std::span<const uint8_t> chunk) { bytes.insert(bytes.end(), chunk.begin(), chunk.end()); }, etag);
      if (!sums || r.length == 0) break;
      const std::string wrong = first_mismatch(*sums, r.shard, b, bytes);
      if (wrong.empty()) break;
      if (attempt == 1)
        throw Error(url_for_messages(source_.url(r.shard)) + ": fetched twice, both times other than the source's " +
                    kBlockSumsFile + " says (" + wrong + "); run again to fetch it anew");
    }
    write_all_at(fd.get(), bytes, b, p);
    sync_data(fd.get(), p);
    std::lock_guard<std::mutex> lock(mu_);
    fetched_ += e - b;
    auto& punched = state_.at(r.shard).punched;
    std::vector<std::pair<uint64_t, uint64_t>> kept;
    for (const auto& [off, len] : punched) {
      // What stays punched around the refetched range.
      if (off < r.offset) kept.emplace_back(off, std::min(off + len, r.offset) - off);
      if (off + len > r.offset + r.length) {
        const uint64_t from = std::max(off, r.offset + r.length);
        kept.emplace_back(from, off + len - from);
      }
    }
    punched = std::move(kept);
    save_locked();
  }
}

void ShardFeed::wait_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wanted_ = shards_.size();
  }
  std::vector<ShardRange> all;
  for (const FeedShard& s : shards_) all.push_back({s.name, 0, 0});
  wait_for(all);
}

void ShardFeed::release(const std::vector<ShardRange>& ranges) {
  std::map<std::string, std::vector<ShardRange>> by_shard;
  for (const ShardRange& r : ranges) by_shard[r.shard].push_back(r);
  for (const auto& [shard, rs] : by_shard) {
    // Recorded before the bytes go: a run killed in between refetches bytes
    // that are still there, never reads zeros it thinks are data.
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const ShardRange& r : rs) state_locked(shard).punched.emplace_back(r.offset, r.length);
      save_locked();
    }
    const fs::path p = path(shard);
    Fd fd(p, O_WRONLY);
    for (const ShardRange& r : rs)
      if (r.length > 0 &&
          ::fallocate(fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(r.offset),
                      static_cast<off_t>(r.length)) != 0 &&
          errno != EOPNOTSUPP && errno != ENOSYS)  // a filesystem that cannot punch keeps the bytes
        throw Error(p.string() + ": cannot free packed bytes: " + std::strerror(errno));
  }
}

uint64_t ShardFeed::fetched_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetched_;
}

}  // namespace strata
