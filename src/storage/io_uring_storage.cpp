#include "storage/io_uring_storage.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <thread>

#include "util/error.h"

namespace strata {

using detail::FileEntry;
using detail::RawRead;

namespace {
constexpr unsigned kFixedFileSlots = 1024;
constexpr uint64_t kEventTag = ~0ull;  // user_data of the eventfd read
}  // namespace

class IoUringStorage::Ring {
 public:
  Ring(IoUringStorage& owner, const std::string& drive_name, unsigned queue_depth,
       std::vector<BufferRegion> regions)
      : owner_(owner), queue_depth_(queue_depth) {
    efd_ = eventfd(0, EFD_CLOEXEC);
    if (efd_ < 0) throw Error(drive_name + ": cannot create an eventfd: " + std::strerror(errno));
    std::promise<std::string> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready, regions = std::move(regions)]() mutable { loop(ready, std::move(regions)); });
    std::string failure = started.get();
    if (!failure.empty()) {
      thread_.join();
      ::close(efd_);
      throw Error(drive_name + ": " + failure);
    }
    try {
      for (unsigned i = 0; i < finisher_count(); ++i) finishers_.emplace_back([this] { finish_loop(); });
    } catch (...) {  // no thread to be had: stop those started before giving up
      stop_threads();
      ::close(efd_);
      throw;
    }
  }

  ~Ring() {
    stop_threads();
    ::close(efd_);
  }

  // The ring thread first (it hands its last landed reads to the finishers),
  // then the finishers, once they have finished everything.
  void stop_threads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake();
    thread_.join();
    {
      std::lock_guard<std::mutex> lock(finish_mutex_);
      finish_stop_ = true;
    }
    finish_cv_.notify_all();
    for (auto& t : finishers_) t.join();
  }

  void push(std::span<RawRead* const> reads) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inbox_.insert(inbox_.end(), reads.begin(), reads.end());
    }
    // The ring thread looks at its inbox before it sleeps again.
    if (std::this_thread::get_id() != thread_id_) wake();
  }

  // Runs fn on the ring thread (the only task allowed to touch a single-issuer
  // ring). wait = false: fire and forget (it still runs before any read pushed later).
  int run(std::function<int(io_uring*)> fn, bool wait) {
    auto task = std::make_shared<std::packaged_task<int(io_uring*)>>(std::move(fn));
    auto result = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      control_.push_back(task);
    }
    wake();
    return wait ? result.get() : 0;
  }

  // Ring-thread state, touched only from loop() and run() tasks.
  std::vector<BufferRegion> regions_;  // sorted by address; registered as fixed buffers
  std::vector<bool> fixed_file_;

  bool register_regions(io_uring* ring, const std::vector<BufferRegion>& regions, std::string* why) {
    if (!regions_.empty()) {
      io_uring_unregister_buffers(ring);
      regions_.clear();
    }
    if (regions.empty()) return true;
    // Registered in address order, so a region's position in regions_ is its
    // kernel buffer index.
    std::vector<BufferRegion> sorted = regions;
    std::sort(sorted.begin(), sorted.end(),
              [](const BufferRegion& a, const BufferRegion& b) { return a.data < b.data; });
    std::vector<iovec> iov;
    for (const auto& r : sorted) iov.push_back({r.data, r.size});
    int rc = io_uring_register_buffers(ring, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc < 0) {
      if (why) *why = std::strerror(-rc);
      return false;
    }
    regions_ = std::move(sorted);
    return true;
  }

 private:
  void wake() {
    if (!signalled_.exchange(true)) {
      uint64_t one = 1;
      ssize_t n = ::write(efd_, &one, sizeof one);
      (void)n;
    }
  }

  // Index of the registered region holding [p, p+len), or -1.
  int region_index(const uint8_t* p, uint64_t len) const {
    auto it = std::upper_bound(regions_.begin(), regions_.end(), p,
                               [](const uint8_t* v, const BufferRegion& r) { return v < static_cast<uint8_t*>(r.data); });
    if (it == regions_.begin()) return -1;
    --it;
    const auto* base = static_cast<const uint8_t*>(it->data);
    if (p + len > base + it->size) return -1;
    return static_cast<int>(it - regions_.begin());
  }

  void prep(io_uring* ring, RawRead* raw) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (!sqe) {
      io_uring_submit(ring);
      sqe = io_uring_get_sqe(ring);
    }
    if (raw->inject_errno) {
      io_uring_prep_nop(sqe);
    } else {
      const bool fixed_file = raw->file < fixed_file_.size() && fixed_file_[raw->file];
      const int fd = fixed_file ? static_cast<int>(raw->file) : raw->fd;
      const unsigned len = static_cast<unsigned>(raw->len);
      const int idx = region_index(raw->buf, raw->len);
      if (idx >= 0)
        io_uring_prep_read_fixed(sqe, fd, raw->buf, len, raw->offset, idx);
      else
        io_uring_prep_read(sqe, fd, raw->buf, len, raw->offset);
      if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
    }
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(raw));
  }

  void loop(std::promise<std::string>& ready, std::vector<BufferRegion> initial_regions) {
    thread_id_ = std::this_thread::get_id();
    io_uring ring;
    io_uring_params p;
    std::memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    const unsigned entries = std::max(queue_depth_ + 2, 4u);
    int rc = io_uring_queue_init_params(entries, &ring, &p);
    if (rc == -EINVAL) {  // kernels before 6.1
      std::memset(&p, 0, sizeof p);
      rc = io_uring_queue_init_params(entries, &ring, &p);
    }
    if (rc < 0) {
      ready.set_value(std::string("cannot create an io_uring: ") + std::strerror(-rc));
      return;
    }
    if (io_uring_register_files_sparse(&ring, kFixedFileSlots) == 0) fixed_file_.assign(kFixedFileSlots, false);
    std::string why;
    if (!register_regions(&ring, initial_regions, &why))
      owner_.add_note("io_uring: cannot register buffers (" + why + "); using plain reads");
    ready.set_value({});

    bool armed = false;
    unsigned in_flight = 0;
    std::vector<RawRead*> batch;
    std::vector<std::shared_ptr<std::packaged_task<int(io_uring*)>>> control;
    std::vector<std::pair<uint64_t, int>> landed;
    std::vector<RawRead*> finished;
    bool stop = false;
    // Takes the inbox (and control tasks) and turns it into SQEs.
    auto take_inbox = [&] {
      signalled_.store(false);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        batch.swap(inbox_);
        control.swap(control_);
        stop = stop_;
      }
      for (auto& task : control) (*task)(&ring);
      control.clear();
      for (RawRead* raw : batch) prep(&ring, raw);
      in_flight += static_cast<unsigned>(batch.size());
      batch.clear();
    };
    for (;;) {
      take_inbox();
      if (stop && in_flight == 0) break;
      if (!armed) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        if (!sqe) {
          io_uring_submit(&ring);
          sqe = io_uring_get_sqe(&ring);
        }
        io_uring_prep_read(sqe, efd_, &efd_value_, sizeof efd_value_, 0);
        io_uring_sqe_set_data64(sqe, kEventTag);
        armed = true;
      }
      rc = io_uring_submit_and_wait(&ring, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
        owner_.add_note(std::string("io_uring: submit failed: ") + std::strerror(-rc));

      unsigned head, seen = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring, head, cqe) {
        landed.emplace_back(io_uring_cqe_get_data64(cqe), cqe->res);
        ++seen;
      }
      io_uring_cq_advance(&ring, seen);
      for (auto [data, res] : landed) {
        if (data == kEventTag) {
          armed = false;
          continue;
        }
        auto* raw = reinterpret_cast<RawRead*>(data);
        --in_flight;
        int64_t result = raw->inject_errno ? -static_cast<int64_t>(raw->inject_errno) : res;
        owner_.complete(raw, result, &finished);  // may push follow-up reads to our inbox
      }
      landed.clear();
      if (!finished.empty()) {
        // Give the drive its next reads, then hand the copies and checksums
        // to the finishers: hashing a landed blob here kept this thread from
        // reaping and refilling the drive meanwhile.
        take_inbox();
        io_uring_submit(&ring);
        {
          std::lock_guard<std::mutex> lock(finish_mutex_);
          to_finish_.insert(to_finish_.end(), finished.begin(), finished.end());
        }
        if (finished.size() > 1)
          finish_cv_.notify_all();
        else
          finish_cv_.notify_one();
        finished.clear();
      }
    }
    io_uring_queue_exit(&ring);
  }

  IoUringStorage& owner_;
  const unsigned queue_depth_;
  int efd_ = -1;
  uint64_t efd_value_ = 0;
  std::thread thread_;
  std::thread::id thread_id_;
  std::atomic<bool> signalled_{false};
  std::mutex mutex_;
  std::vector<RawRead*> inbox_;
  std::vector<std::shared_ptr<std::packaged_task<int(io_uring*)>>> control_;
  bool stop_ = false;

  // The finishers: landed extents' bounce copies, checksums and completions
  // (StorageEngine::finish_deferred), one extent at a time each. At ~8.5 GB/s
  // of xxh3 over bytes fresh from the drive, a 1 MiB blob takes ~0.12 ms:
  // meanwhile the ring thread reaps and refills, and the other finishers
  // check blobs that land together (a step waits for all of its layer's; on
  // a loaded small machine one thread hashed slower than the drive reads).
  static unsigned finisher_count() {
    const unsigned cores = std::thread::hardware_concurrency();
    return std::clamp(cores / 4, 1u, 4u);
  }
  void finish_loop() {
    std::vector<RawRead*> mine;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(finish_mutex_);
        finish_cv_.wait(lock, [&] { return finish_stop_ || !to_finish_.empty(); });
        if (to_finish_.empty()) return;  // stopped, and nothing left
        mine.push_back(to_finish_.front());
        to_finish_.pop_front();
      }
      owner_.finish_deferred(mine);  // clears it
    }
  }
  std::vector<std::thread> finishers_;
  std::mutex finish_mutex_;
  std::condition_variable finish_cv_;
  std::deque<RawRead*> to_finish_;
  bool finish_stop_ = false;
};

