#include "storage/storage_engine.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "storage/checksum.h"
#include "util/error.h"
#include "util/timeline.h"

namespace strata {

namespace {
// Largest single read handed to a backend; longer extents are read in
// consecutive pieces (the kernel caps one read near 2 GiB anyway, and an SQE
// length is 32 bits).
constexpr uint64_t kMaxRawRead = 1ull << 30;
uint64_t normal_piece(uint64_t piece) {
  return piece == 0 ? kMaxRawRead : std::min(std::max(align_up(piece), kIoAlign), kMaxRawRead);
}
}  // namespace

// Each piece is as long as the others but the last (the rule at
// kDefaultPieceBytes, storage.h).
uint64_t piece_length(uint64_t span, uint64_t piece) {
  piece = normal_piece(piece);
  uint64_t n = std::max<uint64_t>(1, (span + piece / 2) / piece);
  n = std::max(n, (span + kMaxRawRead - 1) / kMaxRawRead);
  return std::clamp(align_up((span + n - 1) / n), kIoAlign, kMaxRawRead);
}

}  // namespace strata

namespace strata::detail {

namespace {
// EINTR/EAGAIN retries, and pieces that made no progress, before giving up.
constexpr int kMaxRetries = 64;

std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

std::string where(const FileInfo& f, const Extent& e) {
  return f.path + " offset " + std::to_string(e.offset) + " length " + std::to_string(e.length);
}

std::string sysfs_block_name(uint64_t dev) {
  const std::string link =
      "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  char buf[4096];
  ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  if (n > 0) {
    std::string target(buf, static_cast<size_t>(n));
    auto slash = target.rfind('/');
    return slash == std::string::npos ? target : target.substr(slash + 1);
  }
  return "dev " + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
}

}  // namespace

// One raw read of a request: [start, end) of its landing range. A short read
// re-issues the rest of the piece from where it stopped.
struct StorageEngine::Piece : RawRead {
  Request* req = nullptr;
  bool issued_background = false;  // counted in the drive's background_in_flight
  std::chrono::steady_clock::time_point issued{};  // for the timeline (util/timeline.h)
  uint64_t end = 0;         // landing end of this piece
  uint64_t need_end = 0;    // bytes up to here must arrive (min(end, request's need_end))
  int retries = 0;

  void set(uint64_t from);  // the read that starts at file byte `from`
};

// One extent as the engine tracks it: where its bytes land, and the pieces
// (raw reads) it was split into. The pieces are issued together so that a
// drive sees several reads in flight even for one large extent; some virtual
// and networked disks only reach their rate that way.
struct StorageEngine::Request {
  Extent ext;
  const FileEntry* fe = nullptr;
  AlignedBuffer bounce;     // empty unless the alignment rule needs one
  uint8_t* land = nullptr;  // memory where file byte `land_offset` lands
  uint64_t land_offset = 0;
  uint64_t land_end = 0;    // file offset where the landing read ends
  uint64_t need_end = 0;    // ext.offset + ext.length
  std::vector<Piece> pieces;
  size_t pieces_left = 0;   // pieces whose I/O is not over (queued or in flight)
  bool background = false;  // its queued pieces wait in the drive's background queue
  bool cancelled = false;   // queued pieces were dropped: completes with ECANCELED
  int error = 0;            // errno of the failed piece nearest the start
  uint64_t error_at = 0;    // where that piece was reading
  std::string problem;
};

void StorageEngine::Piece::set(uint64_t from) {
  offset = from;
  buf = req->land + (from - req->land_offset);
  len = std::min(end - from, kMaxRawRead);
  inject_errno = 0;
}

StorageEngine::StorageEngine(const StorageOptions& o)
    : queue_depth_(std::max(o.queue_depth, 1u)),
      piece_bytes_(normal_piece(o.piece_bytes)),
      background_depth_(std::max(o.background_depth, 1u)) {}

StorageEngine::~StorageEngine() {
  for (auto& f : files_)
    if (f->fd >= 0) ::close(f->fd);
}

uint32_t StorageEngine::drive_for(uint64_t dev) {
  {
    std::lock_guard<std::mutex> lock(files_mutex_);
    for (size_t i = 0; i < drives_.size(); ++i)
      if (drives_[i]->info.device == dev) return static_cast<uint32_t>(i);
  }
  auto d = std::make_unique<Drive>();
  d->info.device = dev;
  d->info.name = sysfs_block_name(dev);
  uint32_t index;
  {
    std::lock_guard<std::mutex> lock(files_mutex_);
    index = static_cast<uint32_t>(drives_.size());
    d->track = "drive " + std::to_string(index) + " (" + d->info.name + ")";
    drives_.push_back(std::move(d));
  }
  attach_drive(index);  // open() holds open_mutex_, so no one else adds drives meanwhile
  return index;
}

FileId StorageEngine::open(const std::filesystem::path& path_in, OpenMode mode) {
  std::lock_guard<std::mutex> open_lock(open_mutex_);
  const std::string path = path_in.string();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": cannot open: is a directory");
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
    throw Error(path + ": cannot open: not a regular file or block device");

