#pragma once
// What the storage and probe tests share: a scratch folder on a disk
// filesystem (O_DIRECT works there) and files of pseudo-random bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "storage/aligned_buffer.h"

namespace strata::storage_test {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    // Under /var/tmp (a disk filesystem, like the model drives) so O_DIRECT works;
    // /tmp may be tmpfs, which refuses it.
    std::string tmpl = (fs::exists("/var/tmp") ? std::string("/var/tmp") : fs::temp_directory_path().string()) +
                       "/strata-storage-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A file of `size` pseudo-random bytes (size deliberately not a 4 KiB multiple).
inline fs::path make_file(const fs::path& dir, const std::string& name, size_t size, uint64_t seed) {
  std::vector<uint8_t> data(align_up(size, 8));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < data.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  data.resize(size);
  fs::path p = dir / name;
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), data.size());
  return p;
}

}  // namespace strata::storage_test