bool IoUringStorage::available(std::string* why) {
  io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    if (why) *why = std::strerror(-rc);
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

IoUringStorage::IoUringStorage(const StorageOptions& options) : StorageEngine(options) {
  std::string why;
  if (!available(&why)) throw Error("io_uring is not available: " + why);
}

IoUringStorage::~IoUringStorage() {
  drain();
  std::lock_guard<std::mutex> lock(rings_mutex_);
  rings_.clear();
}

IoUringStorage::Ring* IoUringStorage::ring(uint32_t drive) {
  std::lock_guard<std::mutex> lock(rings_mutex_);
  return rings_[drive].get();
}

void IoUringStorage::attach_drive(uint32_t drive) {
  std::vector<BufferRegion> regions;
  {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    regions = regions_;
  }
  auto r = std::make_unique<Ring>(*this, drives()[drive].name, queue_depth(), std::move(regions));
  std::lock_guard<std::mutex> lock(rings_mutex_);
  if (rings_.size() != drive) throw Error("io_uring: drives attached out of order");
  rings_.push_back(std::move(r));
}

void IoUringStorage::attach_file(const FileEntry& f) {
  if (f.id >= kFixedFileSlots) return;
  Ring* r = ring(f.info.drive);
  const FileId id = f.id;
  const int fd = f.fd;
  r->run(
      [r, id, fd](io_uring* ring) {
        if (r->fixed_file_.empty()) return 0;
        int fds[1] = {fd};
        int rc = io_uring_register_files_update(ring, id, fds, 1);
        if (rc == 1) r->fixed_file_[id] = true;
        return rc;
      },
      false);
}

void IoUringStorage::issue(uint32_t drive, std::span<RawRead* const> reads) { ring(drive)->push(reads); }

bool IoUringStorage::register_buffers(std::span<const BufferRegion> regions) {
  if (live_requests() != 0) throw Error("storage: register_buffers while reads are in flight");
  std::vector<BufferRegion> sorted(regions.begin(), regions.end());
  for (const auto& r : sorted)
    if (!r.data || r.size == 0 || r.size > (1ull << 30))
      throw Error("storage: register_buffers: each region must be non-empty and at most 1 GiB");
  std::sort(sorted.begin(), sorted.end(),
            [](const BufferRegion& a, const BufferRegion& b) { return a.data < b.data; });
  std::vector<Ring*> rings;
  {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    regions_ = sorted;
    for (auto& r : rings_) rings.push_back(r.get());
  }
  bool ok = true;
  for (Ring* r : rings) {
    std::string why;
    int rc = r->run([r, &sorted, &why](io_uring* ring) { return r->register_regions(ring, sorted, &why) ? 0 : -1; },
                    true);
    if (rc != 0) {
      add_note("io_uring: cannot register buffers (" + why + "); using plain reads");
      ok = false;
    }
  }
  return ok;
}

}  // namespace strata
