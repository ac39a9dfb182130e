#include "storage/storage.h"

#include <cstdlib>

#include "storage/io_uring_storage.h"
#include "storage/pread_storage.h"
#include "util/error.h"

namespace strata {

void Storage::read_all(std::span<const Extent> extents) {
  submit(extents);
  std::vector<Completion> done;
  done.reserve(extents.size());
  while (done.size() < extents.size()) {
    size_t before = done.size();
    wait(done, extents.size() - done.size());
    if (done.size() == before) break;  // nothing outstanding any more (someone else consumed ours)
  }
  for (const auto& c : done)
    if (!c.ok()) throw Error(c.message);
  if (done.size() < extents.size()) throw Error("storage: read_all lost completions to another waiter");
}

std::unique_ptr<Storage> make_storage(const StorageOptions& options) {
  std::string choice = options.backend;
  if (choice.empty()) {
    const char* env = std::getenv("STRATA_IO");
    if (env && *env) choice = env;
  }
  if (choice == "pread") return std::make_unique<PreadPoolStorage>(options);
  if (choice == "io_uring") return std::make_unique<IoUringStorage>(options);
  if (!choice.empty() && choice != "auto")
    throw Error("STRATA_IO=" + choice + ": expected io_uring, pread or auto");
  std::string why;
  if (IoUringStorage::available(&why)) return std::make_unique<IoUringStorage>(options);
  auto s = std::make_unique<PreadPoolStorage>(options);
  s->add_note("io_uring is not available (" + why + "); reading with a pread thread pool");
  return s;
}

}  // namespace strata
