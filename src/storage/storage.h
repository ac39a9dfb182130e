#pragma once
// Storage: the one interface every expert read goes through.
//
//   open(path) -> FileId          read-only; O_DIRECT when the filesystem allows it
//   submit({file, offset, length, dest, tag}, ...)
//   poll()/wait() -> Completion    {tag, bytes} or an error naming file, offset, errno
//
// Submit all of a layer's missing experts in one call; the drives are kept at
// their queue depth while the caller computes, and completions arrive in
// whatever order the drives finish them.
//
// Alignment rule (O_DIRECT needs 4 KiB-aligned file offset, length and memory):
//  * Fast path, zero copy: `offset` and `dest` are 4 KiB-aligned and the
//    destination can hold the length rounded up to 4 KiB (`capacity`, which
//    defaults to `length`; a BufferPool buffer always can). The rounded-up read
//    lands straight in `dest`; bytes after `length` are unspecified.
//    This is the layout `pack` writes (every blob starts on 4 KiB).
//  * Anything else (unaligned offset, unaligned dest, tight capacity) reads the
//    aligned superset [align_down(offset), align_up(offset+length)) into a
//    private bounce buffer and copies the requested bytes to `dest`: correct,
//    one extra memcpy, one temporary allocation of ~length.
//  * Files opened without O_DIRECT (filesystem refused it, or OpenMode::Buffered)
//    read exactly [offset, offset+length) into dest; no alignment needed.
// In every case exactly bytes [dest, dest+length) hold the file's bytes
// [offset, offset+length) when the completion reports success.
//
// Short reads are resubmitted transparently until `length` bytes have landed;
// EINTR/EAGAIN are retried; reaching end of file first is an error, as is any
// other errno (EIO is not retried: the caller decides). An extent that may
// carry an xxh3-64 checksum is verified when it lands (on the I/O thread).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "storage/aligned_buffer.h"

namespace strata {

using FileId = uint32_t;

enum class OpenMode {
  Auto,      // O_DIRECT; when the filesystem refuses it, buffered (with a note)
  Direct,    // O_DIRECT or an error
  Buffered,  // page cache
};

struct FileInfo {
  std::string path;
  uint64_t size = 0;       // at open time; reads past it are errors
  bool direct = false;     // opened with O_DIRECT
  uint32_t drive = 0;      // index into Storage::drives()
  std::string note;        // why this file is not O_DIRECT, if it is not
};

struct DriveInfo {
  uint64_t device = 0;     // st_dev of the files on it
  std::string name;        // "vda", "nvme0n1p2", or "dev 0:45" when sysfs has no name
  // Since the storage was made: bytes that landed from this drive, and the
  // wall time during which at least one of its reads was issued and not back.
  uint64_t bytes_read = 0;
  double busy_s = 0;
  // The integral of the reads in flight (issued and not yet reaped) over
  // that time: / busy_s, about how deep the drive's queue was on average
  // while it was busy. Zero for a remote source.
  double in_flight_s = 0;
  // A source that fetches over the network (remote/remote_mirror.h): reads
  // that had to wait for a fetch and their summed wait, and reads it served
  // from bytes already on the drive. Zero for a drive.
  uint64_t fetched_reads = 0, local_reads = 0;
  double fetch_wait_s = 0;
};

struct Extent {
  FileId file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  void* dest = nullptr;
  uint64_t tag = 0;        // returned in the completion, never interpreted
  uint64_t capacity = 0;   // bytes writable at dest; 0 means `length` (see the alignment rule)
  bool verify = false;     // check xxh3-64 of the landed bytes against `xxh3`
  uint64_t xxh3 = 0;
  // A read that may help later (a prefetch): issued only while its drive has
  // nothing else queued or in flight, a few pieces at a time; may be
  // promote()d to an ordinary read or cancel()led.
  bool background = false;
};

struct Completion {
  uint64_t tag = 0;
  uint64_t bytes = 0;      // == length on success
  int error = 0;           // 0 on success, else an errno (EBADMSG: checksum mismatch)
  std::string message;     // "<file> offset <N> length <L>: <problem>" when error != 0
  // When finishing the extent began: its last piece reaped, before the copy
  // and checksum (set by the I/O side, so it does not depend on when the
  // caller polls).
  std::chrono::steady_clock::time_point landed{};
  bool ok() const { return error == 0; }
};

// Extents are read as pieces of about this length in flight at once: a span
// is cut into round(span / piece) pieces of equal length, rounded up to
// whole 4 KiB (the last one shorter by what that added to the others). So an
// extent below one and a half of it is a single read, and the pieces of a
// longer one are within a quarter of it. Cut at exactly
// 1 MiB, a 1.05 MiB expert was a 1 MiB read and a 48 KiB one that cost the
// drive a tenth of a whole read more (docs/PERFORMANCE.md, issue 21). On
// this project's virtio disk, cold decodes of 2.7 MiB experts ran fastest
// with 1 MiB pieces (then cut at exactly the length; medians of three: 4.95
// tok/s against 4.79 with 512 KiB and 4.87 with 2 MiB pieces).
inline constexpr uint64_t kDefaultPieceBytes = 1ull << 20;
// The length of the pieces an extent of `span` bytes is cut into with
// `piece` (StorageOptions::piece_bytes; 0: the span whole, up to the largest
// raw read): what the drive sees, and so the read size its ceiling is
// measured at (strata budget).
uint64_t piece_length(uint64_t span, uint64_t piece);

struct StorageOptions {
  unsigned queue_depth = 16;   // raw reads (pieces) in flight per drive
  uint64_t piece_bytes = kDefaultPieceBytes;  // 0: every extent is one read
  // Background pieces in flight per idle drive. A demand read that comes
  // next waits behind at most these; on this project's virtio disk 4 beat 2
  // in three A/B runs of cold decodes (medians +1.4%, +3.2%, +2.6% tok/s; the
  // drive's rate while reading rose the same way), 8 read more wasted bytes.
  unsigned background_depth = 4;
  // "" = $STRATA_IO if set ("io_uring" or "pread"), else io_uring, else pread.
  std::string backend;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Opens a file read-only. Throws strata::Error "<path>: cannot open: <why>"
  // (missing file, missing drive, permission, a directory).
  virtual FileId open(const std::filesystem::path& path, OpenMode mode = OpenMode::Auto) = 0;
  virtual FileInfo file(FileId id) const = 0;
  virtual std::vector<DriveInfo> drives() const = 0;

