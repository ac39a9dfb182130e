#pragma once
// `strata tune`: measures on this machine what strata's defaults guess, and
// returns them as a profile (runtime/tune_profile.h):
//  - threads: the kernels' one-row (decode) and 64-row (prefill) products
//    over a matrix larger than the caches (runtime/product_timer.h) at 1, 2,
//    4, ... cores and all of them; the count whose two times, each relative
//    to its best, sum least;
//  - piece size and reads in flight per drive: `strata probe`'s O_DIRECT
//    reads of each piece size (256 KiB to 4 MiB, no larger than an expert
//    when a model is given) at depths 4 to 32, every drive at once; the size
//    that reads fastest, and the smallest depth within 5% of its best;
//  - with a model: prefetch on and off (short streamed decodes of a fixed
//    prompt, alternated, cold caches each), and the widest prefill step
//    (a prompt's prefill at 32 to 512 rows a step): the faster, kept only
//    when it beats the other by more than the runs' spread would (3%).
//    A setting the model cannot run with is skipped, saying why; a model
//    that cannot run within the budget at all throws the loader's
//    strata::Error before anything is measured.
// Every measured figure goes into the profile's "measured" record.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/loader.h"
#include "runtime/tune_profile.h"

namespace strata {

struct TuneOptions {
  // Folders (a test file is written there) or files on the drives experts
  // are read from; none: drives are not tuned.
  std::vector<std::filesystem::path> drives;
  std::filesystem::path model;  // optional: prefetch and prefill rows
  LoadOptions load;             // how the model is run (its --ram)
  double seconds = 1.0;         // per measured point
  uint64_t test_file_bytes = 1ull << 30;
  std::function<void(const std::string&)> progress;  // one line per step
};

TuneProfile run_tune(const TuneOptions& options);

}  // namespace strata
