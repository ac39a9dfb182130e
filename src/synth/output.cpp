#include "synth/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>

#include "synth/fill.h"
#include "util/error.h"

namespace strata::synth {

namespace {

constexpr size_t kBufBytes = 32u << 20;  // per buffer; a multiple of any O_DIRECT alignment
constexpr size_t kDirectAlign = 4096;

}  // namespace

// --- OutputFile ------------------------------------------------------------

OutputFile::OutputFile(std::filesystem::path path) : path_(std::move(path)) {
  partial_ = path_;
  partial_ += ".partial";
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", errno);
  for (auto& b : buf_) {
    b = static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, kBufBytes));
    if (!b) {
      ::close(fd_);
      ::unlink(partial_.c_str());
      throw std::bad_alloc();
    }
  }
  io_ = std::thread([this] { io_loop(); });
}

OutputFile::~OutputFile() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (io_.joinable()) io_.join();
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(partial_.c_str());
  for (auto& b : buf_) std::free(b);
}

void OutputFile::fail(const std::string& what, int err) const {
  throw Error(path_.string() + ": " + what + ": " + std::strerror(err));
}

void OutputFile::write(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const size_t k = std::min(n, kBufBytes - used_);
    std::memcpy(buf_[cur_] + used_, p, k);
    used_ += k;
    p += k;
    n -= k;
    bytes_ += k;
    if (used_ == kBufBytes) submit(false);
  }
}

void OutputFile::submit(bool final) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ < 0; });
  if (!io_error_.empty()) throw Error(io_error_);
  pending_ = cur_;
  pending_n_ = used_;
  lock.unlock();
  cv_.notify_all();
  cur_ ^= 1;
  used_ = 0;
  (void)final;
}

void OutputFile::write_all(const uint8_t* p, size_t n) {
  // O_DIRECT needs whole aligned blocks; only the file's last piece is not.
  if (direct_ && n % kDirectAlign != 0) {
    const size_t head = n / kDirectAlign * kDirectAlign;
    write_all(p, head);
    p += head;
    n -= head;
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) < 0) fail("write failed", errno);
    direct_ = false;
  }
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && direct_) {  // the file system took O_DIRECT at open but not at write
        const int flags = ::fcntl(fd_, F_GETFL);
        if (flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0) {
          direct_ = false;
          continue;
        }
      }
      fail("write failed", errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void OutputFile::io_loop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_ >= 0 || stop_; });
    if (pending_ < 0) return;
    const int b = pending_;
    const size_t n = pending_n_;
    lock.unlock();
    std::string err;
    try {
      write_all(buf_[b], n);
    } catch (const std::exception& e) {
      err = e.what();
    }
    lock.lock();
    if (!err.empty() && io_error_.empty()) io_error_ = err;
    pending_ = -1;
    lock.unlock();
    cv_.notify_all();
  }
}

void OutputFile::commit() {
  if (used_ > 0) submit(true);
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_ < 0; });
    if (!io_error_.empty()) throw Error(io_error_);
  }
  if (::fdatasync(fd_) != 0) fail("sync failed", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close failed", errno);
  }
  fd_ = -1;
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  if (ec) throw Error(path_.string() + ": cannot rename from " + partial_.filename().string() + ": " + ec.message());
  committed_ = true;
}

std::streamsize OutputStreamBuf::xsputn(const char* s, std::streamsize n) {
  f_.write(s, static_cast<size_t>(n));
  return n;
}

OutputStreamBuf::int_type OutputStreamBuf::overflow(int_type c) {
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    const char ch = traits_type::to_char_type(c);
    f_.write(&ch, 1);
  }
  return traits_type::not_eof(c);
}

// --- Progress --------------------------------------------------------------

Progress::Progress(uint64_t total, bool enabled)
    : total_(std::max<uint64_t>(total, 1)), enabled_(enabled), tty_(::isatty(2) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::add(uint64_t bytes) {
  done_ += bytes;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2000))) return;
  last_ = now;
  draw(false);
}

void Progress::finish() {
  if (enabled_) draw(true);
}

