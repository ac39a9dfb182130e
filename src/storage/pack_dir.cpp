#include "storage/pack_dir.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "storage/atomic_file.h"
#include "storage/checksum.h"
#include "util/checked_math.h"
#include "util/error.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kHeader = "strata-trunk-checksums 1 ";

class Fd {
 public:
  explicit Fd(const fs::path& p) : path_(p.string()), fd_(::open(path_.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw Error(path_ + ": cannot stat: " + std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  std::string path_;
  int fd_;
};

// The xxh3 of [offset, offset + length) of an open file, through a mapping
// of just that range (page-cache backed: nothing stays in this process).
uint64_t hash_range(int fd, const std::string& path, uint64_t offset, uint64_t length) {
  if (length == 0) return xxh3_64(nullptr, 0);
  void* p = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) throw Error(path + ": cannot map bytes " + std::to_string(offset) + ": " + std::strerror(errno));
  ::madvise(p, length, MADV_SEQUENTIAL);
  ::madvise(p, length, MADV_WILLNEED);
  const uint64_t h = xxh3_64(p, length);
  ::munmap(p, length);
  return h;
}

uint64_t chunk_count(uint64_t bytes, uint64_t chunk) { return bytes / chunk + (bytes % chunk != 0); }

// Runs f(i) for i < n on all cores; the first error is rethrown after all
// threads stop (the others skip what is left).
template <class F>
void for_each_parallel(size_t n, F&& f) {
  const size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; !failed && (i = next++) < n;) {
      try {
        f(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Files verified by this process, by what would change if they were rewritten.
using FileKey = std::tuple<std::string, dev_t, ino_t, off_t, int64_t, int64_t>;

struct Verified {
  std::mutex mutex;
  std::set<FileKey> files;
};

Verified& verified() {
  static Verified v;
  return v;
}

std::optional<FileKey> key_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return FileKey{p.string(), st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
}

bool is_digits(const std::string& s) {
  return !s.empty() && s.size() <= 19 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A name inside the pack directory: relative, without "..".
bool inside_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\n') != std::string::npos) return false;
  for (const auto& part : fs::path(name))
    if (part == ".." || part == ".") return false;
  return true;
}

}  // namespace

PackState pack_state(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kPackManifest, ec)) return PackState::Complete;
  if (fs::exists(dir / kPackProgress, ec)) return PackState::Interrupted;
  return PackState::NotAPack;
}

std::string interrupted_pack_message(const fs::path& dir) {
  return dir.string() + ": incomplete pack (pack was interrupted); run strata pack again to resume";
}

FileChecksum checksum_file(const fs::path& path, const std::string& name, uint64_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes % 4096 != 0) throw Error("internal: checksum chunks must be whole pages");
  const Fd fd(path);
  FileChecksum f;
  f.name = name;
  f.bytes = fd.size();
  f.chunks.resize(chunk_count(f.bytes, chunk_bytes));
  for_each_parallel(f.chunks.size(), [&](size_t i) {
    const uint64_t at = i * chunk_bytes;
    f.chunks[i] = hash_range(fd.get(), path.string(), at, std::min(chunk_bytes, f.bytes - at));
  });
  return f;
}

void write_trunk_checksums(const fs::path& path, const TrunkChecksums& sums) {
  std::string text = kHeader + std::to_string(sums.chunk_bytes) + "\n";
  for (const FileChecksum& f : sums.files) {
    if (!inside_name(f.name)) throw Error(f.name + ": cannot be listed in " + path.string());
    std::string hashes;
    for (uint64_t h : f.chunks) hashes += (hashes.empty() ? "" : ",") + hash_digits(h);
    text += std::to_string(f.bytes) + " " + (hashes.empty() ? "-" : hashes) + " " + f.name + "\n";
  }
  text += "end " + hash_digits(xxh3_64(text.data(), text.size())) + "\n";
  write_file_atomically(path, text);
}

TrunkChecksums read_trunk_checksums(const fs::path& path) {
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + ": cannot open");
  // The list is a line per trunk file: small. A larger file is not one.
  std::string text;
  text.resize(16 << 20);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (!in.eof()) throw Error(where + ": too large to be a trunk checksum list (damaged pack)");
  const std::string damaged = where + ": damaged (";
  // The last line: "end " and 16 hex digits.
  const size_t end_at = text.size() >= 22 ? text.size() - 21 : 0;
  if (end_at == 0 || text[end_at - 1] != '\n' || text.compare(end_at, 4, "end ") != 0 || text.back() != '\n')
    throw Error(damaged + "it does not end with its own checksum); the pack is damaged: pack it again");
  const auto own = parse_hash_digits(text.substr(end_at + 4, 16));
  if (!own || *own != xxh3_64(text.data(), end_at))
    throw Error(damaged + "its own checksum does not match); the pack is damaged: pack it again");
  std::istringstream lines(text.substr(0, end_at));
  std::string line;
  std::getline(lines, line);
  TrunkChecksums sums;
  const std::string chunk = line.rfind(kHeader, 0) == 0 ? line.substr(std::strlen(kHeader)) : "";
  if (!is_digits(chunk)) throw Error(where + ": not a trunk checksum list");
  sums.chunk_bytes = std::stoull(chunk);
  if (sums.chunk_bytes == 0 || sums.chunk_bytes % 4096 != 0 || sums.chunk_bytes > (uint64_t{1} << 40))
    throw Error(where + ": chunk size " + chunk + " is not a whole number of pages");
  while (std::getline(lines, line)) {
    const size_t a = line.find(' '), b = a == std::string::npos ? a : line.find(' ', a + 1);
    if (b == std::string::npos) throw Error(damaged + "line '" + line + "')");
    const std::string bytes = line.substr(0, a), hashes = line.substr(a + 1, b - a - 1);
    FileChecksum f;
    f.name = line.substr(b + 1);
    if (!is_digits(bytes) || !inside_name(f.name)) throw Error(damaged + "line '" + line + "')");
    f.bytes = std::stoull(bytes);
    if (hashes != "-") {
      std::istringstream hs(hashes);
      for (std::string h; std::getline(hs, h, ',');) {
        const auto v = parse_hash_digits(h);
        if (!v) throw Error(damaged + "line '" + line + "')");
        f.chunks.push_back(*v);
      }
    }
    if (f.chunks.size() != chunk_count(f.bytes, sums.chunk_bytes))
      throw Error(damaged + f.name + ": " + std::to_string(f.chunks.size()) + " chunk checksums for " + bytes +
                  " bytes)");
    sums.files.push_back(std::move(f));
  }
  if (sums.files.empty()) throw Error(where + ": lists no files");
  return sums;
}

