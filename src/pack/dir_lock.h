#pragma once
// One pull or upgrade at a time into a folder: DIR/.strata-pull.lock, held
// (flock) for the process's life; the file goes once the work is done.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "util/error.h"

namespace strata {

inline constexpr const char* kPullLock = ".strata-pull.lock";

// One pull at a time into a folder; the lock file sits beside the staging
// folder (which goes at the end) and is held until the process is done.
class DirLock {
 public:
  explicit DirLock(const std::filesystem::path& out) : path_(out / kPullLock) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) throw Error(out.string() + ": cannot create: " + ec.message());
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw Error(out.string() + ": another strata pull is writing there");
    }
  }
  ~DirLock() { ::close(fd_); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  // The work is done: the file goes (still held, so a pull starting now
  // fails its lock, then finds the finished install).
  void done() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace strata