  int fd = -1;
  bool direct = false;
  std::string note;
  if (mode != OpenMode::Buffered) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) {
      direct = true;
      // Some filesystems accept O_DIRECT at open and refuse the reads; try one.
      if (mode == OpenMode::Auto && st.st_size > 0) {
        AlignedBuffer probe(kIoAlign, false);
        if (::pread(fd, probe.data(), kIoAlign, 0) < 0 && errno == EINVAL) {
          ::close(fd);
          fd = -1;
          direct = false;
          note = "O_DIRECT reads are refused (EINVAL); reading through the page cache";
        }
      }
    } else if (errno == EINVAL) {
      if (mode == OpenMode::Direct)
        throw Error(path + ": cannot open with O_DIRECT: the filesystem does not support it");
      note = "the filesystem does not support O_DIRECT; reading through the page cache";
    } else {
      throw Error(path + ": cannot open: " + std::strerror(errno));
    }
  }
  if (fd < 0) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  }

  uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t dev = st.st_dev;
  if (S_ISBLK(st.st_mode)) {
    dev = st.st_rdev;
    if (ioctl(fd, BLKGETSIZE64, &size) != 0) {
      int e = errno;
      ::close(fd);
      throw Error(path + ": cannot read the device size: " + std::strerror(e));
    }
  }

  uint32_t drive;
  try {
    drive = drive_for(dev);
  } catch (...) {
    ::close(fd);
    throw;
  }

  auto fe = std::make_unique<FileEntry>();
  fe->fd = fd;
  fe->info.path = path;
  fe->info.size = size;
  fe->info.direct = direct;
  fe->info.drive = drive;
  fe->info.note = note;
  FileEntry* raw = fe.get();
  {
    std::lock_guard<std::mutex> lock(files_mutex_);
    fe->id = static_cast<FileId>(files_.size());
    files_.push_back(std::move(fe));
  }
  attach_file(*raw);
  if (!note.empty()) add_note(path + ": " + note);
  return raw->id;
}

StorageEngine::Drive* StorageEngine::drive_ptr(uint32_t drive) {
  std::lock_guard<std::mutex> lock(files_mutex_);
  return drives_[drive].get();
}

const FileEntry* StorageEngine::entry(FileId id) const {
  std::lock_guard<std::mutex> lock(files_mutex_);
  return id < files_.size() ? files_[id].get() : nullptr;
}

FileInfo StorageEngine::file(FileId id) const {
  const FileEntry* fe = entry(id);
  if (!fe) throw Error("storage: file id " + std::to_string(id) + " is not open");
  return fe->info;
}

void StorageEngine::add_note(std::string note) {
  std::lock_guard<std::mutex> lock(notes_mutex_);
  if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(std::move(note));
}

std::vector<std::string> StorageEngine::notes() const {
  std::lock_guard<std::mutex> lock(notes_mutex_);
  return notes_;
}

void StorageEngine::deliver(Completion c) {
  c.landed = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(cq_mutex_);
    ready_.push_back(std::move(c));
  }
  cq_cv_.notify_all();
}

