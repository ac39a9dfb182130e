#pragma once
// SHA-256 (OpenSSL's EVP), the hash hubs publish for LFS files.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace strata {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const uint8_t> bytes);
  std::string hex();  // once, at the end

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// The hash of a whole file, read in order; throws strata::Error naming the
// file when it cannot be read.
std::string sha256_of_file(const std::filesystem::path& path);

}  // namespace strata
