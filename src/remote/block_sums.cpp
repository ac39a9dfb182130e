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

bool valid_block_bytes(int64_t b) {
  return b >= static_cast<int64_t>(kMinSumBlockBytes) && b <= static_cast<int64_t>(kMaxSumBlockBytes) && (b & (b - 1)) == 0;
}

// The file's own check: a byte changed on its way that leaves valid JSON
// (a digit for another) is caught here rather than as a block of the
// weights that can never be fetched right.
uint64_t sums_check(const BlockSums& sums) {
  std::string all = std::to_string(sums.block_bytes) + "\n";
  for (const auto& [name, f] : sums.files) {
    all += name + "\n" + std::to_string(f.size) + "\n";
    if (f.cut)
      for (size_t k = 0; k < f.ends.size(); ++k) all += std::to_string(f.end(k) - f.begin(k)) + ",";
    all += "\n";
    for (uint64_t h : f.xxh3) all += hash_digits(h);
    all += "\n";
  }
  return xxh3_64(all.data(), all.size());
}

std::vector<uint64_t> fixed_ends(uint64_t size, uint64_t block_bytes) {
  std::vector<uint64_t> ends;
  ends.reserve(static_cast<size_t>((size + block_bytes - 1) / block_bytes));
  for (uint64_t at = 0; at < size;) ends.push_back(at = std::min(size, at + block_bytes));
  return ends;
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
  if (!b || !valid_block_bytes(*b)) throw Error(where + ": \"block_bytes\" is not a power of two from 4096 to 64 MiB");
  sums.block_bytes = static_cast<uint64_t>(*b);
  if (!j.contains("files") || !j["files"].is_object()) throw Error(where + ": no \"files\"");
  for (const auto& [name, e] : j["files"].items()) {
    if (name.empty() || name.find('/') != std::string::npos || name.starts_with("."))
      throw Error(where + ": '" + name + "' is not a file of the folder");
    const std::optional<int64_t> size = e.is_object() && e.contains("size") ? json_int64(e["size"]) : std::nullopt;
    if (!size || *size < 0) throw Error(where + ": " + name + " has no size");
    if (!e.contains("xxh3") || !e["xxh3"].is_string()) throw Error(where + ": " + name + " has no \"xxh3\"");
    BlockSums::File f;
    f.size = static_cast<uint64_t>(*size);
    if (e.contains("units")) {
      if (!e["units"].is_array()) throw Error(where + ": " + name + ": \"units\" is not a list");
      f.cut = true;
      f.ends.reserve(e["units"].size());
      uint64_t at = 0;
      for (const auto& u : e["units"]) {
        const std::optional<int64_t> n = json_int64(u);
        if (!n || *n < 1 || static_cast<uint64_t>(*n) > sums.block_bytes || static_cast<uint64_t>(*n) > f.size - at)
          throw Error(where + ": " + name + ": a unit of " + u.dump().substr(0, 40) +
                      " bytes (units are 1 to block_bytes and add up to the size)");
        f.ends.push_back(at += static_cast<uint64_t>(*n));
      }
      if (at != f.size)
        throw Error(where + ": " + name + ": its units add up to " + std::to_string(at) + " bytes, not its " +
                    std::to_string(f.size));
    } else {
      f.ends = fixed_ends(f.size, sums.block_bytes);
    }
    const std::string& digits = e["xxh3"].get_ref<const std::string&>();
    if (digits.size() != f.ends.size() * 16)
      throw Error(where + ": " + name + " has " + std::to_string(digits.size()) + " digits of sums, its " +
                  std::to_string(f.ends.size()) + " blocks need " + std::to_string(f.ends.size() * 16));
    f.xxh3.reserve(f.ends.size());
    for (size_t k = 0; k < f.ends.size(); ++k) {
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
    nlohmann::json e = {{"size", f.size}, {"xxh3", std::move(digits)}};
    if (f.cut) {
      nlohmann::json units = nlohmann::json::array();
      for (size_t k = 0; k < f.ends.size(); ++k) units.push_back(f.end(k) - f.begin(k));
      e["units"] = std::move(units);
    }
    files[name] = std::move(e);
  }
  write_file_atomically(path, nlohmann::json{{"format", kFormat},
                                             {"version", 1},
                                             {"block_bytes", sums.block_bytes},
                                             {"files", std::move(files)},
                                             {"check", hash_digits(sums_check(sums))}}
                                  .dump());
}

std::vector<uint64_t> cut_blocks(uint64_t size, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                 uint64_t block_bytes) {
  std::vector<uint64_t> ends;
  const uint64_t edge = std::min(kEdgeBlockBytes, block_bytes);
  // [b, e) in blocks of at most block_bytes; a tensor's last one at most `edge`.
  auto span = [&](uint64_t b, uint64_t e, bool tensor) {
    const uint64_t tail = tensor && e - b > edge ? e - edge : e;
    for (uint64_t at = b; at < tail;) ends.push_back(at = std::min(tail, at + block_bytes));
    if (tail < e) ends.push_back(e);
  };
  uint64_t at = 0;
  for (auto [b, e] : ranges) {
    b = std::max(b, at);
    e = std::min(e, size);
    if (b >= e) continue;
    if (b > at) span(at, b, false);
    span(b, e, true);
    at = e;
  }
  if (at < size) span(at, size, false);
  return ends;
}

BlockSums compute_block_sums(const std::filesystem::path& dir, const std::vector<std::string>& names,
                             uint64_t block_bytes, const std::map<std::string, std::vector<uint64_t>>& cuts) {
  if (!valid_block_bytes(static_cast<int64_t>(block_bytes)))
    throw Error("a block of " + std::to_string(block_bytes) + " bytes: it must be a power of two from 4096 to 64 MiB");
  BlockSums sums;
  sums.block_bytes = block_bytes;
  std::vector<uint8_t> buf(block_bytes);
  for (const std::string& name : names) {
    const std::filesystem::path p = dir / name;
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(p.string() + ": cannot open: " + std::strerror(errno));
    BlockSums::File f;
    const auto cut = cuts.find(name);
    f.cut = cut != cuts.end();
    for (size_t k = 0;; ++k) {
      // This block's length: as cut (up to the last cut), else B.
      uint64_t want = block_bytes;
      if (f.cut) {
        if (k >= cut->second.size()) break;
        want = cut->second[k] - (k == 0 ? 0 : cut->second[k - 1]);
        if (want == 0 || want > block_bytes) {
          ::close(fd);
          throw Error(p.string() + ": a block of " + std::to_string(want) + " bytes");
        }
      }
      uint64_t got = 0;
      while (got < want) {
        const ssize_t n = ::read(fd, buf.data() + got, want - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          const int e = errno;
          ::close(fd);
          throw Error(p.string() + ": cannot read: " + std::strerror(e));
        }
        if (n == 0) break;
        got += static_cast<uint64_t>(n);
      }
      if (got == 0) break;
      f.xxh3.push_back(xxh3_64(buf.data(), got));
      f.ends.push_back(f.size += got);
      if (got < want) break;  // the end of the file
    }
    ::close(fd);
    sums.files[name] = std::move(f);
  }
  return sums;
}

std::string first_mismatch(const BlockSums::File& f, const std::string& name, uint64_t at,
                           std::span<const uint8_t> bytes) {
  const uint64_t end = at + bytes.size();
  for (size_t k = at < f.size ? f.block_of(at) : f.ends.size(); k < f.ends.size() && f.end(k) <= end; ++k) {
    if (f.begin(k) < at) continue;  // only part of it is here
    const uint64_t n = f.end(k) - f.begin(k);
    const uint64_t got = xxh3_64(bytes.data() + (f.begin(k) - at), n);
    if (got != f.xxh3[k]) return checksum_mismatch_message(name, f.begin(k), n, f.xxh3[k], got);
  }
  return "";
}

std::optional<BadBlock> first_bad_block(const std::filesystem::path& path, const std::string& name,
                                        const BlockSums& sums) {
  const BlockSums::File* want = sums.find(name);
  if (!want) return std::nullopt;
  const std::string file = path.filename().string();
  std::map<std::string, std::vector<uint64_t>> cuts;
  if (want->cut) cuts[file] = want->ends;
  const BlockSums got = compute_block_sums(path.parent_path(), {file}, sums.block_bytes, cuts);
  const BlockSums::File& have = got.files.at(file);
  auto bad = [&](size_t k) {
    const uint64_t b = want->begin(k);
    return BadBlock{b, checksum_mismatch_message(name, b, want->end(k) - b, want->xxh3[k], have.xxh3[k]) + " (" +
                           kBlockSumsFile + ")"};
  };
  // Blocks both have whole first; then the length; then the last block.
  const size_t n = std::min(have.xxh3.size(), want->xxh3.size());
  std::error_code ec;
  if (const uint64_t on_disk = std::filesystem::file_size(path, ec); !ec && on_disk > want->size)
    return BadBlock{want->size, name + ": " + std::to_string(on_disk) + " bytes, " + kBlockSumsFile + " says " +
                                    std::to_string(want->size)};
  for (size_t k = 0; k + 1 < n; ++k)
    if (have.xxh3[k] != want->xxh3[k]) return bad(k);
  if (have.size != want->size)
    return BadBlock{n == 0 ? 0 : want->begin(n - 1), name + ": " + std::to_string(have.size) + " bytes, " +
                                                         kBlockSumsFile + " says " + std::to_string(want->size)};
  if (n > 0 && have.xxh3[n - 1] != want->xxh3[n - 1]) return bad(n - 1);
  return std::nullopt;
}

}  // namespace strata
