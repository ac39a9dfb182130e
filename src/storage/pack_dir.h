#pragma once
// A pack directory (pack/packer.h) as the layers below `pack` see it. The
// tokenizer and the checkpoint reader both open a pack's trunk, and both go
// through open_pack_trunk(), so that neither parses a byte of an interrupted
// or damaged pack.
//
// Complete or interrupted: DIR/manifest.json is written last, atomically;
// DIR/pack.progress.json is written first and removed after the manifest. A
// directory with the progress file and no manifest is a pack that was
// interrupted: opening it is one error telling the user to run `strata pack`
// again, never an attempt to read whatever is there.
//
// The trunk (DIR/trunk/ or DIR/trunk.gguf) is checksummed whole: DIR/trunk.xxh3
// lists every file of the trunk (tensors, config, tokenizer, side files) with
// its size and the xxh3 of each 64 MiB chunk, and ends with the xxh3 of the
// lines before it. open_pack_trunk() verifies every chunk before anything
// reads the trunk, on all cores, through short-lived mappings (the bytes land
// in the page cache, where loading the model finds them, and not in this
// process's resident set). A 100 GB trunk is read whole at load anyway; the
// hashing runs at memory bandwidth beside that (docs/PERFORMANCE.md has the
// figure). A file verified once is not hashed again by the same process while
// its path, size, modification time and inode stay the same (the tokenizer
// and the model open the same trunk). A file added to the trunk's folder
// after packing (a chat template put there by hand) is not in the list and
// is not checked. This runs
// whatever --verify says: that flag is about expert blobs, read again and
// again at run time; the trunk is read once, at load, and hashing it beside
// that read costs little.
//
// A pack written before trunks were checksummed has no trunk.xxh3: it opens
// unverified, and PackTrunk::verified says so for the caller to tell the user
// (a multi-hour pack still works; packing it again adds the checksums).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace strata {

inline constexpr const char* kPackManifest = "manifest.json";
inline constexpr const char* kPackProgress = "pack.progress.json";
inline constexpr const char* kTrunkChecksums = "trunk.xxh3";
inline constexpr uint64_t kTrunkChunkBytes = uint64_t{64} << 20;

enum class PackState { NotAPack, Complete, Interrupted };
PackState pack_state(const std::filesystem::path& dir);

// "<dir>: incomplete pack (pack was interrupted); run strata pack again to resume"
std::string interrupted_pack_message(const std::filesystem::path& dir);

struct PackTrunk {
  std::filesystem::path path;  // DIR/trunk or DIR/trunk.gguf
  bool verified = false;       // false: no trunk.xxh3 (a pack from before trunk checksums)
};

// For a directory that holds manifest.json or pack.progress.json. Throws
// strata::Error: interrupted_pack_message() for an interrupted pack; "<file>
// bytes A-B: checksum mismatch ..." or "<file>: N bytes, the pack wrote M"
// for a damaged trunk; "<dir>/trunk.xxh3: ..." for a damaged list.
PackTrunk open_pack_trunk(const std::filesystem::path& dir);

// One file's checksums: its size and the xxh3 of each chunk (the last one
// shorter).
struct FileChecksum {
  std::string name;  // relative to the pack directory ("trunk/config.json", "trunk.gguf")
  uint64_t bytes = 0;
  std::vector<uint64_t> chunks;
};

struct TrunkChecksums {
  uint64_t chunk_bytes = kTrunkChunkBytes;
  std::vector<FileChecksum> files;
};

// Hashes `path` (all cores) and names it `name`.
FileChecksum checksum_file(const std::filesystem::path& path, const std::string& name,
                           uint64_t chunk_bytes = kTrunkChunkBytes);

// Written to <path>.tmp, synced and renamed. Throws strata::Error.
void write_trunk_checksums(const std::filesystem::path& path, const TrunkChecksums& sums);
// Throws strata::Error "<path>: ..." when it is not a list write_trunk_checksums wrote.
TrunkChecksums read_trunk_checksums(const std::filesystem::path& path);

// Every listed file under `dir` against its checksums (all cores; once per
// unchanged file per process). Throws strata::Error naming the file and the
// byte range that differs.
void verify_trunk_checksums(const std::filesystem::path& dir, const TrunkChecksums& sums);

}  // namespace strata
