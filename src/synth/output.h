#pragma once
// Streaming output for synth: a sequential file writer that keeps disk
// writes large and off the calling thread, the generator pipeline, and the
// progress bar.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <span>
#include <streambuf>
#include <string>
#include <thread>
#include <vector>

#include "synth/synth.h"

namespace strata::synth {

// Writes <path>.partial sequentially through two 32 MiB buffers: the caller
// fills one while a background thread writes the other. Writes bypass the
// page cache (O_DIRECT, when the file system allows it), so a 50 GB model
// neither pollutes the cache nor waits on dirty-page throttling, and the
// time measured is the disk's. commit() flushes, syncs and renames the file
// to <path>; a file never committed is removed.
class OutputFile {
 public:
  explicit OutputFile(std::filesystem::path path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);
  void commit();
  uint64_t bytes() const { return bytes_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void submit(bool final);
  void io_loop();
  void write_all(const uint8_t* p, size_t n);
  [[noreturn]] void fail(const std::string& what, int err) const;

  std::filesystem::path path_, partial_;
  int fd_ = -1;
  bool direct_ = false;
  uint8_t* buf_[2] = {nullptr, nullptr};
  size_t used_ = 0;  // bytes in buf_[cur_]
  int cur_ = 0;
  uint64_t bytes_ = 0;
  bool committed_ = false;

  std::thread io_;
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = -1;      // buffer index handed to the I/O thread
  size_t pending_n_ = 0;
  bool stop_ = false;
  std::string io_error_;
};

// A std::streambuf over an OutputFile, for GgufWriter.
class OutputStreamBuf : public std::streambuf {
 public:
  explicit OutputStreamBuf(OutputFile& f) : f_(f) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int_type overflow(int_type c) override;

 private:
  OutputFile& f_;
};

class Progress {
 public:
  Progress(uint64_t total, bool enabled);
  void add(uint64_t bytes);
  void finish();

 private:
  void draw(bool final);
  uint64_t total_, done_ = 0;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

// Generates the tensors `ids` (indices into `tensors`, in file order) on
// `threads` workers and hands each piece, in order, to `sink` on the calling
// thread. Memory: a ring of threads + 2 chunks of ≤ 16 MiB.
void generate(const std::vector<TensorSpec>& tensors, std::span<const size_t> ids, uint64_t seed, int threads,
              const std::function<void(const TensorSpec&, const uint8_t*, size_t)>& sink);

constexpr uint64_t kChunkBytes = 16u << 20;

}  // namespace strata::synth
