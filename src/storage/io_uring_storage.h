#pragma once
// Storage over io_uring: one ring per drive (files grouped by st_dev), each
// owned by one thread that is the ring's only submitter and reaper.
//
// Why a thread per ring rather than a poll API: the point of streaming is that
// the drives keep reading while the caller computes. With a poll-only design a
// drive that finishes its queue-depth's worth of reads sits idle until the
// caller next polls; the ring thread refills it the moment a read lands. The
// bounce copies and checksums run on a few more threads per ring (the
// finishers: a quarter of the cores, one to four), off the caller's thread
// and off the ring thread, which would otherwise leave landed reads unreaped
// while it hashed, and side by side, since a step waits for all of its
// experts. The ring thread sleeps
// in io_uring_enter between completions (a 16 MiB read is ~5-15 ms), so it
// costs no CPU while reads are in flight. Callers hand it reads through a
// mutex-guarded inbox and an eventfd that the ring itself has a read pending
// on, so the ring is single-issuer (IORING_SETUP_SINGLE_ISSUER |
// DEFER_TASKRUN where the kernel has them: completions are posted when the
// ring thread asks, never by interrupting the caller).
//
// Registered files: a sparse table of 1024 slots per ring; FileId n < 1024 is
// slot n. Registered buffers: register_buffers(); a read whose landing range
// lies inside one region uses IORING_OP_READ_FIXED.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/storage_engine.h"

namespace strata {

class IoUringStorage final : public detail::StorageEngine {
 public:
  // Throws strata::Error when the kernel refuses io_uring (seccomp, sysctl, old kernel).
  explicit IoUringStorage(const StorageOptions& options = {});
  ~IoUringStorage() override;

  bool register_buffers(std::span<const BufferRegion> regions) override;
  std::string_view backend() const override { return "io_uring"; }

  // Whether this process may create rings; `why` gets the reason when not.
  static bool available(std::string* why = nullptr);

 protected:
  void attach_drive(uint32_t drive) override;
  void attach_file(const detail::FileEntry& file) override;
  void issue(uint32_t drive, std::span<detail::RawRead* const> reads) override;

 private:
  class Ring;
  Ring* ring(uint32_t drive);

  std::mutex rings_mutex_;
  std::vector<std::unique_ptr<Ring>> rings_;  // index = drive
  std::vector<BufferRegion> regions_;         // registered on every ring, including later ones
};

}  // namespace strata
