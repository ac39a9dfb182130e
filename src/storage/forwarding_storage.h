#pragma once
// A Storage that hands every call to another one: the base of storages that
// change a few calls and pass the rest through (fault injection in tests,
// a streaming install's range filling). The inner storage is reset first
// when a subclass needs it gone before its own members (it drains its reads).
#include <memory>

#include "storage/storage.h"

namespace strata {

class ForwardingStorage : public Storage {
 public:
  explicit ForwardingStorage(std::unique_ptr<Storage> inner) : inner_(std::move(inner)) {}

  Storage& inner() { return *inner_; }

  FileId open(const std::filesystem::path& path, OpenMode mode = OpenMode::Auto) override {
    return inner_->open(path, mode);
  }
  FileInfo file(FileId id) const override { return inner_->file(id); }
  std::vector<DriveInfo> drives() const override { return inner_->drives(); }
  void submit(std::span<const Extent> extents) override { inner_->submit(extents); }
  size_t poll(std::vector<Completion>& out) override { return inner_->poll(out); }
  size_t wait(std::vector<Completion>& out, size_t min_count = 1,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) override {
    return inner_->wait(out, min_count, timeout);
  }
  size_t pending() const override { return inner_->pending(); }
  size_t cancel(std::span<const uint64_t> tags) override { return inner_->cancel(tags); }
  void promote(std::span<const uint64_t> tags) override { inner_->promote(tags); }
  bool register_buffers(std::span<const BufferRegion> regions) override { return inner_->register_buffers(regions); }
  std::string_view backend() const override { return inner_->backend(); }
  unsigned queue_depth() const override { return inner_->queue_depth(); }
  std::vector<std::string> notes() const override { return inner_->notes(); }

 protected:
  std::unique_ptr<Storage> inner_;
};

}  // namespace strata