  // Queues reads; returns at once. Each extent produces exactly one Completion.
  // `dest` must stay valid until then. Thread-safe.
  virtual void submit(std::span<const Extent> extents) = 0;

  // Appends completions that have landed, without blocking. Returns how many.
  virtual size_t poll(std::vector<Completion>& out) = 0;
  // Blocks until at least `min_count` completions are ready (or every submitted
  // extent has completed, or the timeout passes), then appends all ready ones.
  virtual size_t wait(std::vector<Completion>& out, size_t min_count = 1,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) = 0;
  // Extents submitted whose completion has not been handed out yet.
  virtual size_t pending() const = 0;

  // Background extents with these tags: pieces not yet issued are dropped and
  // the extent completes with ECANCELED (once any issued piece has landed).
  // Extents already wholly issued complete as usual. Returns how many were
  // cancelled.
  virtual size_t cancel(std::span<const uint64_t> tags) = 0;
  // Background extents with these tags become ordinary reads (queued behind
  // the ones already waiting).
  virtual void promote(std::span<const uint64_t> tags) = 0;

  // Registers memory with the kernel (io_uring fixed buffers; BufferPool::
  // regions() gives one per buffer). Returns false where the backend has no use
  // for it (pread) or the kernel refused; reads into the memory work either
  // way. Drives first seen later get the same registration (a refusal there
  // becomes a note). Replaces any earlier registration. Call only while nothing
  // is in flight (throws strata::Error otherwise).
  // Measured here: what matters more than registration is that the memory is
  // huge-page backed (AlignedBuffer >= 2 MiB and BufferPool are).
  virtual bool register_buffers(std::span<const BufferRegion> regions) = 0;

  virtual std::string_view backend() const = 0;  // "io_uring" or "pread"
  virtual unsigned queue_depth() const = 0;
  // Things the user may want to know (fallbacks taken), one line each.
  virtual std::vector<std::string> notes() const = 0;

  // Convenience: submit, wait for all of them, throw strata::Error with the
  // first failure's message. Not for use while other reads are in flight on
  // this Storage from another thread (their completions would be consumed).
  void read_all(std::span<const Extent> extents);
};

// The backend chosen by options.backend / $STRATA_IO; io_uring falls back to
// pread (with a note) when the kernel refuses rings (seccomp, sysctl).
std::unique_ptr<Storage> make_storage(const StorageOptions& options = {});

}  // namespace strata
