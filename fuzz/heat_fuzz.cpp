// `strata heat`'s input: a router trace (JSON lines) or an expert heat file,
// summarised as the command does (table and chart). Memory must follow the
// file, not the ids it names (-rss_limit_mb catches a dense table).
#include "fuzz_support.h"
#include "runtime/heat_summary.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch_dir() / "trace.jsonl";
  fuzz::write_file(path, fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const HeatSummary s = summarise_heat({path});
    (void)heat_table(s);
    (void)heat_svg(s);
  });
  return 0;
}