void Progress::draw(bool final) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
  const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0;
  constexpr int width = 30;
  const int fill = static_cast<int>(frac * width);
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  char eta[32] = "";
  if (!final && rate > 0) {
    const long s = static_cast<long>((static_cast<double>(total_ - std::min(done_, total_))) / rate);
    std::snprintf(eta, sizeof eta, "  ETA %ld:%02ld", s / 60, s % 60);
  } else if (final) {
    std::snprintf(eta, sizeof eta, "  in %.1f s", secs);
  }
  std::fprintf(stderr, "%ssynth [%s] %3d%%  %.2f / %.2f GB  %.0f MB/s%s%s", tty_ ? "\r" : "", bar,
               static_cast<int>(frac * 100), done_ / 1e9, total_ / 1e9, rate / 1e6, eta,
               tty_ && !final ? "   " : "\n");
  std::fflush(stderr);
}

// --- generate --------------------------------------------------------------

namespace {

struct Job {
  size_t tensor;
  uint64_t chunk;
  uint64_t bytes;
};

}  // namespace

void generate(const std::vector<TensorSpec>& tensors, std::span<const size_t> ids, uint64_t seed, int threads,
              const std::function<void(const TensorSpec&, const uint8_t*, size_t)>& sink) {
  // Jobs: each tensor cut into whole-unit chunks of at most kChunkBytes (the
  // chunking is fixed, so the bytes do not depend on threads). Batches:
  // consecutive jobs sharing one buffer, at most kChunkBytes together.
  std::vector<Job> jobs;
  std::vector<uint64_t> seeds(tensors.size(), 0);
  for (size_t id : ids) {
    const TensorSpec& t = tensors[id];
    seeds[id] = tensor_seed(seed, t.name);
    const uint64_t unit = unit_bytes(t.dtype);
    const uint64_t per = std::max<uint64_t>(unit, kChunkBytes / unit * unit);
    uint64_t off = 0, c = 0;
    while (off < t.nbytes) {
      const uint64_t n = std::min(per, t.nbytes - off);
      jobs.push_back({id, c++, n});
      off += n;
    }
  }
  std::vector<size_t> batch_start;  // first job of each batch; one past the end appended
  uint64_t fill = kChunkBytes;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (fill + jobs[j].bytes > kChunkBytes) {
      batch_start.push_back(j);
      fill = 0;
    }
    fill += jobs[j].bytes;
  }
  const size_t nb = batch_start.size();
  batch_start.push_back(jobs.size());
  if (nb == 0) return;

  threads = std::max(1, threads);
  const size_t ring = static_cast<size_t>(threads) + 2;
  struct Slot {
    std::vector<uint8_t> buf;
    size_t batch = std::numeric_limits<size_t>::max();
    bool ready = false;
  };
  std::vector<Slot> slots(ring);
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<size_t> next{0};
  size_t consumed = 0;
  bool abort = false;
  std::exception_ptr error;

  auto worker = [&] {
    for (;;) {
      const size_t b = next.fetch_add(1);
      if (b >= nb) return;
      Slot& s = slots[b % ring];
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return abort || b < consumed + ring; });
        if (abort) return;
      }
      try {
        uint64_t total = 0;
        for (size_t j = batch_start[b]; j < batch_start[b + 1]; ++j) total += jobs[j].bytes;
        s.buf.resize(total);
        uint64_t at = 0;
        for (size_t j = batch_start[b]; j < batch_start[b + 1]; ++j) {
          const Job& job = jobs[j];
          fill_chunk(tensors[job.tensor], seeds[job.tensor], job.chunk, s.buf.data() + at, job.bytes);
          at += job.bytes;
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        abort = true;
        cv.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        s.batch = b;
        s.ready = true;
      }
      cv.notify_all();
    }
  };

  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  try {
    for (size_t b = 0; b < nb; ++b) {
      Slot& s = slots[b % ring];
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return abort || (s.ready && s.batch == b); });
        if (abort) break;
      }
      uint64_t at = 0;
      for (size_t j = batch_start[b]; j < batch_start[b + 1]; ++j) {
        sink(tensors[jobs[j].tensor], s.buf.data() + at, jobs[j].bytes);
        at += jobs[j].bytes;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        s.ready = false;
        consumed = b + 1;
      }
      cv.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = std::current_exception();
    abort = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace strata::synth
