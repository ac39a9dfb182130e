// A pack's manifest.json, parsed and checked as Manifest::load does (drives,
// layouts, expert records, lossy labels); what passes is written back out.
#include "fuzz_support.h"
#include "pack/manifest.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = fuzz::scratch_dir() / "pack";
  fs::create_directories(dir);
  fuzz::write_file(dir / "manifest.json", fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const Manifest m = Manifest::load(dir);
    (void)m.to_json().dump();
    (void)m.approximation();
    for (uint32_t d = 0; d < m.drives.size(); ++d) (void)m.drive_file(dir, d);
  });
  return 0;
}
