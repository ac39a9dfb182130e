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
#include "storage/write_at.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// A GGUF header past this is refused (a large vocabulary and thousands of
// tensor infos come to tens of MiB).
constexpr uint64_t kGgufHeaderLimit = 256ull << 20;

void write_at(const fs::path& path, uint64_t offset, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path.string() + ": cannot open: " + std::strerror(errno));
  try {
    write_all_at(fd, bytes, offset, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
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
  const std::string where = url_for_messages(src.url(name));
  if (size < 24) throw Error(where + ": " + std::to_string(size) + " bytes, too short for a GGUF file");
  create_sparse_file(dest, size);
  uint64_t have = 0;
  std::string last;  // why the last prefix did not parse
  for (uint64_t want = std::min<uint64_t>(size, 1ull << 20);; want = std::min(size, want * 2)) {
    const std::vector<uint8_t> bytes = read_exactly(src, name, have, want - have);
    if (have == 0) {  // not GGUF at all: said at once, not after 256 MiB
      const uint32_t version = bytes[4] | bytes[5] << 8 | bytes[6] << 16 | static_cast<uint32_t>(bytes[7]) << 24;
      if (std::memcmp(bytes.data(), "GGUF", 4) != 0) throw Error(where + ": not a GGUF file (no GGUF magic)");
      if (version != 2 && version != 3)
        throw Error(where + ": GGUF version " + std::to_string(version) + ", strata reads versions 2 and 3");
    }
    write_at(dest, have, bytes);
    have = want;
    try {
      const GgufFile f(dest);
      if (f.data_offset() <= have || have == size) return have;
      last = "the header runs past the bytes fetched";
    } catch (const std::exception& e) {
      // The parse ran into bytes not fetched yet (zeros, or counts that the
      // size the source claims allows), or the file is bad.
      last = renamed_in_message(e.what(), dest.string(), where);
      if (have == size) throw Error(last);
    }
    if (have >= kGgufHeaderLimit)
      throw Error(where + ": no GGUF header ends within its first " + std::to_string(kGgufHeaderLimit >> 20) +
                  " MiB (" + last + ")");
  }
}

}  // namespace

void create_sparse_file(const fs::path& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool sized = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!sized) throw Error(path.string() + ": cannot create: " + std::strerror(err));
}

std::vector<std::string> remote_weight_files(RemoteSource& src, const std::string& shown, std::string* index_text) {
  if (index_text) index_text->clear();
  if (!src.stat("model.safetensors.index.json", /*optional=*/true).exists) return {"model.safetensors"};
  const std::optional<std::string> index = src.read_small("model.safetensors.index.json", kRemoteSmallFileLimit);
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
  const std::optional<std::string> config = src.read_small("config.json", kRemoteSmallFileLimit);
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
    create_sparse_file(dir / name, info.size);
    write_at(dir / name, 0, length);
    write_at(dir / name, 8, read_exactly(src, name, 8, n));
    r.fetched_bytes += 8 + n;
  }
  return r;
}

}  // namespace strata
