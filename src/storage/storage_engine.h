#pragma once
// The part of Storage that both backends share: the file table, drives,
// per-drive queue depth, the alignment rule (bounce buffers), short-read
// resubmission, end-of-file and errno reporting, checksum verification and the
// completion queue. A backend only executes raw reads
// ("pread(fd, buf, len, offset)") and calls complete() with the result, from
// whatever thread it likes.
//
// Not a public header: use storage.h; FaultInjectingStorage hooks in here.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "storage/storage.h"

namespace strata::detail {

// One read as the backend executes it.
struct RawRead {
  int fd = -1;
  FileId file = 0;
  uint32_t drive = 0;
  bool direct = false;      // fd is O_DIRECT: offset, buf and len are 4 KiB multiples
  uint64_t offset = 0;
  uint8_t* buf = nullptr;
  uint64_t len = 0;
  int inject_errno = 0;     // fault injection: complete with -inject_errno, read nothing
};

// Consulted around every raw read (FaultInjectingStorage). Called from the
// submitting thread and the backends' threads: must be thread-safe.
class FaultHook {
 public:
  virtual ~FaultHook() = default;
  // May shorten raw.len (keeping 4 KiB multiples when raw.direct, and > 0) or
  // set raw.inject_errno.
  virtual void before_issue(RawRead& raw, const Extent& extent) = 0;
  // After the read returned `res` bytes (or -errno): may alter landed bytes or sleep.
  virtual void after_complete(const RawRead& raw, const Extent& extent, int64_t res) = 0;
};

struct FileEntry {
  FileInfo info;
  int fd = -1;
  FileId id = 0;
};

class StorageEngine : public Storage {
 public:
  // Queue depth, piece size and background depth from `options` (its
  // backend field is make_storage's business).
  explicit StorageEngine(const StorageOptions& options);
  ~StorageEngine() override;  // backends call drain_and_stop() in their destructors first

  FileId open(const std::filesystem::path& path, OpenMode mode = OpenMode::Auto) override;
  FileInfo file(FileId id) const override;
  std::vector<DriveInfo> drives() const override;
  void submit(std::span<const Extent> extents) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t wait(std::vector<Completion>& out, size_t min_count, std::chrono::milliseconds timeout) override;
  size_t pending() const override;
  size_t cancel(std::span<const uint64_t> tags) override;
  void promote(std::span<const uint64_t> tags) override;
  bool register_buffers(std::span<const BufferRegion>) override { return false; }
  unsigned queue_depth() const override { return queue_depth_; }
  std::vector<std::string> notes() const override;

  void add_note(std::string note);
  // Install before submitting anything; nullptr removes it.
  void set_fault_hook(FaultHook* hook) { hook_.store(hook); }

 protected:
  // A drive (st_dev) seen for the first time; called from open() before any
  // read on it is issued. May throw strata::Error.
  virtual void attach_drive(uint32_t drive) = 0;
  virtual void attach_file(const FileEntry&) {}
  // Execute these reads; call complete() for each exactly once, from any thread.
  virtual void issue(uint32_t drive, std::span<RawRead* const> reads) = 0;

  // Accounts for a finished raw read: resubmits the rest of a short read,
  // refills the drive, and, when the extent's last piece is done, finishes it (bounce copy,
  // checksum, completion). With `deferred`, that last step is queued there
  // instead, so a backend can hand the drive its next reads first and then
  // call finish_deferred().
  void complete(RawRead* raw, int64_t res, std::vector<RawRead*>* deferred = nullptr);
  void finish_deferred(std::vector<RawRead*>& deferred);
  // Blocks until every submitted extent has finished its I/O (delivered or not).
  void drain();
  size_t live_requests() const { return live_.load(); }

 private:
  struct Request;
  struct Piece;
  struct Drive {
    DriveInfo info;
    std::string track;  // its reads' row in the timeline: "drive N" (util/timeline.h)
    std::deque<Piece*> queue;       // pieces not yet issued
    std::deque<Piece*> background;  // background pieces not yet issued
    unsigned in_flight = 0;         // all pieces issued
    unsigned background_in_flight = 0;
    std::chrono::steady_clock::time_point busy_since{};  // when in_flight last left 0
    std::chrono::steady_clock::time_point counted_to{};  // info.in_flight_s covers the time up to here
    // Adds the reads in flight since counted_to to info.in_flight_s; call
    // with sched_mutex_ held, before in_flight changes.
    void count_in_flight(std::chrono::steady_clock::time_point now) {
      if (in_flight > 0) info.in_flight_s += in_flight * std::chrono::duration<double>(now - counted_to).count();
      counted_to = now;
    }
  };

  void pump(uint32_t drive);
  // Removes the queued background pieces of extents with these tags from
  // every drive, as (drive, piece) in queue order. Call with sched_mutex_ held.
  std::vector<std::pair<uint32_t, Piece*>> take_background(std::span<const uint64_t> tags);
  void finish(Request* r);
  void deliver(Completion c);
  const FileEntry* entry(FileId id) const;
  Drive* drive_ptr(uint32_t drive);
  uint32_t drive_for(uint64_t dev);

  const unsigned queue_depth_;
  const uint64_t piece_bytes_;
  const unsigned background_depth_;
  std::atomic<FaultHook*> hook_{nullptr};

  mutable std::mutex open_mutex_;   // serialises open()
  mutable std::mutex files_mutex_;  // files_, drives_ (the vectors, not queues)
  std::vector<std::unique_ptr<FileEntry>> files_;
  std::vector<std::unique_ptr<Drive>> drives_;
  mutable std::mutex sched_mutex_;  // drive queues, in_flight counts, busy time and bytes (taken before files_mutex_)

  mutable std::mutex cq_mutex_;
  std::condition_variable cq_cv_;
  std::vector<Completion> ready_;
  size_t outstanding_ = 0;          // submitted, not yet handed out by poll/wait
  std::atomic<size_t> live_{0};     // requests whose I/O has not finished
  std::condition_variable drained_;

  mutable std::mutex notes_mutex_;
  std::vector<std::string> notes_;
};

}  // namespace strata::detail
