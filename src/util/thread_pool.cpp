#include "util/thread_pool.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace strata {

int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(std::min<unsigned>(n, kMaxThreads));
}

ThreadPool::ThreadPool(int threads) {
  if (threads > kMaxThreads)
    throw Error(std::to_string(threads) + " threads: at most " + std::to_string(kMaxThreads));
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

namespace {

// About 20-50 µs of polling before a thread sleeps: long enough to bridge the
// gap between two kernel calls of one step, short enough not to starve the
// I/O threads on a small machine.
constexpr int kSpin = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void ThreadPool::work(int index, uint64_t gen, const IndexedFn& fn, size_t n, size_t chunks) {
  for (;;) {
    uint64_t v = next_chunk_.load(std::memory_order_acquire);
    size_t c;
    do {
      c = static_cast<size_t>(v & 0xffffffffu);
      if ((v >> 32) != (gen & 0xffffffffu) || c >= chunks) return;
    } while (!next_chunk_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel));
    const size_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) {
      try {
        fn(index, begin, end);
      } catch (...) {
        // Kept for the caller: the other chunks still run and are counted,
        // so the job ends whole before its error surfaces.
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    if (finished_chunks_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk) {
  parallel_for_indexed(n, [&fn](int, size_t begin, size_t end) { fn(begin, end); }, min_chunk);
}

void ThreadPool::parallel_for_indexed(size_t n, const IndexedFn& fn, size_t min_chunk) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(min_chunk, 1);
  // A few chunks per thread balances uneven work without much overhead.
  const size_t chunks = std::min(n / min_chunk, static_cast<size_t>(size()) * 4);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, 0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
    finished_chunks_.store(0, std::memory_order_relaxed);
    next_chunk_.store((gen & 0xffffffffu) << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
  }
  wake_.notify_all();
  work(0, generation_.load(std::memory_order_relaxed), fn, n, chunks);
  for (int i = 0; i < kSpin && finished_chunks_.load(std::memory_order_acquire) < chunks; ++i) cpu_relax();
  if (finished_chunks_.load(std::memory_order_acquire) < chunks) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_chunks_.load(std::memory_order_acquire) >= chunks; });
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = nullptr;
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
    const IndexedFn* fn;
    size_t n, chunks;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      fn = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (fn) work(index + 1, seen, *fn, n, chunks);
  }
}

}  // namespace strata
