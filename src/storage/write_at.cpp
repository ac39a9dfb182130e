#include "storage/write_at.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace strata {

void write_all_at(int fd, std::span<const uint8_t> bytes, uint64_t at, const std::filesystem::path& shown) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error(shown.string() + ": cannot write: " + std::strerror(errno));
    if (w == 0) throw Error(shown.string() + ": cannot write (no progress)");
    done += static_cast<size_t>(w);
  }
}

}  // namespace strata