void StorageEngine::submit(std::span<const Extent> extents) {
  if (extents.empty()) return;
  {
    std::lock_guard<std::mutex> lock(cq_mutex_);
    outstanding_ += extents.size();
  }
  std::vector<uint32_t> touched;
  for (const Extent& ext : extents) {
    const FileEntry* fe = entry(ext.file);
    if (!fe) {
      deliver({ext.tag, 0, EBADF, "storage: file id " + std::to_string(ext.file) + " is not open"});
      continue;
    }
    const FileInfo& fi = fe->info;
    if (ext.length == 0) {
      deliver({ext.tag, 0, 0, {}});
      continue;
    }
    if (!ext.dest) {
      deliver({ext.tag, 0, EFAULT, where(fi, ext) + ": no destination buffer"});
      continue;
    }
    if (ext.offset > fi.size || ext.length > fi.size - ext.offset) {
      deliver({ext.tag, 0, ENODATA,
               where(fi, ext) + ": extent ends past end of file (file is " + std::to_string(fi.size) + " bytes)"});
      continue;
    }
    auto r = std::make_unique<Request>();
    r->ext = ext;
    r->fe = fe;
    r->need_end = ext.offset + ext.length;
    if (!fi.direct) {
      r->land = static_cast<uint8_t*>(ext.dest);
      r->land_offset = ext.offset;
      r->land_end = r->need_end;
    } else {
      const uint64_t a0 = align_down(ext.offset), a1 = align_up(r->need_end);
      const uint64_t capacity = ext.capacity ? ext.capacity : ext.length;
      if (a0 == ext.offset && is_aligned(ext.dest) && capacity >= a1 - a0) {
        r->land = static_cast<uint8_t*>(ext.dest);
      } else {
        try {
          r->bounce = AlignedBuffer(a1 - a0, false);
        } catch (const std::exception& e) {
          deliver({ext.tag, 0, ENOMEM, where(fi, ext) + ": cannot allocate a bounce buffer: " + e.what()});
          continue;
        }
        r->land = r->bounce.data();
      }
      r->land_offset = a0;
      r->land_end = a1;
    }
    const uint64_t span = r->land_end - r->land_offset;
    const uint64_t each = piece_length(span, piece_bytes_);
    r->pieces.resize(std::max<uint64_t>(1, (span + each - 1) / each));
    for (size_t i = 0; i < r->pieces.size(); ++i) {
      Piece& p = r->pieces[i];
      p.req = r.get();
      p.fd = fe->fd;
      p.file = ext.file;
      p.drive = fi.drive;
      p.direct = fi.direct;
      const uint64_t start = r->land_offset + i * each;
      p.end = std::min(start + each, r->land_end);
      p.need_end = std::min(p.end, r->need_end);
      p.set(start);
    }
    r->pieces_left = r->pieces.size();
    r->background = ext.background;
    live_.fetch_add(1);
    Drive* dr = drive_ptr(fi.drive);
    Request* owned = r.release();
    {
      std::lock_guard<std::mutex> lock(sched_mutex_);
      auto& q = owned->background ? dr->background : dr->queue;
      for (Piece& p : owned->pieces) q.push_back(&p);
    }
    if (std::find(touched.begin(), touched.end(), fi.drive) == touched.end()) touched.push_back(fi.drive);
  }
  for (uint32_t d : touched) pump(d);
}

void StorageEngine::pump(uint32_t drive) {
  Drive* dr = drive_ptr(drive);
  std::vector<RawRead*> batch;
  {
    std::lock_guard<std::mutex> lock(sched_mutex_);
    const unsigned before = dr->in_flight;
    const auto now = std::chrono::steady_clock::now();
    dr->count_in_flight(now);
    while (dr->in_flight < queue_depth_ && !dr->queue.empty()) {
      dr->queue.front()->issued = now;
      batch.push_back(dr->queue.front());
      dr->queue.pop_front();
      ++dr->in_flight;
    }
    // Background reads only use a drive that has nothing else to do, and only
    // a few at a time, so a demand read that comes next waits for little.
    while (dr->queue.empty() && dr->in_flight == dr->background_in_flight && dr->in_flight < queue_depth_ &&
           dr->background_in_flight < background_depth_ && !dr->background.empty()) {
      Piece* p = dr->background.front();
      dr->background.pop_front();
      p->issued_background = true;
      p->issued = now;
      ++dr->background_in_flight;
      ++dr->in_flight;
      batch.push_back(p);
    }
    if (before == 0 && dr->in_flight > 0) dr->busy_since = now;
  }
  if (batch.empty()) return;
  if (FaultHook* hook = hook_.load())
    for (RawRead* raw : batch) hook->before_issue(*raw, static_cast<Piece*>(raw)->req->ext);
  issue(drive, batch);
}

