#pragma once
// A streaming install (`strata pull --streaming`, pack/pull.h): a Hugging
// Face checkpoint folder whose safetensors files are sparse, holding their
// headers and the trunk's tensors; a routed expert's bytes are fetched from
// the source by range the first time a read asks for them, written into
// the file at their place, recorded, and read from the drive ever after.
//
// On disk, beside the checkpoint's files:
//   remote.json   {"format": "strata-remote-mirror", "version": 1,
//                  "source": SOURCE, "hf_endpoint": "...",
//                  "files": {NAME: {"size", "etag", "sha256"}}}
//                 (hf_endpoint: $HF_ENDPOINT at install, used when it is
//                 not set later, so a mirror hub keeps serving the install)
//   present.log   one line per range known to be on disk, "NAME OFFSET LENGTH",
//                 appended (and synced) after the bytes were written and
//                 synced: a crash loses at most ranges that are fetched again.
// Both are input like any file: a line naming another file or a range past
// its size is ignored (fetched again), a damaged remote.json is an error.
//
// Fetched ranges are checked by transport only (HTTP status, Content-Range,
// the ETag the file had when installed): no published hash covers a range.
// `strata pull --full` over the same source checks whole files.
//
// RangeFillingStorage is the Storage the loader hands the expert cache for
// such a folder: each extent's file range is made present (fetched if need
// be, in submit(), on the caller's thread) before the inner storage reads it.
// Network access happens only here, for a folder the user installed this way.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "remote/source.h"
#include "storage/storage.h"

namespace strata {

inline constexpr const char* kRemoteMirrorRecord = "remote.json";
inline constexpr const char* kRemoteMirrorLog = "present.log";

struct RemoteFetchStats {
  uint64_t bytes = 0;     // fetched from the source
  uint64_t requests = 0;  // ranges fetched
  double seconds = 0;     // spent fetching
};

class RemoteMirror {
 public:
  static bool is_mirror(const std::filesystem::path& dir);
  // Writes remote.json for a new install (the folder must exist).
  static void create(const std::filesystem::path& dir, const std::string& source,
                     const std::map<std::string, RemoteFileInfo>& files, const std::string& hf_endpoint);

  // Opens the folder's record and log; the source is opened (and a hub
  // revision pinned) on the first fetch, not before.
  RemoteMirror(std::filesystem::path dir, EnvLookup env = process_env, RetryPolicy retry = {});
  ~RemoteMirror();

  const std::string& source() const { return source_; }
  const std::map<std::string, RemoteFileInfo>& files() const { return files_; }
  // Makes bytes [offset, offset + length) of `file` (a name in files())
  // present, fetching what is missing. Thread-safe.
  void ensure(const std::string& file, uint64_t offset, uint64_t length);
  bool present(const std::string& file, uint64_t offset, uint64_t length) const;
  // Records a range written by the caller (pull writes headers this way).
  void mark_present(const std::string& file, uint64_t offset, uint64_t length);
  RemoteFetchStats stats() const;

 private:
  using Intervals = std::map<uint64_t, uint64_t>;  // start -> end, disjoint, not touching
  static void add(Intervals& set, uint64_t begin, uint64_t end);
  bool present_locked(const std::string& file, uint64_t begin, uint64_t end) const;
  void append_log_locked(const std::string& file, uint64_t offset, uint64_t length);
  RemoteSource& source_locked();

  std::filesystem::path dir_;
  EnvLookup env_;
  RetryPolicy retry_;
  std::string source_, hf_endpoint_;
  std::map<std::string, RemoteFileInfo> files_;
  mutable std::mutex mu_;
  std::map<std::string, Intervals> present_;
  std::unique_ptr<RemoteSource> remote_;
  int log_fd_ = -1;
  RemoteFetchStats stats_;
};

// The Storage for a mirror's files: reads of ranges that are not present
// yet fetch them first. Everything else is the inner storage's.
class RangeFillingStorage final : public Storage {
 public:
  RangeFillingStorage(std::unique_ptr<Storage> inner, std::shared_ptr<RemoteMirror> mirror);

  FileId open(const std::filesystem::path& path, OpenMode mode) override;
  FileInfo file(FileId id) const override { return inner_->file(id); }
  std::vector<DriveInfo> drives() const override { return inner_->drives(); }
  void submit(std::span<const Extent> extents) override;
  size_t poll(std::vector<Completion>& out) override { return inner_->poll(out); }
  size_t wait(std::vector<Completion>& out, size_t min_count, std::chrono::milliseconds timeout) override {
    return inner_->wait(out, min_count, timeout);
  }
  size_t pending() const override { return inner_->pending(); }
  size_t cancel(std::span<const uint64_t> tags) override { return inner_->cancel(tags); }
  void promote(std::span<const uint64_t> tags) override { inner_->promote(tags); }
  bool register_buffers(std::span<const BufferRegion> regions) override { return inner_->register_buffers(regions); }
  std::string_view backend() const override { return inner_->backend(); }
  unsigned queue_depth() const override { return inner_->queue_depth(); }
  std::vector<std::string> notes() const override { return inner_->notes(); }

 private:
  std::unique_ptr<Storage> inner_;
  std::shared_ptr<RemoteMirror> mirror_;
  mutable std::mutex mu_;
  std::map<FileId, std::string> names_;  // files of the mirror, by id
};

}  // namespace strata
