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
//                  "full": BOOL, "files": {NAME: {"size", "etag", "sha256"}}}
//                 (hf_endpoint: $HF_ENDPOINT at install, used when it is
//                 not set later, without the user's hub token unless it is
//                 huggingface.co; complete: the install fetched everything
//                 but the experts' streamed bytes; a folder that is not
//                 complete does not load; full: every byte is on the drive
//                 and each file was checked against its published sha256
//                 where there is one (`strata upgrade --full`): the folder
//                 is read as a plain checkpoint, without the network)
//   present.log   one line per range known to be on disk, "NAME OFFSET LENGTH",
//                 appended (and synced) after the bytes were written and
//                 synced: a crash loses at most ranges that are fetched again.
// Both are input like any file: a line naming another file or a range past
// its size is ignored (fetched again), a damaged remote.json is an error.
//
// Fetched ranges are checked against the source's strata-blocks.json
// (remote/block_sums.h) when it published one and the install fetched it:
// whole blocks are fetched, read back from the drive and compared before
// they are logged or read; wrong bytes are fetched once more, then are an
// error naming both sums. Without that file a range is checked by transport
// only (HTTP status, Content-Range, and the ETag the file had when
// installed, when it has one): a hub's sha256 covers whole files only
// (`strata upgrade` checks them once they are complete). Each run checks once per file,
// before its first fetch, that the source still says the same of it (size,
// ETag, sha256); the install itself is only made of a pinned hub commit or
// files with ETags. Fetched bytes are written with the file's modification
// time kept, so the weights' identity (expert heat, sessions) stays that of
// the install.
//
// Fetching runs on a thread of the mirror's, through libcurl's multi
// interface: many ranges in flight (set_connections), in pieces of at most
// kFetchPieceBytes, what a reader waits for (Demand) before what warm-up or
// an upgrade asks for (Background), each range fetched once however many ask.
//
// remote/range_filling_storage.h is the Storage the loader hands the expert
// cache for such a folder.
// Network access happens only here, for a folder the user installed this way.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "remote/block_sums.h"
#include "remote/source.h"

namespace strata {

inline constexpr const char* kRemoteMirrorRecord = "remote.json";
inline constexpr const char* kRemoteMirrorLog = "present.log";
// How RangeFillingStorage names the source among the drives of a run's stats.
inline constexpr const char* kRemoteDrivePrefix = "remote ";

// Ranges are fetched in requests of at most this many bytes; warm-up's and
// upgrades' (Background) in smaller ones, so that a reader whose bytes one
// of them is bringing does not wait long.
inline constexpr uint64_t kFetchPieceBytes = 8ull << 20;
inline constexpr uint64_t kBackgroundPieceBytes = 1ull << 20;

struct RemoteFetchStats {
  uint64_t bytes = 0;     // fetched from the source
  uint64_t requests = 0;  // range requests that brought them
  double seconds = 0;     // wall time with at least one request in flight
  // Reads asked of the mirror (Demand requests): served by bytes already
  // on the drive, or made to wait for a fetch (and how long, summed).
  uint64_t local_reads = 0, remote_reads = 0;
  double remote_wait_s = 0;
  uint64_t rejected_bytes = 0;  // fetched, unlike the published block sums, not used
};

// Who waits: a reader (Demand), a guess of the next layer's experts (Guess),
// warm-up or an upgrade (Background). Fetched in that order; only Demand
// counts in the read statistics.
enum class FetchPriority { Demand, Guess, Background };

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
  // Whether every byte was fetched and checked (reads remote.json only).
  static bool is_full(const std::filesystem::path& dir);
  void set_full();
  bool full() const { return full_; }

  // Opens the folder's record and log; the source is opened (and a hub
  // revision pinned) on the first fetch, not before.
  RemoteMirror(std::filesystem::path dir, EnvLookup env = process_env, RetryPolicy retry = {});
  ~RemoteMirror();
  // The mirror of `dir` this process has open, or a new one: one per folder
  // and process, so that readers and warm-up see what the others fetched.
  static std::shared_ptr<RemoteMirror> open_shared(const std::filesystem::path& dir);

