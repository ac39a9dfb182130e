#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "util/error.h"
#include "util/mapped_file_guard.h"

namespace strata {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<const uint8_t*, const MappedFile*> by_base;  // mapping start -> file
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::optional<FileLocation> locate_mapped(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_base.upper_bound(b);
  if (it == r.by_base.begin()) return std::nullopt;
  --it;
  const MappedFile* f = it->second;
  if (b >= f->data() + f->size()) return std::nullopt;
  return FileLocation{f->path(), static_cast<uint64_t>(b - f->data())};
}

void advise_random_all_mapped() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& [base, file] : r.by_base) file->advise_random();
}

namespace {

// madvise wants a page-aligned start: advise from the page holding p.
void advise_range(const void* p, size_t n, int advice) {
  const auto a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  const auto e = reinterpret_cast<uintptr_t>(p) + n;
  ::madvise(reinterpret_cast<void*>(a), e - a, advice);
}

}  // namespace

void advise_willneed(const void* p, size_t n) { advise_range(p, n, MADV_WILLNEED); }

void advise_random(const void* p, size_t n) { advise_range(p, n, MADV_RANDOM); }

void release_mapped_pages(const void* p, size_t n) {
  if (n == 0 || !locate_mapped(p) || !locate_mapped(static_cast<const uint8_t*>(p) + n - 1)) return;
  const auto a = (reinterpret_cast<uintptr_t>(p) + 4095) & ~uintptr_t{4095};
  const auto e = (reinterpret_cast<uintptr_t>(p) + n) & ~uintptr_t{4095};
  if (e > a) ::madvise(reinterpret_cast<void*>(a), e - a, MADV_DONTNEED);
}

void release_mapped_pages_touched(const void* p, size_t n, std::span<const uint8_t> within) {
  if (n == 0) return;
  const auto* b = static_cast<const uint8_t*>(p);
  uintptr_t begin = 0, end = 0;  // the mapping that holds [p, p + n)
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.by_base.upper_bound(b);
    if (it == r.by_base.begin()) return;
    --it;
    const MappedFile* f = it->second;
    if (b + n > f->data() + f->size()) return;
    begin = reinterpret_cast<uintptr_t>(f->data());  // page-aligned: mmap's
    end = (reinterpret_cast<uintptr_t>(f->data()) + f->size() + 4095) & ~uintptr_t{4095};
  }
  if (!within.empty()) {
    begin = std::max(begin, reinterpret_cast<uintptr_t>(within.data()) & ~uintptr_t{4095});
    end = std::min(end, (reinterpret_cast<uintptr_t>(within.data() + within.size()) + 4095) & ~uintptr_t{4095});
  }
  constexpr uintptr_t kFaultAround = 64 * 1024;
  const auto a = std::max(begin, reinterpret_cast<uintptr_t>(p) & ~(kFaultAround - 1));
  const auto e = std::min(end, (reinterpret_cast<uintptr_t>(p) + n + kFaultAround - 1) & ~(kFaultAround - 1));
  if (e > a) ::madvise(reinterpret_cast<void*>(a), e - a, MADV_DONTNEED);
}

void MappedFile::advise_random() const {
  if (data_) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_RANDOM);
}

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(path_ + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path_ + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw Error(path_ + ": cannot map: " + std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.by_base[data_] = this;
  }
  detail::guard_mapping(data_, size_, path_);
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (!data_) return;
  detail::unguard_mapping(data_);
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.by_base.erase(data_);
  }
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

uint64_t resident_mapped_file_bytes() {
  std::ifstream smaps("/proc/self/smaps");
  uint64_t kib = 0;
  bool ours = false;  // the mapping whose fields follow is a MappedFile's
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 && line.find('-') < line.find(' '))
      ours = locate_mapped(reinterpret_cast<const void*>(start)).has_value();
    else if (ours && line.rfind("Rss:", 0) == 0)
      kib += std::strtoull(line.c_str() + 4, nullptr, 10);
  }
  return kib * 1024;
}

}  // namespace strata
