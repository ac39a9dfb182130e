#include "pack/source_signature.h"

#include <algorithm>
#include <fstream>

#include "formats/gguf.h"
#include "storage/checksum.h"
#include "util/error.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kWholeFileBytes = uint64_t{64} << 20;
constexpr uint64_t kSampleBytes = 4096;

// Parts hashed one by one, then the list of their hashes.
class Digest {
 public:
  void add(std::string_view bytes) {
    add_u64(bytes.size());
    add_u64(xxh3_64(bytes.data(), bytes.size()));
  }
  void add_u64(uint64_t v) { parts_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  uint64_t value() const { return xxh3_64(parts_.data(), parts_.size()); }

 private:
  std::string parts_;
};

std::string read_range(const fs::path& p, uint64_t offset, uint64_t n) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  std::string s(n, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(s.data(), static_cast<std::streamsize>(n));
  if (static_cast<uint64_t>(in.gcount()) != n) throw Error(p.string() + ": cannot read");
  return s;
}

// The bytes of a file that say what it holds: a tensor file's header, the
// whole of a small file, the ends of a large one.
void add_file(Digest& d, const fs::path& f, const Checkpoint& ck) {
  const uint64_t size = fs::file_size(f);
  d.add(f.filename().string());
  d.add_u64(size);
  if (ck.gguf && fs::equivalent(f, ck.gguf->path())) {
    d.add(read_range(f, 0, std::min(size, ck.gguf->data_offset())));
  } else if (f.extension() == ".safetensors" && size >= 8) {
    const std::string len = read_range(f, 0, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(len[i]);
    d.add(read_range(f, 0, std::min(size, 8 + std::min(n, size))));
  } else if (size <= kWholeFileBytes) {
    d.add(read_range(f, 0, size));
  } else {
    d.add(read_range(f, 0, kSampleBytes));
    d.add(read_range(f, size - kSampleBytes, kSampleBytes));
  }
}

void add_samples(Digest& d, const TensorView& t) {
  const auto* p = reinterpret_cast<const char*>(t.data);
  if (t.nbytes <= 3 * kSampleBytes) {
    d.add(std::string_view(p, t.nbytes));
    return;
  }
  d.add(std::string_view(p, kSampleBytes));
  d.add(std::string_view(p + t.nbytes / 2, kSampleBytes));
  d.add(std::string_view(p + t.nbytes - kSampleBytes, kSampleBytes));
}

}  // namespace

uint64_t pack_signature(const Checkpoint& ck, const std::vector<std::string>& options, bool sample_trunk) {
  Digest d;
  d.add(kPackFormat);
  for (const std::string& o : options) d.add(o);
  std::vector<fs::path> files;
  if (fs::is_regular_file(ck.path)) {
    files.push_back(ck.path);
  } else {
    for (const auto& e : fs::directory_iterator(ck.path))
      if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) add_file(d, f, ck);
  std::vector<std::string> names = ck.source->names();
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (is_streamed_expert_tensor(name, ck.config)) continue;
    const TensorView& t = ck.source->get(name);
    d.add(name);
    d.add(dtype_name(t.dtype));
    for (int64_t s : t.shape) d.add_u64(static_cast<uint64_t>(s));
    if (sample_trunk) add_samples(d, t);
  }
  return d.value();
}

}  // namespace strata
