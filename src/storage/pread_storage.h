#pragma once
// Storage over plain pread(2): per drive, `queue_depth` threads each blocked in
// one pread at a time, so a drive sees the same depth as with io_uring. Used
// where io_uring is refused (seccomp, io_uring_disabled) or STRATA_IO=pread.
// Same alignment rule, resubmission and errors as every Storage.
#include <memory>
#include <mutex>
#include <vector>

#include "storage/storage_engine.h"

namespace strata {

class PreadPoolStorage final : public detail::StorageEngine {
 public:
  explicit PreadPoolStorage(const StorageOptions& options = {});
  ~PreadPoolStorage() override;

  std::string_view backend() const override { return "pread"; }

 protected:
  void attach_drive(uint32_t drive) override;
  void issue(uint32_t drive, std::span<detail::RawRead* const> reads) override;

 private:
  class Workers;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Workers>> drives_;  // index = drive
};

}  // namespace strata
