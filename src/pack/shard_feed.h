#pragma once
// The safetensors shards of a remote checkpoint, arriving while `strata
// pull --full` packs them (pack/pull.h), so that the source never sits on
// the disk whole beside its pack.
//
// Each shard is a sparse file of its full size in the staging folder, its
// header fetched first (by range) so that the checkpoint opens before its
// bytes are there. The shards are then downloaded in order, `connections`
// at once, each over one connection from its start, hashed on the way
// (sha256, where the source publishes it, checked when the shard is whole).
// The packer waits for the shards a layer's experts are in (wait_for) and
// then frees their ranges (release: holes punched, the file keeps its size),
// so what stays on disk is the trunk's share of the shards and the shards in
// flight: downloads run at most `connections` shards ahead of the furthest
// one the packer has asked for.
//
// Crash safety: shards.json beside DIR (DIR is the folder the shards are
// in; the record stays out of it, whose other files the pack copies) records each shard's bytes known to be on
// disk (synced every 64 MiB) and whether it is whole and verified. A re-run
// re-hashes what a shard has and continues after it; a whole shard is not
// fetched again. Ranges punched by an earlier run are fetched again (by
// range) if the packer asks for them once more (it started over).
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "remote/block_sums.h"
#include "remote/source.h"

namespace strata {

struct FeedShard {
  std::string name;
  RemoteFileInfo info;
};

// A byte range of one shard (a tensor's bytes).
struct ShardRange {
  std::string shard;
  uint64_t offset = 0, length = 0;
};

class ShardFeed {
 public:
  ShardFeed(const RemoteSource& source, std::vector<FeedShard> shards, std::filesystem::path dir, int connections,
            std::function<void(uint64_t)> progress);
  ~ShardFeed();  // stops the downloads and waits for them
  ShardFeed(const ShardFeed&) = delete;
  ShardFeed& operator=(const ShardFeed&) = delete;

  // Shards these sums describe are checked against them once whole (before
  // any of them is packed); a bad block sets the shard back to it and is
  // the run's error. Call before start(); `sums` outlives the feed.
  void check_blocks(const BlockSums* sums) { sums_ = sums; }
  // Every shard at its size with its header in place (fetched now if not).
  void prepare();
  void start();
  // Shards not whole yet whose headers were not checked against block
  // sums start over in the next run (their headers may be what is wrong);
  // how many. Before start().
  int forget_partial();
  // Returns once the shards holding `ranges` are whole and verified, and
  // `ranges` are on disk; rethrows a download's error.
  void wait_for(const std::vector<ShardRange>& ranges);
  void wait_all();
  // Frees `ranges` on disk (they are packed).
  void release(const std::vector<ShardRange>& ranges);
  uint64_t fetched_bytes() const;

 private:
  struct State {
    uint64_t have = 0;  // bytes from the start known to be on disk
    bool whole = false;
    std::vector<std::pair<uint64_t, uint64_t>> punched;  // released ranges
  };
  void download(size_t i, RemoteSource& conn);
  void worker(RemoteSource& conn);
  State& state_locked(const std::string& shard);
  void save_locked();
  std::filesystem::path path(const std::string& shard) const { return dir_ / shard; }

  std::vector<FeedShard> shards_;
  std::filesystem::path dir_, journal_;
  int connections_;
  std::function<void(uint64_t)> progress_;
  RemoteSource source_;
  const BlockSums* sums_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, State> state_;
  size_t next_ = 0;
  // The furthest shard the packer has waited for: downloads run at most
  // `connections` shards past it, so the source does not pile up on disk
  // while the packer is the slower one.
  size_t wanted_ = 0;
  std::vector<std::unique_ptr<RemoteSource>> conns_;
  bool stop_ = false;
  std::exception_ptr error_;
  uint64_t fetched_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace strata
