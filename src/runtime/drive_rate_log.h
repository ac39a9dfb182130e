#pragma once
// After a run: what its expert reads got from each drive, added to the
// drive rates file (storage/drive_rates.h) for `strata budget`. A prompt's
// reads and a decode's are kept apart: they reach different depths.
//
// Left out: a phase that read less than DriveRates::kLeastRunBytes from a
// drive, and a streaming install's source (its reads waited for the
// network, not only the drive) or any source without a device.
#include <filesystem>
#include <string>

#include "model/expert_provider.h"
#include "storage/drive_rates.h"

namespace strata {

// The rates only make the next budget better, so a file that cannot be
// read or written is not an error of the run: the reason comes back, for
// one warning line; "" when written or when there was nothing to add. A
// file that is not a drive rates file is replaced by one of this run's
// samples (and said so).
[[nodiscard]] std::string record_drive_rates(const ExpertStats& prefill, const ExpertStats& decode,
                                             const std::filesystem::path& path = default_drive_rates_path());

}  // namespace strata
