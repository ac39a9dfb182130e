#include "remote/block_sums.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "storage/atomic_file.h"
#include "storage/checksum.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace {
constexpr const char* kFormat = "strata-blocks";

uint64_t blocks_of(uint64_t size, uint64_t block_bytes) { return (size + block_bytes - 1) / block_bytes; }

// The file's own check: a byte changed on its way that leaves valid JSON
// (a digit for another) is caught here rather than as a block of the
// weights that can never be fetched right.
uint64_t sums_check(const BlockSums& sums) {
  std::string all = std::to_string(sums.block_bytes) + "\n";
  for (const auto& [name, f] : sums.files) {
    all += name + "\n" + std::to_string(f.size) + "\n";
    for (uint64_t h : f.xxh3) all += hash_digits(h);
    all += "\n";
  }
  return xxh3_64(all.data(), all.size());
}
}  // namespace

BlockSums read_block_sums(const std::filesystem::path& path) { return parse_block_sums(read_text_file(path), path.string()); }

BlockSums parse_block_sums(std::string_view text, const std::string& where) {
  const nlohmann::json j = parse_json(text, where);
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat || !j.contains("version") ||
      json_int64(j["version"]) != 1)
    throw Error(where + ": not a strata-blocks file of version 1");
  BlockSums sums;
  const std::optional<int64_t> b = j.contains("block_bytes") ? json_int64(j["block_bytes"]) : std::nullopt;
  if (!b || *b < static_cast<int64_t>(kMinSumBlockBytes) || *b > static_cast<int64_t>(kMaxSumBlockBytes) ||
      (*b & (*b - 1)) != 0)
    throw Error(where + ": \"block_bytes\" is not a power of two from 4096 to 64 MiB");
  sums.block_bytes = static_cast<uint64_t>(*b);
  if (!j.contains("files") || !j["files"].is_object()) throw Error(where + ": no \"files\"");
  for (const auto& [name, e] : j["files"].items()) {
    if (name.empty() || name.find('/') != std::string::npos || name.starts_with("."))
      throw Error(where + ": '" + name + "' is not a file of the folder");
    const std::optional<int64_t> size = e.is_object() && e.contains("size") ? json_int64(e["size"]) : std::nullopt;
    if (!size || *size < 0) throw Error(where + ": " + name + " has no size");
    if (!e.contains("xxh3") || !e["xxh3"].is_string()) throw Error(where + ": " + name + " has no \"xxh3\"");
    const std::string& digits = e["xxh3"].get_ref<const std::string&>();
    BlockSums::File f;
    f.size = static_cast<uint64_t>(*size);
    const uint64_t n = blocks_of(f.size, sums.block_bytes);
    if (digits.size() != n * 16)
      throw Error(where + ": " + name + " has " + std::to_string(digits.size()) + " digits of sums, its " +
                  std::to_string(f.size) + " bytes need " + std::to_string(n * 16));
    f.xxh3.reserve(n);
    for (uint64_t k = 0; k < n; ++k) {
      const std::optional<uint64_t> h = parse_hash_digits(std::string_view(digits).substr(k * 16, 16));
      if (!h) throw Error(where + ": " + name + ": block " + std::to_string(k) + "'s sum is not 16 hex digits");
      f.xxh3.push_back(*h);
    }
    sums.files[name] = std::move(f);
  }
  const std::optional<uint64_t> check =
      j.contains("check") && j["check"].is_string() ? parse_hash_digits(j["check"].get<std::string>()) : std::nullopt;
  if (!check) throw Error(where + ": no \"check\"");
  if (*check != sums_check(sums)) throw Error(where + ": damaged (its \"check\" does not match its sums)");
  return sums;
}

void write_block_sums(const std::filesystem::path& path, const BlockSums& sums) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, f] : sums.files) {
    std::string digits;
    digits.reserve(f.xxh3.size() * 16);
    for (uint64_t h : f.xxh3) digits += hash_digits(h);
    files[name] = {{"size", f.size}, {"xxh3", std::move(digits)}};
  }
  write_file_atomically(path, nlohmann::json{{"format", kFormat},
                                             {"version", 1},
                                             {"block_bytes", sums.block_bytes},
                                             {"files", std::move(files)},
                                             {"check", hash_digits(sums_check(sums))}}
                                  .dump(1));
}

std::optional<BadBlock> first_bad_block(const std::filesystem::path& path, const std::string& name,
                                        const BlockSums& sums) {
  const BlockSums::File* want = sums.find(name);
  if (!want) return std::nullopt;
  const BlockSums got = compute_block_sums(path.parent_path(), {path.filename().string()}, sums.block_bytes);
  const BlockSums::File& have = got.files.begin()->second;
  auto bad = [&](size_t k) {
    const uint64_t b = sums.block_begin(k);
    return BadBlock{b, checksum_mismatch_message(name, b, sums.block_end(*want, k) - b, want->xxh3[k], have.xxh3[k]) +
                           " (" + kBlockSumsFile + ")"};
  };
  // Blocks both have whole first; then the length; then the last block.
  const size_t n = std::min(have.xxh3.size(), want->xxh3.size());
  for (size_t k = 0; k + 1 < n; ++k)
    if (have.xxh3[k] != want->xxh3[k]) return bad(k);
  if (have.size != want->size)
    return BadBlock{n == 0 ? 0 : sums.block_begin(n - 1), name + ": " + std::to_string(have.size) + " bytes, " +
                                                             kBlockSumsFile + " says " + std::to_string(want->size)};
  if (n > 0 && have.xxh3[n - 1] != want->xxh3[n - 1]) return bad(n - 1);
  return std::nullopt;
}

BlockSums compute_block_sums(const std::filesystem::path& dir, const std::vector<std::string>& names,
                             uint64_t block_bytes) {
  if (block_bytes < kMinSumBlockBytes || block_bytes > kMaxSumBlockBytes || (block_bytes & (block_bytes - 1)) != 0)
    throw Error("a block of " + std::to_string(block_bytes) + " bytes: it must be a power of two from 4096 to 64 MiB");
  BlockSums sums;
  sums.block_bytes = block_bytes;
  std::vector<uint8_t> buf(block_bytes);
  for (const std::string& name : names) {
    const std::filesystem::path p = dir / name;
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(p.string() + ": cannot open: " + std::strerror(errno));
    BlockSums::File f;
    for (;;) {
      size_t got = 0;
      while (got < block_bytes) {
        const ssize_t n = ::read(fd, buf.data() + got, block_bytes - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          const int e = errno;
          ::close(fd);
          throw Error(p.string() + ": cannot read: " + std::strerror(e));
        }
        if (n == 0) break;
        got += static_cast<size_t>(n);
      }
      if (got == 0) break;
      f.xxh3.push_back(xxh3_64(buf.data(), got));
      f.size += got;
      if (got < block_bytes) break;
    }
    ::close(fd);
    sums.files[name] = std::move(f);
  }
  return sums;
}

}  // namespace strata
