#pragma once
// Streaming output for synth: a file is a list of segments (header bytes,
// tensor data, zero padding); worker threads generate consecutive 8 MiB
// pieces of the file straight into aligned buffers, and the calling thread
// writes them in order with O_DIRECT (when the file system allows it), so
// the bytes are copied nowhere, memory stays at a few buffers, the page
// cache is neither filled nor waited on, and the time is the disk's.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "synth/synth.h"
#include "util/progress.h"

namespace strata::synth {

struct Segment {
  enum class Kind { Bytes, Zeros, Tensor };
  Kind kind = Kind::Zeros;
  uint64_t offset = 0;  // in the file
  uint64_t size = 0;
  std::string bytes;  // Kind::Bytes
  size_t tensor = 0;  // Kind::Tensor: index into the tensor list
};

struct FileLayout {
  std::vector<Segment> segments;  // contiguous, in file order
  uint64_t size = 0;

  void add_bytes(std::string b);
  void add_zeros(uint64_t n);
  void add_tensor(size_t index, uint64_t nbytes);
};

using strata::Progress;

// Writes `layout` to <path>.partial, syncs it and renames it to `path`; on
// failure the partial file is removed and a strata::Error names the path.
void write_file(const std::filesystem::path& path, const FileLayout& layout, const std::vector<TensorSpec>& tensors,
                uint64_t seed, int threads, Progress& progress);

constexpr uint64_t kBufferBytes = 8u << 20;    // one piece of the file, one write
constexpr uint64_t kGenChunkBytes = 1u << 20;  // the generator's fixed chunking of a tensor

}  // namespace strata::synth
