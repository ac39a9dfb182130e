#pragma once
// A fixed pool of worker threads for data-parallel loops. parallel_for splits
// [0, n) into contiguous chunks; callers must make each index's result
// independent of which thread computes it (that is what keeps kernels
// deterministic at any thread count).
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

// The most worker threads a pool (and a --threads flag) takes.
inline constexpr int kMaxThreads = 4096;

class ThreadPool {
 public:
  // `threads` in all, the caller's included (at least one); more than
  // kMaxThreads throws strata::Error.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over contiguous sub-ranges of [0, n), on the pool and
  // the calling thread, and returns when all are done. Not re-entrant. If a
  // range throws, the others still run; the first exception is rethrown on
  // the calling thread once all have finished.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);
  // The same, telling fn which thread runs the range: 0 for the calling
  // thread, 1 .. size() - 1 for the workers. No two ranges run at once on one
  // index, so a caller can give each index its own planned scratch.
  using IndexedFn = std::function<void(int worker, size_t begin, size_t end)>;
  void parallel_for_indexed(size_t n, const IndexedFn& fn, size_t min_chunk = 1);

 private:
  void worker_loop(int index);

  // Runs chunks of job `gen` until none is left (or another job began).
  void work(int index, uint64_t gen, const IndexedFn& fn, size_t n, size_t chunks);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // The job: written under mutex_ before generation_ moves on; chunks are
  // claimed and counted with atomics so that a step that makes thousands of
  // small calls (an MoE decode step) does not pay a lock and a wake-up each:
  // workers and the caller spin briefly before sleeping.
  const IndexedFn* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_chunks_ = 0;
  // (generation << 32) | next chunk: a claim is a compare-and-swap that also
  // checks the generation, so a worker that wakes late can never take a chunk
  // of a newer job with the older job's function.
  std::atomic<uint64_t> next_chunk_{0};
  std::atomic<size_t> finished_chunks_{0};
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  std::exception_ptr error_;  // the job's first exception (under mutex_)
};

int default_thread_count();

}  // namespace strata
