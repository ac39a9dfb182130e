#include "util/page_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <tuple>

#include "util/error.h"

namespace strata {

namespace {

// Sorted by file and offset, overlaps joined.
std::vector<FileRange> merged(std::vector<FileRange> r) {
  std::sort(r.begin(), r.end(),
            [](const FileRange& a, const FileRange& b) { return std::tie(a.path, a.offset) < std::tie(b.path, b.offset); });
  std::vector<FileRange> out;
  for (auto& x : r) {
    if (x.length == 0) continue;
    if (!out.empty() && out.back().path == x.path && x.offset <= out.back().offset + out.back().length) {
      out.back().length = std::max(out.back().length, x.offset + x.length - out.back().offset);
      continue;
    }
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace

uint64_t covered_bytes(std::vector<FileRange> ranges) {
  uint64_t n = 0;
  for (const auto& r : merged(std::move(ranges))) n += r.length;
  return n;
}

uint64_t read_into_page_cache(std::vector<FileRange> ranges, const std::function<void(uint64_t)>& on_bytes) {
  constexpr size_t kChunk = 4u << 20;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  uint64_t total = 0;
  int fd = -1;
  std::string open_path;
  auto close_fd = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
  };
  for (const FileRange& r : merged(std::move(ranges))) {
    if (r.path != open_path) {
      close_fd();
      fd = ::open(r.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw Error(r.path + ": cannot open: " + std::strerror(errno));
      open_path = r.path;
      // Exactly the ranges asked for: the kernel's read-ahead would pull in
      // what lies between them.
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    }
    for (uint64_t done = 0; done < r.length;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, r.length - done));
      const ssize_t got = ::pread(fd, buf.get(), n, static_cast<off_t>(r.offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const std::string why = got < 0 ? std::strerror(errno) : "unexpected end of file";
        close_fd();
        throw Error(r.path + " offset " + std::to_string(r.offset + done) + ": cannot read: " + why);
      }
      done += static_cast<uint64_t>(got);
      total += static_cast<uint64_t>(got);
      if (on_bytes) on_bytes(static_cast<uint64_t>(got));
    }
  }
  close_fd();
  return total;
}

}  // namespace strata
