#pragma once
// Reader for one .safetensors file: an 8-byte little-endian header length, a
// JSON header describing each tensor, then the raw tensor bytes. The file is
// memory-mapped and tensors are views into the mapping (nothing is copied),
// so the SafetensorsFile must outlive every TensorView it hands out.
//
// Everything in the header is validated up front; a bad file is reported as
// a strata::Error "<path>: <problem>" and never reaches the kernels.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/tensor.h"
#include "util/mapped_file.h"

namespace strata {

class SafetensorsFile {
 public:
  // Headers larger than this are rejected as corrupt rather than parsed.
  static constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;

  explicit SafetensorsFile(const std::filesystem::path& path);
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& path() const { return file_->path(); }
  // Sorted by name (JSON objects carry no reliable order).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr if absent.
  const TensorView* find(const std::string& name) const;
  // The optional "__metadata__" string-to-string map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<MappedFile> file_;  // owns the bytes every TensorView points into
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// 'name' for error messages, with control characters escaped so that a
// hostile tensor name cannot break the one-line message convention.
std::string quote_name(std::string_view name);

// A safetensors file's header length from its first 8 bytes (little-endian),
// for a file of `file_size` bytes not at hand (a remote one): throws
// strata::Error "<where>: ..." when it is past the limit or the file.
uint64_t safetensors_header_length(const uint8_t* first8, uint64_t file_size, const std::string& where);

}  // namespace strata