void StorageEngine::complete(RawRead* raw, int64_t res, std::vector<RawRead*>* deferred) {
  auto* p = static_cast<Piece*>(raw);
  Request* r = p->req;
  if (FaultHook* hook = hook_.load()) hook->after_complete(*raw, r->ext, res);
  bool done = false, requeue = false;
  int err = 0;
  std::string problem;
  if (res < 0) {
    const int e = static_cast<int>(-res);
    if ((e == EINTR || e == EAGAIN) && ++p->retries < kMaxRetries) {
      p->set(p->offset);
      requeue = true;
    } else {
      err = e;
      problem = "read failed at byte " + std::to_string(p->offset) + ": " + errno_text(e);
      done = true;
    }
  } else {
    const uint64_t got_to = p->offset + static_cast<uint64_t>(res);
    // O_DIRECT returns a count that is not a block multiple only at end of file.
    const bool at_eof = res == 0 || (p->direct && (res % kIoAlign) != 0);
    if (got_to >= p->need_end) {
      done = true;
    } else if (at_eof) {
      err = ENODATA;
      // Extents are checked against the size at open: ending short of that,
      // the file shrank under us (truncated or rewritten while we run).
      problem = "the file shrank: it ends at byte " + std::to_string(got_to) + " now, and had " +
                std::to_string(r->fe->info.size) + " bytes when opened (a model's files must not change while strata runs)";
      done = true;
    } else {
      const uint64_t next = p->direct ? align_down(got_to) : got_to;
      if (next <= p->offset && ++p->retries >= kMaxRetries) {
        err = EIO;
        problem = "reads at byte " + std::to_string(p->offset) + " make no progress";
        done = true;
      } else {
        p->set(next);
        requeue = true;
      }
    }
  }
  // Once requeued, p belongs to whichever thread issues it next: no touching.
  const uint32_t drive = p->drive;
  Drive* dr = drive_ptr(drive);
  bool request_over = false;
  {
    std::lock_guard<std::mutex> lock(sched_mutex_);
    if (res > 0) dr->info.bytes_read += static_cast<uint64_t>(res);
    const auto now = std::chrono::steady_clock::now();
    timeline::overlapping_span(dr->track, p->issued_background ? "background read" : "read", p->issued, now,
                               res > 0 ? static_cast<uint64_t>(res) : 0);
    if (p->issued_background) --dr->background_in_flight;
    p->issued_background = false;
    dr->count_in_flight(now);
    if (--dr->in_flight == 0) dr->info.busy_s += std::chrono::duration<double>(now - dr->busy_since).count();
    if (requeue && r->cancelled) {  // the rest of a cancelled extent is not wanted
      requeue = false;
      done = true;
    }
    if (requeue) (r->background ? dr->background : dr->queue).push_front(p);
    if (done) {
      // Of several failed pieces, the one nearest the start of the extent
      // speaks for it, whatever order they finished in.
      if (err != 0 && (r->error == 0 || p->offset < r->error_at)) {
        r->error = err;
        r->error_at = p->offset;
        r->problem = std::move(problem);
      }
      request_over = --r->pieces_left == 0;
    }
  }
  pump(drive);  // refill the drive before spending time on copies and hashes
  if (!request_over) return;
  if (deferred)
    deferred->push_back(raw);
  else
    finish(r);
}

std::vector<std::pair<uint32_t, StorageEngine::Piece*>> StorageEngine::take_background(std::span<const uint64_t> tags) {
  std::lock_guard<std::mutex> files_lock(files_mutex_);
  std::vector<std::pair<uint32_t, Piece*>> taken;
  for (uint32_t d = 0; d < drives_.size(); ++d) {
    std::deque<Piece*> keep;
    for (Piece* p : drives_[d]->background) {
      if (std::find(tags.begin(), tags.end(), p->req->ext.tag) == tags.end())
        keep.push_back(p);
      else
        taken.emplace_back(d, p);
    }
    drives_[d]->background.swap(keep);
  }
  return taken;
}

