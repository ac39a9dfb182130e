#pragma once
// A streaming install (`strata pull --streaming`, pack/pull.h): a Hugging
// Face checkpoint folder whose safetensors files are sparse, holding their
// headers and the trunk's tensors; a routed expert's bytes are fetched from
// the source by range the first time a read asks for them, written into
// the file at their place, recorded, and read from the drive ever after.
//
// On disk, beside the checkpoint's files:
//   remote.json   {"format": "strata-remote-mirror", "version": 1,
//                  "source": SOURCE, "hf_endpoint": "...", "complete": BOOL,
//                  "files": {NAME: {"size", "etag", "sha256"}}}
//                 (hf_endpoint: $HF_ENDPOINT at install, used when it is
//                 not set later, without the user's hub token unless it is
//                 huggingface.co; complete: the install fetched everything
//                 but the experts' streamed bytes; a folder that is not
//                 complete does not load)
//   present.log   one line per range known to be on disk, "NAME OFFSET LENGTH",
//                 appended (and synced) after the bytes were written and
//                 synced: a crash loses at most ranges that are fetched again.
// Both are input like any file: a line naming another file or a range past
// its size is ignored (fetched again), a damaged remote.json is an error.
//
// Fetched ranges are checked by transport only (HTTP status, Content-Range,
// and the ETag the file had when installed, when it has one): no published
// hash covers a range. Each run checks once per file, before its first
// fetch, that the source still says the same of it (size, ETag, sha256); the
// install itself is only made of a pinned hub commit or files with ETags.
// Fetched bytes are written with the file's modification time kept, so the
// weights' identity (expert heat, sessions) stays that of the install.
//
// RangeFillingStorage is the Storage the loader hands the expert cache for
// such a folder: each extent's file range is made present (fetched if need
// be, in submit(), on the caller's thread) before the inner storage reads it.
// Network access happens only here, for a folder the user installed this way.
#include <cstdint>
#include <filesystem>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <mutex>
#include <string>
#include <vector>

#include "remote/source.h"
#include "storage/forwarding_storage.h"

namespace strata {

inline constexpr const char* kRemoteMirrorRecord = "remote.json";
inline constexpr const char* kRemoteMirrorLog = "present.log";
// How RangeFillingStorage names the source among the drives of a run's stats.
inline constexpr const char* kRemoteDrivePrefix = "remote ";

struct RemoteFetchStats {
  uint64_t bytes = 0;     // fetched from the source
  uint64_t requests = 0;  // ranges fetched
  double seconds = 0;     // spent fetching
};

class RemoteMirror {
 public:
  // A folder with a strata remote.json (another program's file of that name
  // is not one).
  static bool is_mirror(const std::filesystem::path& dir);
  // Writes remote.json for a new install (the folder must exist).
  static void create(const std::filesystem::path& dir, const std::string& source,
                     const std::map<std::string, RemoteFileInfo>& files, const std::string& hf_endpoint);
  // Whether the folder's install finished (reads remote.json only).
  static bool is_complete(const std::filesystem::path& dir);
  // Marks the install complete (everything but the experts' streamed bytes).
  void set_complete();
  bool complete() const { return complete_; }

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
  // Drops what the log says of `file` (recreated: its bytes are gone).
  void forget(const std::string& file);
  RemoteFetchStats stats() const;

 private:
  using Intervals = std::map<uint64_t, uint64_t>;  // start -> end, disjoint, not touching
  static void add(Intervals& set, uint64_t begin, uint64_t end);
  bool present_locked(const std::string& file, uint64_t begin, uint64_t end) const;
  void append_log_locked(const std::string& file, uint64_t offset, uint64_t length);
  void open_log_locked();
  RemoteSource& source_locked();
  void check_unchanged_locked(const std::string& file);

  std::filesystem::path dir_;
  EnvLookup env_;
  RetryPolicy retry_;
  std::string source_, hf_endpoint_;
  bool complete_ = false;
  nlohmann::json record_;
  std::map<std::string, RemoteFileInfo> files_;
  mutable std::mutex mu_;
  std::map<std::string, Intervals> present_;
  std::unique_ptr<RemoteSource> remote_;
  std::map<std::string, bool> checked_;  // files checked against the source this run
  int log_fd_ = -1;
  RemoteFetchStats stats_;
};

// The Storage for a mirror's files: reads of ranges that are not present
// yet fetch them first. A fetch that fails completes its extent with EIO
// and the error's message (never an exception out of submit()).
// Everything else is the inner storage's.
class RangeFillingStorage final : public ForwardingStorage {
 public:
  RangeFillingStorage(std::unique_ptr<Storage> inner, std::shared_ptr<RemoteMirror> mirror);

  FileId open(const std::filesystem::path& path, OpenMode mode = OpenMode::Auto) override;
  // The inner storage's drives, and the source as one more ("remote
  // SOURCE": bytes fetched and the time spent fetching), so that a run's
  // stats and /metrics say what came over the network.
  std::vector<DriveInfo> drives() const override;
  void submit(std::span<const Extent> extents) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t wait(std::vector<Completion>& out, size_t min_count = 1,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) override;
  size_t pending() const override;

 private:
  std::shared_ptr<RemoteMirror> mirror_;
  mutable std::mutex mu_;
  std::map<FileId, std::string> names_;  // files of the mirror, by id
  std::deque<Completion> failed_;         // extents whose fetch failed, not handed out yet
  size_t take_failed(std::vector<Completion>& out);
};

}  // namespace strata
