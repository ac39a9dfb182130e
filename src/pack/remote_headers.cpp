#include "pack/remote_headers.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "storage/atomic_file.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kSmallFileLimit = 64ull << 20;
// A GGUF header past this is refused (a large vocabulary and thousands of
// tensor infos come to tens of MiB).
constexpr uint64_t kGgufHeaderLimit = 256ull << 20;

// A sparse file of `size` bytes at `path` (one there is emptied first).
void make_sparse(const fs::path& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool sized = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!sized) throw Error(path.string() + ": cannot create: " + std::strerror(err));
}

void write_at(const fs::path& path, uint64_t offset, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  size_t done = 0;
  while (fd >= 0 && done < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (done < bytes.size()) throw Error(path.string() + ": cannot write: " + std::strerror(err));
}

// The bytes [offset, offset + length) of `name`, exactly that many.
std::vector<uint8_t> read_exactly(RemoteSource& src, const std::string& name, uint64_t offset, uint64_t length) {
  std::vector<uint8_t> bytes = src.read(name, offset, length);
  if (bytes.size() != length)
    throw Error(url_for_messages(src.url(name)) + ": asked for " + std::to_string(length) + " bytes at " +
                std::to_string(offset) + ", got " + std::to_string(bytes.size()));
  return bytes;
}

// A GGUF file's header into a sparse copy at `dest`, in doubling prefixes
// until a parse ends inside what was fetched (remote_headers.h).
uint64_t fetch_gguf_header(RemoteSource& src, const std::string& name, uint64_t size, const fs::path& dest) {
  make_sparse(dest, size);
  const std::string where = url_for_messages(src.url(name));
  uint64_t have = 0;
  for (uint64_t want = std::min<uint64_t>(size, 1ull << 20);; want = std::min(size, want * 2)) {
    write_at(dest, have, read_exactly(src, name, have, want - have));
    have = want;
    try {
      const GgufFile f(dest);
      if (f.data_offset() <= have || have == size) return have;
    } catch (const Error& e) {
      // The parse ran into bytes not fetched yet (zeros), or the file is bad.
      if (have == size) throw Error(where + ": " + e.what());
    }
    if (have >= kGgufHeaderLimit)
      throw Error(where + ": no GGUF header ends within its first " + std::to_string(kGgufHeaderLimit >> 20) + " MiB");
  }
}

}  // namespace

std::vector<std::string> remote_weight_files(RemoteSource& src, const std::string& shown, std::string* index_text) {
  if (index_text) index_text->clear();
  if (!src.stat("model.safetensors.index.json", /*optional=*/true).exists) return {"model.safetensors"};
  const std::optional<std::string> index = src.read_small("model.safetensors.index.json", kSmallFileLimit);
  if (!index) return {"model.safetensors"};
  if (index_text) *index_text = *index;
  const std::string where = shown + ": model.safetensors.index.json";
  nlohmann::json j = parse_json(*index, where);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(where + ": has no \"weight_map\" object");
  std::set<std::string> names;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(where + ": the file of " + tensor + " is not a string");
    const std::string f = file.get<std::string>();
    const bool plain = std::all_of(f.begin(), f.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
    });
    if (!plain || !f.ends_with(".safetensors") || f.starts_with("."))
      throw Error(where + ": a shard name that is not NAME.safetensors beside the index (letters, digits, '-', '_', '.')");
    names.insert(f);
  }
  if (names.empty()) throw Error(where + ": the weight_map is empty");
  std::vector<std::string> out = {"model.safetensors.index.json"};
  out.insert(out.end(), names.begin(), names.end());
  return out;
}

RemoteHeaders fetch_remote_headers(const std::string& source, const fs::path& dir, const EnvLookup& env,
                                   RetryPolicy retry) {
  RemoteSource src(parse_source(source, env), retry);
  RemoteHeaders r;
  r.source = source;
  r.commit = src.commit();
  fs::create_directories(dir);
  const std::string gguf = src.location().file;
  if (!gguf.empty()) {
    const RemoteFileInfo info = src.stat(gguf, /*optional=*/true);
    if (!info.exists) throw Error(source + ": has no " + gguf);
    r.model = dir / gguf;
    r.files = 1;
    r.weight_bytes = info.size;
    r.fetched_bytes = fetch_gguf_header(src, gguf, info.size, r.model);
    return r;
  }
  r.model = dir;
  const std::optional<std::string> config = src.read_small("config.json", kSmallFileLimit);
  if (!config) throw Error(source + ": has no config.json");
  write_file_atomically(dir / "config.json", *config);
  r.fetched_bytes += config->size();
  r.files = 1;
  std::string index;
  for (const std::string& name : remote_weight_files(src, source, &index)) {
    ++r.files;
    if (name.ends_with(".index.json")) {
      write_file_atomically(dir / name, index);
      r.fetched_bytes += index.size();
      continue;
    }
    const RemoteFileInfo info = src.stat(name, /*optional=*/true);
    if (!info.exists) throw Error(source + ": has no " + name);
    r.weight_bytes += info.size;
    const std::string where = url_for_messages(src.url(name));
    if (info.size < 8) throw Error(where + ": too short for a safetensors file");
    const std::vector<uint8_t> length = read_exactly(src, name, 0, 8);
    const uint64_t n = safetensors_header_length(length.data(), info.size, where);
    make_sparse(dir / name, info.size);
    write_at(dir / name, 0, length);
    write_at(dir / name, 8, read_exactly(src, name, 8, n));
    r.fetched_bytes += 8 + n;
  }
  return r;
}

}  // namespace strata