size_t StorageEngine::cancel(std::span<const uint64_t> tags) {
  std::vector<Request*> over;
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(sched_mutex_);
    for (auto [d, p] : take_background(tags)) {
      Request* r = p->req;
      if (!r->cancelled) ++n;
      r->cancelled = true;
      if (--r->pieces_left == 0) over.push_back(r);
    }
  }
  for (Request* r : over) finish(r);
  return n;
}

void StorageEngine::promote(std::span<const uint64_t> tags) {
  std::vector<uint32_t> touched;
  {
    std::lock_guard<std::mutex> lock(sched_mutex_);
    for (auto [d, p] : take_background(tags)) {
      p->req->background = false;
      drive_ptr(d)->queue.push_back(p);
      if (std::find(touched.begin(), touched.end(), d) == touched.end()) touched.push_back(d);
    }
  }
  for (uint32_t d : touched) pump(d);
}

std::vector<DriveInfo> StorageEngine::drives() const {
  std::lock_guard<std::mutex> lock(sched_mutex_);
  std::lock_guard<std::mutex> files_lock(files_mutex_);
  std::vector<DriveInfo> out;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& d : drives_) {
    out.push_back(d->info);
    if (d->in_flight > 0) {
      out.back().busy_s += std::chrono::duration<double>(now - d->busy_since).count();
      out.back().in_flight_s += d->in_flight * std::chrono::duration<double>(now - d->counted_to).count();
    }
  }
  return out;
}

void StorageEngine::finish_deferred(std::vector<RawRead*>& deferred) {
  for (RawRead* raw : deferred) finish(static_cast<Piece*>(raw)->req);
  deferred.clear();
}

void StorageEngine::finish(Request* r) {
  std::unique_ptr<Request> owned(r);
  const Extent& ext = r->ext;
  Completion c{ext.tag, 0, r->error, {}};
  c.landed = std::chrono::steady_clock::now();
  if (r->error == 0 && r->cancelled) {
    c.error = ECANCELED;
    c.message = where(r->fe->info, ext) + ": cancelled";
  } else if (r->error == 0) {
    if (!r->bounce.empty()) std::memcpy(ext.dest, r->land + (ext.offset - r->land_offset), ext.length);
    if (ext.verify) {
      uint64_t got = xxh3_64(ext.dest, ext.length);
      if (got != ext.xxh3) {
        c.error = EBADMSG;
        c.message = checksum_mismatch_message(r->fe->info.path, ext.offset, ext.length, ext.xxh3, got);
      }
    }
    if (c.error == 0) c.bytes = ext.length;
  } else {
    c.message = where(r->fe->info, ext) + ": " + r->problem;
  }
  owned.reset();
  {
    std::lock_guard<std::mutex> lock(cq_mutex_);
    ready_.push_back(std::move(c));
    live_.fetch_sub(1);
  }
  cq_cv_.notify_all();
  drained_.notify_all();
}

size_t StorageEngine::poll(std::vector<Completion>& out) {
  std::lock_guard<std::mutex> lock(cq_mutex_);
  size_t n = ready_.size();
  for (auto& c : ready_) out.push_back(std::move(c));
  ready_.clear();
  outstanding_ -= n;
  return n;
}

size_t StorageEngine::wait(std::vector<Completion>& out, size_t min_count, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(cq_mutex_);
  auto enough = [&] { return ready_.size() >= min_count || ready_.size() == outstanding_; };
  if (timeout.count() < 0)
    cq_cv_.wait(lock, enough);
  else
    cq_cv_.wait_for(lock, timeout, enough);
  size_t n = ready_.size();
  for (auto& c : ready_) out.push_back(std::move(c));
  ready_.clear();
  outstanding_ -= n;
  return n;
}

size_t StorageEngine::pending() const {
  std::lock_guard<std::mutex> lock(cq_mutex_);
  return outstanding_;
}

void StorageEngine::drain() {
  std::unique_lock<std::mutex> lock(cq_mutex_);
  drained_.wait(lock, [&] { return live_.load() == 0; });
}

}  // namespace strata::detail
