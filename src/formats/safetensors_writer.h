#pragma once
// Writes a safetensors file: 8-byte header length, JSON header (padded with
// spaces to 8 bytes so tensor data is aligned, as the reference writer does),
// then the tensors' bytes back to back in the order given. The file appears
// atomically (written as <path>.partial, synced, renamed).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "formats/dtype.h"

namespace strata {

struct SafetensorsOut {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // must stay valid until write_safetensors returns
  size_t nbytes = 0;
};

// Throws strata::Error naming the path on failure (and leaves no file).
// `on_bytes` (optional) is called with the count of each chunk written.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::function<void(uint64_t)>& on_bytes = {});

}  // namespace strata
