#include "remote/range_filling_storage.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>

namespace strata {

namespace fs = std::filesystem;

struct RangeFillingStorage::Inbox {
  std::mutex mu;
  std::condition_variable landed;
  uint64_t next_id = 0;
  struct Held {
    Extent extent;
    uint64_t want = 0;  // the mirror's id of the wait (0 until known)
  };
  std::map<uint64_t, Held> waiting;  // by arrival: extents whose bytes are being fetched
  std::vector<Extent> ready;          // fetched: to be read from the drive
  std::deque<Completion> failed;      // failed or cancelled: handed out as they are
};

namespace {
Completion failure(const Extent& e, int error, std::string message) {
  Completion c;
  c.tag = e.tag;
  c.error = error;
  c.message = std::move(message);
  c.landed = std::chrono::steady_clock::now();
  return c;
}
}  // namespace

RangeFillingStorage::RangeFillingStorage(std::unique_ptr<Storage> inner, std::shared_ptr<RemoteMirror> mirror)
    : ForwardingStorage(std::move(inner)), mirror_(std::move(mirror)), inbox_(std::make_shared<Inbox>()) {}

RangeFillingStorage::~RangeFillingStorage() = default;

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
    if (name.empty()) {
      ready.push_back(e);
      continue;
    }
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(inbox_->mu);
      id = inbox_->next_id++;
      inbox_->waiting[id] = Inbox::Held{e};
    }
    const std::weak_ptr<Inbox> weak = inbox_;
    auto landed = [weak, id](const std::string& error) {
      const std::shared_ptr<Inbox> box = weak.lock();
      if (!box) return;
      std::lock_guard<std::mutex> lock(box->mu);
      const auto it = box->waiting.find(id);
      if (it == box->waiting.end()) return;  // cancelled meanwhile: its completion is out
      if (!error.empty()) box->failed.push_back(failure(it->second.extent, EIO, error));
      else box->ready.push_back(it->second.extent);
      box->waiting.erase(it);
      box->landed.notify_all();
    };
    uint64_t want = 0;
    bool present = false;
    try {
      // A guess waits behind reads; promote() makes it one.
      present = mirror_->request(name, e.offset, e.length, e.background ? FetchPriority::Guess : FetchPriority::Demand,
                                 landed, &want);
    } catch (const std::exception& err) {
      landed(std::string("cannot fetch: ") + err.what());
      continue;
    }
    // A cancel or promote that came while the mirror was being asked did
    // not know the wait's id yet: it is passed on now.
    bool withdraw = false, raise = false;
    {
      std::lock_guard<std::mutex> lock(inbox_->mu);
      const auto it = inbox_->waiting.find(id);
      if (it == inbox_->waiting.end()) {
        withdraw = !present && want != 0;  // done (then unknown to the mirror: nothing) or cancelled
      } else if (present) {
        inbox_->waiting.erase(it);
        ready.push_back(e);
      } else {
        it->second.want = want;
        raise = e.background && !it->second.extent.background;
      }
    }
    if (withdraw) mirror_->withdraw(want);
    if (raise) mirror_->reprioritize(want, FetchPriority::Demand);
  }
  if (!ready.empty()) inner_->submit(ready);
}

size_t RangeFillingStorage::drain(std::vector<Completion>& out) {
  std::vector<Extent> ready;
  size_t failed = 0;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    ready.swap(inbox_->ready);
    failed = inbox_->failed.size();
    while (!inbox_->failed.empty()) {
      out.push_back(std::move(inbox_->failed.front()));
      inbox_->failed.pop_front();
    }
  }
  if (!ready.empty()) inner_->submit(ready);
  return failed;
}

std::vector<DriveInfo> RangeFillingStorage::drives() const {
  std::vector<DriveInfo> d = inner_->drives();
  const RemoteFetchStats st = mirror_->stats();
  DriveInfo remote;
  remote.name = kRemoteDrivePrefix + mirror_->source();
  remote.bytes_read = st.bytes;
  remote.busy_s = st.seconds;
  remote.fetched_reads = st.remote_reads;
  remote.fetch_wait_s = st.remote_wait_s;
  remote.local_reads = st.local_reads;
  d.push_back(remote);
  return d;
}

