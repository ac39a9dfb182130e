// A streaming install's own files, as a folder holds them: remote.json,
// present.log and strata-blocks.json (parts in that order), opened as
// RemoteMirror does before any fetch (the record, the log, the source's
// block sums against the record's files), then asked what is missing and
// what is present. No network: the source is opened at the first fetch.
#include <algorithm>
#include <fstream>

#include "fuzz_support.h"
#include "remote/block_sums.h"
#include "remote/remote_mirror.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = fuzz::scratch_dir() / "install";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<std::string_view> parts = fuzz::split_parts(fuzz::as_text(data, size), 3);
  const char* names[] = {kRemoteMirrorRecord, kRemoteMirrorLog, kBlockSumsFile};
  for (size_t i = 0; i < parts.size(); ++i) fuzz::write_file(dir / names[i], parts[i]);
  fuzz::expect_clean([&] {
    if (!RemoteMirror::is_mirror(dir)) return;
    (void)RemoteMirror::is_complete(dir);
    (void)RemoteMirror::is_full(dir);
    RemoteMirror mirror(dir);
    (void)mirror.checks_blocks();
    uint64_t missing = 0;
    for (const RemoteMirror::Range& r : mirror.missing()) missing += r.length;
    for (const auto& [name, info] : mirror.files()) {
      (void)mirror.present(name, 0, std::min<uint64_t>(info.size, 4096));
      (void)mirror.present(name, info.size / 2, info.size - info.size / 2);
    }
    (void)missing;
  });
  return 0;
}
