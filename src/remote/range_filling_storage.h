#pragma once
// The Storage the loader hands the expert cache for a streaming install
// (remote/remote_mirror.h): an extent whose file range is not on the drive
// yet is held back until the mirror has fetched it, then read from the
// drive; the caller's thread never waits on the network in submit(), so
// guesses of the next layer's experts fetch ahead like any prefetch (as
// Guess requests: after reads, withdrawn when cancelled, raised to reads
// when promoted).
#include <memory>
#include <mutex>
#include <map>
#include <string>
#include <vector>

#include "remote/remote_mirror.h"
#include "storage/forwarding_storage.h"

namespace strata {

// The Storage for a mirror's files: reads of ranges that are not present
// yet wait (off the caller's thread) until the mirror has fetched them. A
// fetch that fails completes its extent with EIO and the error's message
// (never an exception out of submit()). Everything else is the inner
// storage's.
class RangeFillingStorage final : public ForwardingStorage {
 public:
  RangeFillingStorage(std::unique_ptr<Storage> inner, std::shared_ptr<RemoteMirror> mirror);
  ~RangeFillingStorage() override;

  FileId open(const std::filesystem::path& path, OpenMode mode = OpenMode::Auto) override;
  // The inner storage's drives, and the source as one more ("remote
  // SOURCE": bytes fetched, time with a fetch in flight, reads that waited
  // for a fetch and their summed wait, reads served locally), so that a
  // run's stats and /metrics say what came over the network.
  std::vector<DriveInfo> drives() const override;
  void submit(std::span<const Extent> extents) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t wait(std::vector<Completion>& out, size_t min_count = 1,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) override;
  size_t pending() const override;
  // Extents still waiting for a fetch are cancelled here (ECANCELED when
  // the fetch ends; the fetched bytes stay on the drive), the rest below.
  size_t cancel(std::span<const uint64_t> tags) override;
  void promote(std::span<const uint64_t> tags) override;

 private:
  // Extents waiting for the mirror, shared with its fetching thread's
  // callbacks (which may outlive this storage).
  struct Inbox;
  std::shared_ptr<RemoteMirror> mirror_;
  std::shared_ptr<Inbox> inbox_;
  mutable std::mutex mu_;
  std::map<FileId, std::string> names_;  // files of the mirror, by id
  // Hands fetched extents to the inner storage and failed ones to `out`.
  size_t drain(std::vector<Completion>& out);
};

}  // namespace strata
