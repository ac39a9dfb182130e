#pragma once
// A read-only memory mapping of a whole file. Checkpoint tensors are views
// into these mappings, so weights are paged in lazily by the kernel and never
// copied into RAM all at once.
//
// A file that shrinks while mapped (truncated, rewritten in place) makes the
// pages past its new end unreadable: touching one ends the process with one
// line naming the file and the byte, and exit status 1 (util/mapped_file_guard.h),
// never a bare SIGBUS.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

namespace strata {

// Where a byte of a mapped file lives on disk.
struct FileLocation {
  std::string path;
  uint64_t offset = 0;
};

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel not to read ahead around faults: weights touched here
  // are a scattered subset (the trunk), and read-ahead would pull the
  // neighbouring experts into the page cache.
  void advise_random() const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The file and offset of `p` if it points into a live MappedFile (whether a
// weight still sits in its file's pages, e.g. the token table read by rows).
std::optional<FileLocation> locate_mapped(const void* p);

// Streaming from a checkpoint in place: no read-ahead on any mapping (the
// experts between trunk tensors must not be pulled into the page cache)...
void advise_random_all_mapped();
// ...and the trunk's own ranges read ahead explicitly.
void advise_willneed(const void* p, size_t n);
// No read-ahead around faults in [p, p + n): for a table read a row at a time
// (a token's embedding), where the kernel's read-around would otherwise pull
// read_ahead_kb (8 MiB on some machines) from the drive for each row.
void advise_random(const void* p, size_t n);
// Drops this process's hold on the whole pages of [p, p + n) when they belong
// to a mapped checkpoint file (no-op otherwise): after a weight was copied
// into another layout, its file pages stay in the page cache but no longer
// count in our resident set. A later access simply faults them back in.
void release_mapped_pages(const void* p, size_t n);
// The same for every page [p, p + n) touches, partial ones included, and
// the rest of each 64 KiB block they are in: for bytes read once and not
// needed again soon (a few rows of a large table). A fault on a file page
// also maps the neighbours the page cache holds (the kernel's fault-around,
// 64 KiB by default), which would otherwise stay in our resident set: a
// 4096-token prompt's rows of a cached token table kept ~190 MB. `within`
// (empty: the whole mapping) bounds what is let go to the pages of the
// table the rows come from, so its neighbours in the file stay mapped.
void release_mapped_pages_touched(const void* p, size_t n, std::span<const uint8_t> within = {});

// The pages of the live MappedFiles in this process's resident set
// (/proc/self/smaps): checkpoint weights, which a budget counts as weights;
// 0 where smaps cannot be read.
uint64_t resident_mapped_file_bytes();

}  // namespace strata
