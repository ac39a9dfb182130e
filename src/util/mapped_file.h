#pragma once
// A read-only memory mapping of a whole file. Checkpoint tensors are views
// into these mappings, so weights are paged in lazily by the kernel and never
// copied into RAM all at once.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace strata {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