void verify_trunk_checksums(const fs::path& dir, const TrunkChecksums& sums) {
  struct Task {
    size_t file;
    uint64_t chunk;
  };
  std::vector<std::unique_ptr<Fd>> fds(sums.files.size());
  std::vector<std::optional<FileKey>> keys(sums.files.size());
  std::vector<Task> tasks;
  for (size_t i = 0; i < sums.files.size(); ++i) {
    const FileChecksum& f = sums.files[i];
    const fs::path p = dir / f.name;
    keys[i] = key_of(p);
    {
      std::lock_guard lock(verified().mutex);
      if (keys[i] && verified().files.count(*keys[i])) continue;
    }
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      throw Error(p.string() + ": missing from the pack's trunk; the pack is damaged: pack it again");
    fds[i] = std::make_unique<Fd>(p);
    const uint64_t size = fds[i]->size();
    if (size != f.bytes)
      throw Error(p.string() + ": " + std::to_string(size) + " bytes, but the pack wrote " + std::to_string(f.bytes) +
                  "; the pack is damaged: pack it again");
    for (uint64_t c = 0; c < f.chunks.size(); ++c) tasks.push_back({i, c});
  }
  for_each_parallel(tasks.size(), [&](size_t t) {
    const FileChecksum& f = sums.files[tasks[t].file];
    const uint64_t at = checked_mul(tasks[t].chunk, sums.chunk_bytes, f.name);
    const uint64_t n = std::min(sums.chunk_bytes, f.bytes - at);
    const std::string path = (dir / f.name).string();
    const uint64_t got = hash_range(fds[tasks[t].file]->get(), path, at, n);
    const uint64_t want = f.chunks[tasks[t].chunk];
    if (got != want)
      throw Error(path + " bytes " + std::to_string(at) + "-" + std::to_string(at + n) +
                  ": checksum mismatch (expected " + hash_hex(want) + ", got " + hash_hex(got) +
                  "); the pack's trunk is damaged: pack it again");
  });
  std::lock_guard lock(verified().mutex);
  for (size_t i = 0; i < keys.size(); ++i)
    if (fds[i] && keys[i]) verified().files.insert(*keys[i]);
}

PackTrunk open_pack_trunk(const fs::path& dir) {
  switch (pack_state(dir)) {
    case PackState::Interrupted: throw Error(interrupted_pack_message(dir));
    case PackState::NotAPack: throw Error(dir.string() + ": not a pack (no " + kPackManifest + ")");
    case PackState::Complete: break;
  }
  PackTrunk t;
  std::error_code ec;
  const fs::path sums_path = dir / kTrunkChecksums;
  if (!fs::exists(sums_path, ec)) {
    t.path = fs::exists(dir / "trunk.gguf", ec) ? dir / "trunk.gguf" : dir / "trunk";
    return t;
  }
  const TrunkChecksums sums = read_trunk_checksums(sums_path);
  // The list says which trunk it is: one GGUF file, or a folder.
  const bool gguf = sums.files.size() == 1 && sums.files[0].name == "trunk.gguf";
  for (const FileChecksum& f : sums.files)
    if (!gguf && !f.name.starts_with("trunk/"))
      throw Error(sums_path.string() + ": lists " + f.name + ", which is not in the trunk");
  verify_trunk_checksums(dir, sums);
  t.path = gguf ? dir / "trunk.gguf" : dir / "trunk";
  t.verified = true;
  return t;
}

}  // namespace strata
