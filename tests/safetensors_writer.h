#pragma once
// Test helper (header-only): builds safetensors files byte by byte so tests
// need no checked-in binaries, plus a self-deleting temporary directory.
// safetensors_raw() wraps an arbitrary header, for writing corrupt variants.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace strata::testfiles {

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian contents
};

// The raw bytes of a vector of trivially copyable values.
template <class T>
std::string raw_bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// 8-byte little-endian length (or `length_override`), header, data.
inline std::string safetensors_raw(std::string_view header, std::string_view data,
                                   std::optional<uint64_t> length_override = std::nullopt) {
  uint64_t n = length_override.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  return out;
}

// A valid file holding `tensors` back to back in the given order. The header
// is padded with spaces to a multiple of `align` bytes, as the reference
// writer does so that tensor data is aligned.
inline std::string safetensors_bytes(const std::vector<TensorSpec>& tensors,
                                     const std::map<std::string, std::string>& metadata = {},
                                     size_t align = 8) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const TensorSpec& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump();
  if (align > 1) text.append((align - (8 + text.size()) % align) % align, ' ');
  return safetensors_raw(text, data);
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  explicit TempDir(std::string_view tag = "strata-test") {
    std::random_device rd;
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto name = std::string(tag) + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
      path_ = std::filesystem::temp_directory_path() / name;
      if (std::filesystem::create_directory(path_)) return;
    }
    throw std::runtime_error("cannot create a temporary directory");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  // Writes `bytes` to path()/name and returns the full path.
  std::filesystem::path write(std::string_view name, std::string_view bytes) const {
    auto p = path_ / name;
    write_file(p, bytes);
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace strata::testfiles
