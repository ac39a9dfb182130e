#pragma once
// strata-blocks.json: the xxh3-64 of every block of a model folder's files,
// published beside them (`strata checksums DIR` writes it), so that a
// streaming install can check each range it fetches. A hub publishes the
// sha256 of its large (LFS) files only, whole, which a range cannot be
// checked against, and a plain server publishes nothing; with this file
// every byte fetched (config and tokenizer too) is checked before it is
// used, whatever the server or a proxy in between did to it.
//
//   {"format": "strata-blocks", "version": 1, "block_bytes": B,
//    "files": {NAME: {"size": S, "xxh3": "<16 hex digits per block>"}},
//    "check": "<16 hex digits>"}
//
// "check" is the xxh3 of the sums themselves (block_bytes, then each file's
// name, size and digits, a line each, by name), so that a sum changed on
// its way is a damaged file rather than a block that never fetches right.
// Block k of a file is bytes [k*B, min((k+1)*B, S)); B is a power of two
// from 4 KiB to 64 MiB. A range is fetched as whole blocks, so B is what a
// fetch may read beyond what was asked for at each end: 1 MiB by default,
// 22 MB of sums for Kimi K3's 1.45 TB of experts.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

inline constexpr const char* kBlockSumsFile = "strata-blocks.json";
inline constexpr uint64_t kDefaultSumBlockBytes = 1ull << 20;
inline constexpr uint64_t kMinSumBlockBytes = 4096, kMaxSumBlockBytes = 64ull << 20;

struct BlockSums {
  uint64_t block_bytes = kDefaultSumBlockBytes;
  struct File {
    uint64_t size = 0;
    std::vector<uint64_t> xxh3;  // one per block
  };
  std::map<std::string, File> files;

  const File* find(const std::string& name) const {
    const auto it = files.find(name);
    return it == files.end() ? nullptr : &it->second;
  }
  // Block k's bytes [begin, end) in `f`.
  uint64_t block_begin(uint64_t k) const { return k * block_bytes; }
  uint64_t block_end(const File& f, uint64_t k) const { return std::min(f.size, (k + 1) * block_bytes); }
};

// Throws strata::Error "<path>: ..." for anything but a file as above (the
// wrong number of sums for a size, digits that are not hex, a file name
// with a slash, a block size out of range).
BlockSums read_block_sums(const std::filesystem::path& path);
// The same of a text fetched whole; `where` names it in errors.
BlockSums parse_block_sums(std::string_view text, const std::string& where);
void write_block_sums(const std::filesystem::path& path, const BlockSums& sums);

// The first block of the file at `path` (named `name` in `sums`) unlike its
// sum: where it starts and "NAME offset O length L: checksum mismatch
// (expected 0x…, got 0x…) (strata-blocks.json)"; nullopt when every block
// matches. A size other than the sums' is a mismatch at the shorter end.
struct BadBlock {
  uint64_t offset = 0;
  std::string message;
};
std::optional<BadBlock> first_bad_block(const std::filesystem::path& path, const std::string& name,
                                        const BlockSums& sums);

// The sums of the files `names` in `dir`, read in order.
BlockSums compute_block_sums(const std::filesystem::path& dir, const std::vector<std::string>& names,
                             uint64_t block_bytes = kDefaultSumBlockBytes);

}  // namespace strata
