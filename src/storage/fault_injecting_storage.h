#pragma once
// A Storage for tests that misbehaves on request: short reads, errors on
// chosen extents or byte ranges, corrupted bytes, a slow drive. It wraps a
// real backend (io_uring or pread) and hooks in *below* the shared logic, so
// short reads exercise the real resubmission path and corrupt bytes the real
// checksum path. Every rule is thread-safe and can be changed between reads.
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "storage/forwarding_storage.h"
#include "storage/storage_engine.h"

namespace strata {

// Faults drawn at random, RocksDB-style (FaultInjectionTestFS's
// SetRandomReadError(one_in)): each raw read, by a generator seeded with
// `seed`, fails with `error` one time in `error_one_in`, asks for a random
// shorter length one time in `short_one_in`, gets one random byte of what
// landed flipped one time in `corrupt_one_in`, and is held back for up to
// `max_delay` one time in `delay_one_in` (0: never). The draws are in the
// order the reads reach the hook, which the drives' timing decides: a seed
// gives the same kinds and rates of faults, not the same reads hit.
struct RandomFaults {
  uint64_t seed = 0;
  unsigned error_one_in = 0;
  int error = EIO;
  unsigned short_one_in = 0;
  unsigned corrupt_one_in = 0;
  unsigned delay_one_in = 0;
  std::chrono::microseconds max_delay{0};
};

struct FaultStats {
  uint64_t reads = 0;          // raw reads seen
  uint64_t short_reads = 0;    // reads shortened
  uint64_t errors = 0;         // reads failed on purpose
  uint64_t corruptions = 0;    // bytes flipped
  uint64_t delays = 0;         // reads slowed
};

class FaultInjectingStorage final : public ForwardingStorage, private detail::FaultHook {
 public:
  // `inner` must be an IoUringStorage or PreadPoolStorage (what make_storage returns).
  explicit FaultInjectingStorage(std::unique_ptr<Storage> inner);
  ~FaultInjectingStorage() override;

  // Each raw read asks for at most `max_bytes` (on O_DIRECT files rounded down
  // to 4 KiB, at least 4 KiB), for the next `count` reads (-1: always).
  void short_reads(uint64_t max_bytes, int count = -1);
  // Reads for the extent with this tag fail with `err`, `count` times (-1: always).
  void fail_tag(uint64_t tag, int err = EIO, int count = -1);
  // Reads touching file bytes [offset, offset+length) fail with `err`.
  void fail_range(FileId file, uint64_t offset, uint64_t length, int err = EIO, int count = -1);
  // Whenever file byte `offset` lands in memory it is XORed with `mask`.
  void corrupt(FileId file, uint64_t offset, uint8_t mask = 0x5a);
  // Every read on this drive takes at least `delay` longer (the backend thread
  // sleeps before reporting it, so the drive's throughput drops too).
  void slow_drive(uint32_t drive, std::chrono::microseconds delay);
  // Replaces the random faults (RandomFaults{} turns them off).
  void random_faults(const RandomFaults& faults);
  void clear();
  FaultStats stats() const;

  // Every Storage call is forwarded to the inner backend (ForwardingStorage).

 private:
  void before_issue(detail::RawRead& raw, const Extent& extent) override;
  void after_complete(const detail::RawRead& raw, const Extent& extent, int64_t res) override;

  struct ErrorRule {
    std::optional<uint64_t> tag;
    FileId file = 0;
    uint64_t offset = 0, length = 0;
    int err = EIO;
    int count = -1;
  };
  struct CorruptRule {
    FileId file;
    uint64_t offset;
    uint8_t mask;
  };

  detail::StorageEngine* engine_;
  mutable std::mutex mutex_;
  uint64_t short_max_ = 0;
  int short_count_ = 0;
  std::vector<ErrorRule> errors_;
  std::vector<CorruptRule> corrupt_;
  std::vector<std::pair<uint32_t, std::chrono::microseconds>> slow_;
  RandomFaults random_;
  std::mt19937_64 rng_;
  // A draw of one time in `one_in` (never when 0). Call with mutex_ held.
  bool one_in(unsigned one_in) { return one_in > 0 && rng_() % one_in == 0; }
  FaultStats stats_;
};

}  // namespace strata
