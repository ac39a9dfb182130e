#include "formats/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace strata {

namespace {

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": cannot write: " + std::strerror(errno));
    }
    b += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(uint64_t)>& on_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (dtype_is_block(t.dtype)) throw Error(path.string() + ": " + t.name + ": safetensors cannot hold " + dtype_name(t.dtype));
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const std::string partial = path.string() + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(partial + ": cannot create: " + std::strerror(errno));
  try {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
    write_all(fd, len, 8, partial);
    write_all(fd, h.data(), h.size(), partial);
    for (const auto& t : tensors) {
      constexpr size_t kChunk = 64u << 20;
      for (size_t done = 0; done < t.nbytes; done += kChunk) {
        const size_t n = std::min(kChunk, t.nbytes - done);
        write_all(fd, static_cast<const uint8_t*>(t.data) + done, n, partial);
        if (on_bytes) on_bytes(n);
      }
    }
    if (::fsync(fd) != 0) throw Error(partial + ": cannot sync: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(partial.c_str());
    throw;
  }
  ::close(fd);
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) {
    ::unlink(partial.c_str());
    throw Error(path.string() + ": cannot rename into place: " + ec.message());
  }
}

}  // namespace strata
