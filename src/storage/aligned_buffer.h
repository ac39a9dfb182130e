#pragma once
// Page-aligned memory for O_DIRECT reads. Every buffer starts on a 4 KiB
// boundary and its size is rounded up to a multiple of 4 KiB, so a read of
// the aligned superset of an extent always fits (see storage.h for the rule).
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace strata {

inline constexpr size_t kIoAlign = 4096;

inline constexpr uint64_t align_down(uint64_t v, uint64_t a = kIoAlign) { return v & ~(a - 1); }
inline constexpr uint64_t align_up(uint64_t v, uint64_t a = kIoAlign) { return (v + a - 1) & ~(a - 1); }
inline bool is_aligned(const void* p, uint64_t a = kIoAlign) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

// One contiguous range of memory that a Storage may register with the kernel
// (io_uring fixed buffers): reads landing wholly inside it skip the per-read
// page pinning.
struct BufferRegion {
  void* data = nullptr;
  size_t size = 0;
};

// A single 4 KiB-aligned allocation, move-only. From 2 MiB up it is its own
// mapping, 2 MiB-aligned and backed by transparent huge pages where the kernel
// allows (see aligned_buffer.cpp: O_DIRECT into 4 KiB pages is much slower).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Throws strata::Error when out of memory. `zeroed` = false skips the memset
  // (bounce buffers that a read fills anyway).
  explicit AlignedBuffer(size_t bytes, bool zeroed = true);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // a multiple of 4 KiB
  bool empty() const { return size_ == 0; }
  BufferRegion region() const { return {data_, size_}; }

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint8_t* map_base_ = nullptr;  // set when mmap'ed (2 MiB and up, huge pages)
  size_t mapped_ = 0;
};

// A fixed set of equal-sized, reusable, 4 KiB-aligned buffers carved from one
// anonymous, 2 MiB-aligned, huge-page-backed mapping (e.g. one slot per expert blob in flight). acquire() and
// release() are thread-safe; the pool must outlive every read into it.
class BufferPool {
 public:
  BufferPool(size_t buffer_bytes, size_t count);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  size_t buffer_bytes() const { return buffer_bytes_; }  // rounded up to 4 KiB
  size_t count() const { return count_; }
  size_t available() const;

  uint8_t* try_acquire();  // nullptr when every buffer is out
  uint8_t* acquire();      // blocks until one is released
  void release(uint8_t* buffer);  // throws strata::Error for a pointer that is not one of ours

  uint8_t* buffer(size_t i) const { return base_ + i * buffer_bytes_; }
  // One region per buffer, for Storage::register_buffers.
  std::vector<BufferRegion> regions() const;

 private:
  uint8_t* base_ = nullptr;
  size_t buffer_bytes_ = 0;
  size_t count_ = 0;
  uint8_t* map_base_ = nullptr;
  size_t mapped_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<uint32_t> free_;
  std::vector<bool> out_;
};

}  // namespace strata
