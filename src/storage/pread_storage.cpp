#include "storage/pread_storage.h"

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <thread>

#include "util/error.h"

namespace strata {

using detail::RawRead;

class PreadPoolStorage::Workers {
 public:
  Workers(PreadPoolStorage& owner, unsigned threads) : owner_(owner) {
    for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void push(std::span<RawRead* const> reads) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.insert(queue_.end(), reads.begin(), reads.end());
    }
    if (reads.size() == 1)
      cv_.notify_one();
    else
      cv_.notify_all();
  }

 private:
  void loop() {
    for (;;) {
      RawRead* raw;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        raw = queue_.front();
        queue_.pop_front();
      }
      int64_t res;
      if (raw->inject_errno) {
        res = -static_cast<int64_t>(raw->inject_errno);
      } else {
        ssize_t n = ::pread(raw->fd, raw->buf, raw->len, static_cast<off_t>(raw->offset));
        res = n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n);
      }
      owner_.complete(raw, res);
    }
  }

  PreadPoolStorage& owner_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<RawRead*> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

PreadPoolStorage::PreadPoolStorage(const StorageOptions& options) : StorageEngine(options) {}

PreadPoolStorage::~PreadPoolStorage() {
  drain();
  std::lock_guard<std::mutex> lock(mutex_);
  drives_.clear();
}

void PreadPoolStorage::attach_drive(uint32_t drive) {
  auto w = std::make_unique<Workers>(*this, queue_depth());
  std::lock_guard<std::mutex> lock(mutex_);
  if (drives_.size() != drive) throw Error("pread storage: drives attached out of order");
  drives_.push_back(std::move(w));
}

void PreadPoolStorage::issue(uint32_t drive, std::span<RawRead* const> reads) {
  Workers* w;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    w = drives_[drive].get();
  }
  w->push(reads);
}

}  // namespace strata