size_t RangeFillingStorage::poll(std::vector<Completion>& out) { return drain(out) + inner_->poll(out); }

size_t RangeFillingStorage::wait(std::vector<Completion>& out, size_t min_count, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const bool forever = timeout.count() < 0;
  const auto deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
  size_t got = 0;
  for (;;) {
    got += drain(out);
    if (got >= min_count) return got + inner_->poll(out);
    bool fetching = false;
    {
      std::lock_guard<std::mutex> lock(inbox_->mu);
      fetching = !inbox_->waiting.empty() || !inbox_->ready.empty() || !inbox_->failed.empty();
    }
    const auto now = Clock::now();
    if (!forever && now >= deadline) return got + inner_->poll(out);
    const auto left =
        forever ? std::chrono::milliseconds(-1) : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (!fetching) return got + inner_->wait(out, min_count - got, left);  // only the drive's reads are left
    if (inner_->pending() > 0) {
      // Reads below and fetches above at once: look up now and then.
      const auto slice = std::chrono::milliseconds(2);
      got += inner_->wait(out, min_count - got, forever ? slice : std::min(slice, left));
      continue;
    }
    std::unique_lock<std::mutex> lock(inbox_->mu);
    auto arrived = [&] { return !inbox_->ready.empty() || !inbox_->failed.empty() || inbox_->waiting.empty(); };
    if (forever) inbox_->landed.wait(lock, arrived);
    else inbox_->landed.wait_until(lock, deadline, arrived);
  }
}

size_t RangeFillingStorage::pending() const {
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    n = inbox_->waiting.size() + inbox_->ready.size() + inbox_->failed.size();
  }
  return n + inner_->pending();
}

size_t RangeFillingStorage::cancel(std::span<const uint64_t> tags) {
  size_t n = 0;
  std::vector<uint64_t> withdrawn;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    // Still being fetched: they complete now, and their fetch is withdrawn
    // (a piece in flight still lands; its bytes stay on the drive).
    for (auto it = inbox_->waiting.begin(); it != inbox_->waiting.end();)
      if (it->second.extent.background && std::find(tags.begin(), tags.end(), it->second.extent.tag) != tags.end()) {
        inbox_->failed.push_back(failure(it->second.extent, ECANCELED, "cancelled"));
        if (it->second.want) withdrawn.push_back(it->second.want);
        it = inbox_->waiting.erase(it);
        ++n;
      } else {
        ++it;
      }
    // Fetched but not handed down yet: they complete now.
    for (auto it = inbox_->ready.begin(); it != inbox_->ready.end();)
      if (it->background && std::find(tags.begin(), tags.end(), it->tag) != tags.end()) {
        inbox_->failed.push_back(failure(*it, ECANCELED, "cancelled"));
        it = inbox_->ready.erase(it);
        ++n;
      } else {
        ++it;
      }
    if (n > 0) inbox_->landed.notify_all();
  }
  for (const uint64_t w : withdrawn) mirror_->withdraw(w);
  return n + inner_->cancel(tags);
}

void RangeFillingStorage::promote(std::span<const uint64_t> tags) {
  std::vector<uint64_t> now_read;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    for (auto& [id, held] : inbox_->waiting)
      if (std::find(tags.begin(), tags.end(), held.extent.tag) != tags.end()) {
        held.extent.background = false;
        if (held.want) now_read.push_back(held.want);
      }
    for (Extent& e : inbox_->ready)
      if (std::find(tags.begin(), tags.end(), e.tag) != tags.end()) e.background = false;
  }
  for (const uint64_t w : now_read) mirror_->reprioritize(w, FetchPriority::Demand);
  inner_->promote(tags);
}

}  // namespace strata
