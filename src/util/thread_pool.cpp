#include "util/thread_pool.h"

#include <algorithm>

namespace strata {

int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads) {
  int extra = std::max(threads, 1) - 1;
  for (int i = 0; i < extra; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(min_chunk, 1);
  // A few chunks per thread balances uneven work without much overhead.
  size_t chunks = std::min(n / min_chunk, static_cast<size_t>(size()) * 4);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  auto run_chunk = [&](size_t c) {
    size_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    next_chunk_ = 0;
    finished_chunks_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  for (;;) {
    size_t c;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_chunk_ >= job_chunks_) break;
      c = next_chunk_++;
    }
    run_chunk(c);
    std::lock_guard<std::mutex> lock(mutex_);
    if (++finished_chunks_ == job_chunks_) done_.notify_all();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return finished_chunks_ == job_chunks_; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ && next_chunk_ < job_chunks_); });
    if (stop_) return;
    seen = generation_;
    while (job_ && next_chunk_ < job_chunks_) {
      size_t c = next_chunk_++;
      const auto* fn = job_;
      size_t n = job_n_, chunks = job_chunks_;
      lock.unlock();
      size_t begin = n * c / chunks, end = n * (c + 1) / chunks;
      if (begin < end) (*fn)(begin, end);
      lock.lock();
      if (++finished_chunks_ == job_chunks_) done_.notify_all();
    }
  }
}

}  // namespace strata
