#include "runtime/product_timer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <unistd.h>

#include "kernels/interleave.h"
#include "kernels/quantize.h"
#include "util/error.h"
#include "util/process_memory.h"
#include "util/thread_pool.h"

namespace strata {

uint64_t last_level_cache_bytes() {
  uint64_t best = 0;
  for (int name : {_SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL4_CACHE_SIZE})
    if (const long v = ::sysconf(name); v > 0) best = std::max(best, static_cast<uint64_t>(v));
  // sysfs says what the kernel was told ("32768K"), where sysconf may not.
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    uint64_t v = 0;
    std::string unit;
    if (!(in >> v)) continue;
    in >> unit;
    best = std::max(best, v << (unit == "K" ? 10 : unit == "M" ? 20 : 0));
  }
  return best;
}

uint64_t large_matrix_mib() {
  const uint64_t mib = std::clamp<uint64_t>(4 * last_level_cache_bytes() >> 20, 256, 2048);
  // An eighth of the memory available at most (budget holds two timers at
  // once): measuring must not push the machine into swap, or a cgroup's limit.
  const uint64_t available = available_memory_bytes();
  return available == UINT64_MAX ? mib : std::min(mib, std::max<uint64_t>(64, (available / 8) >> 20));
}

uint64_t compute_mib() {
  const char* env = std::getenv("STRATA_BUDGET_COMPUTE_MIB");
  return env ? std::clamp<uint64_t>(std::strtoull(env, nullptr, 10), 1, 4096) : large_matrix_mib();
}

ProductTimer::ProductTimer(bool mxfp4, uint64_t matrix_bytes, int64_t in) {
  if (in < 32 || in % 32 != 0) throw Error("internal: a product timer's rows must be a multiple of 32 wide");
  kernels::WeightMatrix w;
  w.dtype = mxfp4 ? DType::MXFP4 : DType::Q8_0;
  w.in = in;
  const size_t row_bytes = w.row_bytes();
  const uint64_t total = compute_mib() << 20;
  w.out = std::max<int64_t>(16, static_cast<int64_t>((matrix_bytes ? matrix_bytes : total) / row_bytes) / 16 * 16);
  matrix_bytes_ = row_bytes * static_cast<uint64_t>(w.out);
  const size_t copies = std::max<size_t>(1, total / matrix_bytes_);
  data_.resize(matrix_bytes_ * copies);
  for (size_t c = 0; c < copies; ++c) copies_.push_back(timing_matrix(mxfp4, w.out, in, data_.data() + c * matrix_bytes_));
}

kernels::WeightMatrix timing_matrix(bool mxfp4, int64_t out, int64_t in, uint8_t* data) {
  kernels::WeightMatrix w;
  w.dtype = mxfp4 ? DType::MXFP4 : DType::Q8_0;
  w.in = in;
  w.out = out;
  w.data = data;
  std::vector<float> f(static_cast<size_t>(in));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : f) v = u(rng);
  const size_t row = w.row_bytes();
  (mxfp4 ? kernels::quantize_row_mxfp4 : kernels::quantize_row_q8_0)(f.data(), in, data);
  for (int64_t r = 1; r < out; ++r) std::copy_n(data, row, data + static_cast<size_t>(r) * row);
  return kernels::interleavable(w) ? kernels::interleave_in_place(w) : w;
}

double median_run_seconds(const std::function<void()>& run, double seconds) {
  run();
  std::vector<double> took;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    took.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } while (took.size() < 3 ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  std::nth_element(took.begin(), took.begin() + took.size() / 2, took.end());
  return took[took.size() / 2];
}

double ProductTimer::seconds(size_t rows, ThreadPool& pool, double seconds) const {
  const kernels::WeightMatrix& first = copies_.front();
  std::vector<float> x(rows * static_cast<size_t>(first.in), 0.5f), y(rows * static_cast<size_t>(first.out));
  size_t next = 0;
  // (The warm-up call also brings a single matrix into the caches it fits.)
  return median_run_seconds(
      [&] {
        kernels::linear(copies_[next], x.data(), rows, y.data(), &pool);
        next = (next + 1) % copies_.size();
      },
      seconds);
}

}  // namespace strata
