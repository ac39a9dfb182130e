#pragma once
// How the reads of a pack's experts should split over the folders they are
// written to (--drive): by the read speed of the device each folder is on.
//
// - Folders on the same device are one drive for placement: that device's
//   speed is split evenly between them (two folders on one disk read no
//   faster than one), and `notice` says so.
// - Speeds come from a saved probe (`strata probe`, or the file given) that
//   covers every device. Without one, a short probe is measured now, one
//   folder per device (a test file of a few hundred MB each, removed after;
//   nothing is saved), and `notice` says so. Should that fail, the devices
//   are weighted equally, and `notice` says why.
// - On one device nothing is measured: the split is even.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace strata {

struct DriveWeights {
  std::vector<double> weights;  // per folder, > 0: its relative share of the reads
  std::string source;           // "saved", "measured" or "equal"
};

DriveWeights weigh_drives(const std::vector<std::filesystem::path>& dirs, const std::filesystem::path& probe_file,
                          const std::function<void(const std::string&)>& notice);

}  // namespace strata
