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

namespace strata::detail {

namespace {

// Largest single read handed to a backend; longer extents are read in
// consecutive pieces (the kernel caps one read near 2 GiB anyway, and an SQE
// length is 32 bits).
constexpr uint64_t kMaxRawRead = 1ull << 30;
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

struct StorageEngine::Request : RawRead {
  Extent ext;
  const FileEntry* fe = nullptr;
  AlignedBuffer bounce;     // empty unless the alignment rule needs one
  uint8_t* land = nullptr;  // memory where file byte `land_offset` lands
  uint64_t land_offset = 0;
  uint64_t land_end = 0;    // file offset where the landing read ends
  uint64_t need_end = 0;    // ext.offset + ext.length
  int retries = 0;
  int error = 0;            // set when the I/O is over
  std::string problem;

  void set_piece(uint64_t from) {
    offset = from;
    buf = land + (from - land_offset);
    len = std::min(land_end - from, kMaxRawRead);
    inject_errno = 0;
  }
};

StorageEngine::StorageEngine(unsigned queue_depth) : queue_depth_(std::max(queue_depth, 1u)) {}

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

std::vector<DriveInfo> StorageEngine::drives() const {
  std::lock_guard<std::mutex> lock(files_mutex_);
  std::vector<DriveInfo> out;
  for (const auto& d : drives_) out.push_back(d->info);
  return out;
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
    r->fd = fe->fd;
    r->file = ext.file;
    r->drive = fi.drive;
    r->direct = fi.direct;
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
    r->set_piece(r->land_offset);
    live_.fetch_add(1);
    Drive* dr = drive_ptr(fi.drive);
    {
      std::lock_guard<std::mutex> lock(sched_mutex_);
      dr->queue.push_back(r.release());
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
    while (dr->in_flight < queue_depth_ && !dr->queue.empty()) {
      batch.push_back(dr->queue.front());
      dr->queue.pop_front();
      ++dr->in_flight;
    }
  }
  if (batch.empty()) return;
  if (FaultHook* hook = hook_.load())
    for (RawRead* raw : batch) hook->before_issue(*raw, static_cast<Request*>(raw)->ext);
  issue(drive, batch);
}

void StorageEngine::complete(RawRead* raw, int64_t res, std::vector<RawRead*>* deferred) {
  auto* r = static_cast<Request*>(raw);
  if (FaultHook* hook = hook_.load()) hook->after_complete(*raw, r->ext, res);
  bool done = false, requeue = false;
  int err = 0;
  std::string problem;
  if (res < 0) {
    const int e = static_cast<int>(-res);
    if ((e == EINTR || e == EAGAIN) && ++r->retries < kMaxRetries) {
      r->set_piece(r->offset);
      requeue = true;
    } else {
      err = e;
      problem = "read failed at byte " + std::to_string(r->offset) + ": " + errno_text(e);
      done = true;
    }
  } else {
    const uint64_t got_to = r->offset + static_cast<uint64_t>(res);
    // O_DIRECT returns a count that is not a block multiple only at end of file.
    const bool at_eof = res == 0 || (r->direct && (res % kIoAlign) != 0);
    if (got_to >= r->need_end) {
      done = true;
    } else if (at_eof) {
      err = ENODATA;
      problem = "unexpected end of file at byte " + std::to_string(got_to) + " (file was " +
                std::to_string(r->fe->info.size) + " bytes when opened)";
      done = true;
    } else {
      const uint64_t next = r->direct ? align_down(got_to) : got_to;
      if (next <= r->offset && ++r->retries >= kMaxRetries) {
        err = EIO;
        problem = "reads at byte " + std::to_string(r->offset) + " make no progress";
        done = true;
      } else {
        r->set_piece(next);
        requeue = true;
      }
    }
  }
  // Once requeued, r belongs to whichever thread issues it next: no touching.
  const uint32_t drive = r->drive;
  Drive* dr = drive_ptr(drive);
  {
    std::lock_guard<std::mutex> lock(sched_mutex_);
    --dr->in_flight;
    if (requeue) dr->queue.push_front(r);
  }
  pump(drive);  // refill the drive before spending time on copies and hashes
  if (!done) return;
  r->error = err;
  r->problem = std::move(problem);
  if (deferred)
    deferred->push_back(r);
  else
    finish(r);
}

void StorageEngine::finish_deferred(std::vector<RawRead*>& deferred) {
  for (RawRead* raw : deferred) finish(static_cast<Request*>(raw));
  deferred.clear();
}

void StorageEngine::finish(Request* r) {
  std::unique_ptr<Request> owned(r);
  const Extent& ext = r->ext;
  Completion c{ext.tag, 0, r->error, {}};
  c.landed = std::chrono::steady_clock::now();
  if (r->error == 0) {
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
