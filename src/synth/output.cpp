#include "synth/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "synth/fill.h"
#include "util/error.h"

namespace strata::synth {

namespace {

constexpr size_t kDirectAlign = 4096;  // O_DIRECT: buffer address, length and file offset

}  // namespace

// --- FileLayout --------------------------------------------------------------

void FileLayout::add_bytes(std::string b) {
  Segment s;
  s.kind = Segment::Kind::Bytes;
  s.offset = size;
  s.size = b.size();
  s.bytes = std::move(b);
  size += s.size;
  if (s.size) segments.push_back(std::move(s));
}

void FileLayout::add_zeros(uint64_t n) {
  if (n == 0) return;
  Segment s;
  s.kind = Segment::Kind::Zeros;
  s.offset = size;
  s.size = n;
  size += n;
  segments.push_back(std::move(s));
}

void FileLayout::add_tensor(size_t index, uint64_t nbytes) {
  Segment s;
  s.kind = Segment::Kind::Tensor;
  s.offset = size;
  s.size = nbytes;
  s.tensor = index;
  size += nbytes;
  if (nbytes) segments.push_back(std::move(s));
}

// --- write_file ------------------------------------------------------------

namespace {

// Fills file bytes [begin, begin + n) of `layout` into dst.
class RangeFiller {
 public:
  RangeFiller(const FileLayout& layout, const std::vector<TensorSpec>& tensors, const std::vector<uint64_t>& seeds)
      : layout_(layout), tensors_(tensors), seeds_(seeds) {}

  void fill(uint64_t begin, uint8_t* dst, uint64_t n, std::vector<uint8_t>& scratch) const {
    const auto& segs = layout_.segments;
    // The first segment ending after `begin`.
    auto it = std::upper_bound(segs.begin(), segs.end(), begin,
                               [](uint64_t off, const Segment& s) { return off < s.offset + s.size; });
    const uint64_t end = begin + n;
    for (; it != segs.end() && it->offset < end; ++it) {
      const uint64_t a = std::max(begin, it->offset), b = std::min(end, it->offset + it->size);
      uint8_t* out = dst + (a - begin);
      switch (it->kind) {
        case Segment::Kind::Bytes: std::memcpy(out, it->bytes.data() + (a - it->offset), b - a); break;
        case Segment::Kind::Zeros: std::memset(out, 0, b - a); break;
        case Segment::Kind::Tensor: tensor(it->tensor, a - it->offset, b - it->offset, out, scratch); break;
      }
    }
  }

 private:
  // Tensor bytes [ta, tb) into out. The tensor is generated in fixed chunks
  // (so its bytes do not depend on how the file is cut); a chunk cut by the
  // range is generated whole into `scratch` and the needed part copied.
  void tensor(size_t id, uint64_t ta, uint64_t tb, uint8_t* out, std::vector<uint8_t>& scratch) const {
    const TensorSpec& t = tensors_[id];
    const uint64_t unit = unit_bytes(t.dtype);
    const uint64_t chunk = std::max<uint64_t>(unit, kGenChunkBytes / unit * unit);
    for (uint64_t c = ta / chunk; c * chunk < tb; ++c) {
      const uint64_t ca = c * chunk, cb = std::min(ca + chunk, t.nbytes);
      if (ca >= ta && cb <= tb) {
        fill_chunk(t, seeds_[id], c, out + (ca - ta), cb - ca);
      } else {
        scratch.resize(cb - ca);
        fill_chunk(t, seeds_[id], c, scratch.data(), cb - ca);
        const uint64_t a = std::max(ca, ta), b = std::min(cb, tb);
        std::memcpy(out + (a - ta), scratch.data() + (a - ca), b - a);
      }
    }
  }

  const FileLayout& layout_;
  const std::vector<TensorSpec>& tensors_;
  const std::vector<uint64_t>& seeds_;
};

class File {
 public:
  explicit File(const std::filesystem::path& path) : path_(path), partial_(path) {
    partial_ += ".partial";
    fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
    if (fd_ < 0 && errno == EINVAL) fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create", errno);
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(partial_.c_str());
  }

  void write(const uint8_t* p, size_t n) {
    // O_DIRECT needs whole aligned blocks; only the file's last piece is not.
    if (direct_ && n % kDirectAlign != 0) {
      const size_t head = n / kDirectAlign * kDirectAlign;
      write(p, head);
      p += head;
      n -= head;
      buffered();
    }
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EINVAL && direct_) {  // took O_DIRECT at open but not at write
          buffered();
          continue;
        }
        fail("write failed", errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  void commit() {
    if (::fdatasync(fd_) != 0) fail("sync failed", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close failed", errno);
    std::error_code ec;
    std::filesystem::rename(partial_, path_, ec);
    if (ec) throw Error(path_.string() + ": cannot rename from " + partial_.filename().string() + ": " + ec.message());
    committed_ = true;
  }

 private:
  void buffered() {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) < 0) fail("write failed", errno);
    direct_ = false;
  }
  [[noreturn]] void fail(const std::string& what, int err) const {
    throw Error(path_.string() + ": " + what + ": " + std::strerror(err));
  }

  std::filesystem::path path_, partial_;
  int fd_ = -1;
  bool direct_ = false;
  bool committed_ = false;
};

struct AlignedBuffer {
  uint8_t* p = nullptr;
  AlignedBuffer() {
    p = static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, kBufferBytes));
    if (!p) throw std::bad_alloc();
  }
  ~AlignedBuffer() { std::free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
};

}  // namespace

void write_file(const std::filesystem::path& path, const FileLayout& layout, const std::vector<TensorSpec>& tensors,
                uint64_t seed, int threads, Progress& progress) {
  std::vector<uint64_t> seeds(tensors.size(), 0);
  for (const Segment& s : layout.segments)
    if (s.kind == Segment::Kind::Tensor) seeds[s.tensor] = tensor_seed(seed, tensors[s.tensor].name);
  const RangeFiller filler(layout, tensors, seeds);
  File file(path);

  const uint64_t pieces = (layout.size + kBufferBytes - 1) / kBufferBytes;
  threads = std::max(1, threads);
  const size_t ring = static_cast<size_t>(threads) + 2;
  std::vector<AlignedBuffer> buffers(ring);
  std::vector<uint64_t> ready(ring, std::numeric_limits<uint64_t>::max());  // piece held by each slot
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> next{0};
  uint64_t written = 0;  // pieces on disk
  bool abort = false;
  std::exception_ptr error;

  auto worker = [&] {
    std::vector<uint8_t> scratch;
    for (;;) {
      const uint64_t i = next.fetch_add(1);
      if (i >= pieces) return;
      const size_t slot = i % ring;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return abort || i < written + ring; });
        if (abort) return;
      }
      try {
        const uint64_t begin = i * kBufferBytes, n = std::min(kBufferBytes, layout.size - begin);
        filler.fill(begin, buffers[slot].p, n, scratch);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        abort = true;
        cv.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ready[slot] = i;
      }
      cv.notify_all();
    }
  };

  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  try {
    for (uint64_t i = 0; i < pieces; ++i) {
      const size_t slot = i % ring;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return abort || ready[slot] == i; });
        if (abort) break;
      }
      const uint64_t n = std::min(kBufferBytes, layout.size - i * kBufferBytes);
      file.write(buffers[slot].p, n);
      progress.add(n);
      {
        std::lock_guard<std::mutex> lock(mu);
        ready[slot] = std::numeric_limits<uint64_t>::max();
        written = i + 1;
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
  file.commit();
}

}  // namespace strata::synth