  const std::string& source() const { return source_; }
  const std::map<std::string, RemoteFileInfo>& files() const { return files_; }
  // Whether fetched ranges are checked against published block sums.
  bool checks_blocks() const { return sums_.has_value(); }
  // Asks for bytes [offset, offset + length) of `file` (a name in files();
  // any other file is on the drive whole): true when they are present
  // already (`done` is not called); otherwise they are fetched and `done`
  // runs on the mirror's thread once they are present ("") or could not be
  // fetched (the error). `done` must not call into the mirror. Thread-safe.
  // `id` (when given) names the wait for reprioritize() and withdraw().
  bool request(const std::string& file, uint64_t offset, uint64_t length, FetchPriority priority,
               std::function<void(const std::string& error)> done, uint64_t* id = nullptr);
  // A wait changes priority (a guess now read), or ends now with "withdrawn"
  // (a guess given up; pieces in flight still land). Unknown ids: nothing.
  void reprioritize(uint64_t id, FetchPriority priority);
  void withdraw(uint64_t id);
  // Records a range written by other means (a small file downloaded whole).
  void record_present(const std::string& file, uint64_t offset, uint64_t length);
  // The same, waiting; throws the error.
  void ensure(const std::string& file, uint64_t offset, uint64_t length);
  struct Range {
    std::string file;
    uint64_t offset = 0, length = 0;
  };
  // All of them, fetched together; `progress` gets each range's length as
  // it becomes present (on this thread). `stop` is asked every 50 ms while
  // waiting: once it says so, Background requests are dropped
  // (drop_background) and false is returned when every range has ended.
  // Once every range has ended, throws the first error, if any ("stopped"
  // is none).
  bool ensure_all(std::span<const Range> ranges, FetchPriority priority = FetchPriority::Demand,
                  const std::function<void(uint64_t bytes)>& progress = {}, const std::function<bool()>& stop = {});
  // Requests in flight at once (default 8).
  void set_connections(int n);
  // Background fetches at most this fast in all (0: no limit), shared
  // evenly by the requests in flight.
  void set_background_rate(double bytes_per_s);
  // Background requests not fetched yet end now with "stopped" (pieces in
  // flight still land); for a warm-up that gives way.
  void drop_background();
  // What is not on the drive yet, file by file in order.
  std::vector<Range> missing() const;
  bool present(const std::string& file, uint64_t offset, uint64_t length) const;
  // Drops what the log says of `file` (recreated: its bytes are gone).
  void forget(const std::string& file);
  RemoteFetchStats stats() const;

 private:
  using Intervals = std::map<uint64_t, uint64_t>;  // start -> end, disjoint, not touching
  static void add(Intervals& set, uint64_t begin, uint64_t end);
  static void remove(Intervals& set, uint64_t begin, uint64_t end);
  // The first byte from `at` on that none of `sets` holds.
  static uint64_t covered_until(uint64_t at, std::initializer_list<const Intervals*> sets);
  bool present_locked(const std::string& file, uint64_t begin, uint64_t end) const;
  // The log has a lock of its own (log_mu_): it is synced, never under mu_.
  void append_log(const std::string& file, uint64_t offset, uint64_t length);
  void open_log();
  std::unique_ptr<RemoteSource> open_source() const;
  // Asks the source (on the fetching thread, without the lock held).
  void check_unchanged(const std::string& file);

  // A reader's (or warm-up's) wait for a range.
  struct Want {
    std::string file;
    uint64_t begin = 0, end = 0;
    FetchPriority priority = FetchPriority::Demand;
    std::function<void(const std::string&)> done;
    std::chrono::steady_clock::time_point since;
    uint64_t id = 0;
  };
  using Calls = std::vector<std::pair<std::function<void(const std::string&)>, std::string>>;
  // The bytes fetched for a wait: its own, widened to whole blocks where
  // the file has block sums.
  std::pair<uint64_t, uint64_t> fetched_span(const Want& w) const;
  class PieceWriter;
  void fetch_loop();
  std::optional<RangeRequest> next_piece();
  void piece_done(const std::string& file, uint64_t begin, uint64_t end, bool background, std::string error);
  // After a piece of a file with block sums landed: checks the blocks it
  // completed, adds the good ones to `good`; wrong twice, the waits for a
  // block end in `calls`. An error: the drive could not be read.
  std::string check_blocks(const std::string& file, uint64_t begin, uint64_t end, Intervals& good, Calls& calls);
  void fail_wants_locked(const std::function<bool(const Want&)>& which, const std::string& error, Calls& calls);

  std::filesystem::path dir_;
  EnvLookup env_;
  RetryPolicy retry_;
  std::string source_, hf_endpoint_;
  bool complete_ = false, full_ = false;
  nlohmann::json record_;
  std::map<std::string, RemoteFileInfo> files_;
  mutable std::mutex mu_;
  std::map<std::string, Intervals> present_;
  std::unique_ptr<RemoteSource> remote_;
  std::map<std::string, bool> checked_;  // files checked against the source this run
  std::mutex log_mu_;
  int log_fd_ = -1;
  RemoteFetchStats stats_;

  // The fetching thread's (started at the first range not present).
  std::list<Want> wants_;
  std::map<std::string, Intervals> in_flight_;
  std::optional<BlockSums> sums_;
  // Landed and synced, not checked yet: the rest of their block is coming.
  std::map<std::string, Intervals> landed_;
  std::map<std::pair<std::string, uint64_t>, int> bad_blocks_;  // (file, block) -> wrong answers in a row
  std::map<std::string, std::unique_ptr<PieceWriter>> writers_;  // touched by the fetching thread only
  int connections_ = 8;
  double background_rate_ = 0;
  uint64_t background_handed_ = 0;  // bytes of background pieces handed out since the rate was set
  std::chrono::steady_clock::time_point background_since_;
  int pieces_in_flight_ = 0, background_in_flight_ = 0;
  uint64_t next_want_id_ = 1;
  std::chrono::steady_clock::time_point busy_since_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread fetcher_;
};

}  // namespace strata
