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
//    "files": {NAME: {"size": S, "units": [L1, L2, ...],
//                     "xxh3": "<16 hex digits per block>"}},
//    "check": "<16 hex digits>"}
//
// A file's blocks are its "units" in order (lengths from 1 to B summing to
// S), or, without "units", blocks of B bytes (the last one shorter). A
// range is fetched as whole blocks, so what a block holds beyond the bytes
// asked for is fetched for nothing: `strata checksums` cuts a safetensors
// file at its header and at every tensor's ends, and each tensor into
// blocks of at most B with a last one of at most kEdgeBlockBytes (a read
// of the next tensor, 4 KiB-aligned, starts in it). Kimi K3's 1.45 TB of
// experts make about 2.4 million blocks: 38 MB of sums.
//
// "check" is the xxh3 of the sums themselves (block_bytes, then each file's
// name, size, units and digits, by name), so that a sum changed on its way
// is a damaged file rather than a block that never fetches right.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

inline constexpr const char* kBlockSumsFile = "strata-blocks.json";
inline constexpr uint64_t kDefaultSumBlockBytes = 1ull << 20;
inline constexpr uint64_t kEdgeBlockBytes = 64ull << 10;
inline constexpr uint64_t kMinSumBlockBytes = 4096, kMaxSumBlockBytes = 64ull << 20;

struct BlockSums {
  uint64_t block_bytes = kDefaultSumBlockBytes;  // the longest block
  struct File {
    uint64_t size = 0;
    bool cut = false;            // blocks given ("units"), not B each
    std::vector<uint64_t> ends;  // block k is [k ? ends[k-1] : 0, ends[k])
    std::vector<uint64_t> xxh3;  // one per block
    uint64_t begin(size_t k) const { return k == 0 ? 0 : ends[k - 1]; }
    uint64_t end(size_t k) const { return ends[k]; }
    // The block holding byte `offset` (< size).
    size_t block_of(uint64_t offset) const {
      return static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), offset) - ends.begin());
    }
  };
  std::map<std::string, File> files;

  const File* find(const std::string& name) const {
    const auto it = files.find(name);
    return it == files.end() ? nullptr : &it->second;
  }
};

// Throws strata::Error "<path>: ..." for anything but a file as above (the
// wrong number of sums for the blocks, units that do not add up to the
// size, digits that are not hex, a file name with a slash, a block size out
// of range, a damaged check).
BlockSums read_block_sums(const std::filesystem::path& path);
// The same of a text fetched whole; `where` names it in errors.
BlockSums parse_block_sums(std::string_view text, const std::string& where);
void write_block_sums(const std::filesystem::path& path, const BlockSums& sums);

// The block ends of a file of `size` bytes whose ranges [begin, end)
// (sorted, not overlapping; tensors) must not share a block with anything
// else: every range cut as above, the bytes between and around them in
// blocks of at most `block_bytes`.
std::vector<uint64_t> cut_blocks(uint64_t size, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                 uint64_t block_bytes);

// The sums of the files `names` in `dir`, read in order: in the blocks
// `cuts` gives for a file (its ends, as cut_blocks makes them), else in
// blocks of `block_bytes`.
BlockSums compute_block_sums(const std::filesystem::path& dir, const std::vector<std::string>& names,
                             uint64_t block_bytes = kDefaultSumBlockBytes,
                             const std::map<std::string, std::vector<uint64_t>>& cuts = {});

// `bytes` are the file's from offset `at` on: the first block of `f` they
// hold whole whose sum they do not match, as checksum_mismatch_message(name,
// ...) says it; "" when every such block matches.
std::string first_mismatch(const BlockSums::File& f, const std::string& name, uint64_t at,
                           std::span<const uint8_t> bytes);

// The first block of the file at `path` (named `name` in `sums`) unlike its
// sum: where it starts and "NAME offset O length L: checksum mismatch
// (expected 0x…, got 0x…) (strata-blocks.json)"; nullopt when every block
// matches. A size other than the sums' is a mismatch at the last block the
// shorter one has.
struct BadBlock {
  uint64_t offset = 0;
  std::string message;
};
std::optional<BadBlock> first_bad_block(const std::filesystem::path& path, const std::string& name,
                                        const BlockSums& sums);

}  // namespace strata
