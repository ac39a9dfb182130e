#include "storage/fault_injecting_storage.h"

#include <algorithm>
#include <thread>

#include "util/error.h"

namespace strata {

FaultInjectingStorage::FaultInjectingStorage(std::unique_ptr<Storage> inner) : ForwardingStorage(std::move(inner)) {
  engine_ = dynamic_cast<detail::StorageEngine*>(inner_.get());
  if (!engine_) throw Error("fault injection needs an io_uring or pread storage underneath");
  engine_->set_fault_hook(this);
}

FaultInjectingStorage::~FaultInjectingStorage() {
  // The inner storage drains its reads (which call our hook) before it goes.
  inner_.reset();
}

void FaultInjectingStorage::short_reads(uint64_t max_bytes, int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  short_max_ = max_bytes;
  short_count_ = count;
}

void FaultInjectingStorage::fail_tag(uint64_t tag, int err, int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_.push_back({tag, 0, 0, 0, err, count});
}

void FaultInjectingStorage::fail_range(FileId file, uint64_t offset, uint64_t length, int err, int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_.push_back({std::nullopt, file, offset, length, err, count});
}

void FaultInjectingStorage::corrupt(FileId file, uint64_t offset, uint8_t mask) {
  std::lock_guard<std::mutex> lock(mutex_);
  corrupt_.push_back({file, offset, mask});
}

void FaultInjectingStorage::slow_drive(uint32_t drive, std::chrono::microseconds delay) {
  std::lock_guard<std::mutex> lock(mutex_);
  slow_.emplace_back(drive, delay);
}

void FaultInjectingStorage::random_faults(const RandomFaults& faults) {
  std::lock_guard<std::mutex> lock(mutex_);
  random_ = faults;
  rng_.seed(faults.seed);
}

void FaultInjectingStorage::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  random_ = {};
  short_max_ = 0;
  short_count_ = 0;
  errors_.clear();
  corrupt_.clear();
  slow_.clear();
}

FaultStats FaultInjectingStorage::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void FaultInjectingStorage::before_issue(detail::RawRead& raw, const Extent& extent) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.reads;
  for (auto& rule : errors_) {
    if (rule.count == 0) continue;
    bool hit = rule.tag ? *rule.tag == extent.tag
                        : raw.file == rule.file && raw.offset < rule.offset + rule.length &&
                              rule.offset < raw.offset + raw.len;
    if (!hit) continue;
    if (rule.count > 0) --rule.count;
    raw.inject_errno = rule.err;
    ++stats_.errors;
    return;
  }
  if (one_in(random_.error_one_in)) {
    raw.inject_errno = random_.error;
    ++stats_.errors;
    return;
  }
  // A random shorter length: at least a byte (a 4 KiB page on O_DIRECT files).
  if (raw.len > (raw.direct ? kIoAlign : 1) && one_in(random_.short_one_in)) {
    const uint64_t unit = raw.direct ? kIoAlign : 1;
    raw.len = (1 + rng_() % (raw.len / unit - (raw.len % unit == 0))) * unit;
    ++stats_.short_reads;
  }
  if (short_max_ > 0 && short_count_ != 0 && raw.len > short_max_) {
    uint64_t n = short_max_;
    if (raw.direct) n = std::max<uint64_t>(align_down(n), kIoAlign);
    if (n < raw.len) {
      raw.len = n;
      ++stats_.short_reads;
      if (short_count_ > 0) --short_count_;
    }
  }
}

void FaultInjectingStorage::after_complete(const detail::RawRead& raw, const Extent&, int64_t res) {
  std::chrono::microseconds delay{0};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (res > 0 && !raw.inject_errno) {
      for (const auto& c : corrupt_) {
        if (c.file == raw.file && c.offset >= raw.offset && c.offset < raw.offset + static_cast<uint64_t>(res)) {
          raw.buf[c.offset - raw.offset] ^= c.mask;
          ++stats_.corruptions;
        }
      }
    }
    if (res > 0 && !raw.inject_errno && one_in(random_.corrupt_one_in)) {
      raw.buf[rng_() % static_cast<uint64_t>(res)] ^= static_cast<uint8_t>(1 + rng_() % 255);
      ++stats_.corruptions;
    }
    for (const auto& [drive, d] : slow_)
      if (drive == raw.drive) delay = std::max(delay, d);
    if (random_.max_delay.count() > 0 && one_in(random_.delay_one_in))
      delay = std::max(delay, std::chrono::microseconds(1 + rng_() % random_.max_delay.count()));
    if (delay.count() > 0) ++stats_.delays;
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
}

}  // namespace strata
