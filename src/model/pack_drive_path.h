#pragma once
// Where a pack's expert drive file is, from what its manifest records
// (pack/manifest.h): `path` (relative to the pack directory when relative),
// and, when the file is not there, `relative` (its place relative to the
// pack, set for a drive outside it), so that a pack moved together with its
// drive folders still finds them. The loader (Manifest::drive_file) and the
// weights identity (model/weights_identity.h) resolve drives the same way;
// it sits here because the identity is below the pack layer.
#include <filesystem>
#include <string>

namespace strata {

std::filesystem::path pack_drive_path(const std::filesystem::path& pack_dir, const std::string& path,
                                      const std::string& relative, const std::string& file);

}  // namespace strata
