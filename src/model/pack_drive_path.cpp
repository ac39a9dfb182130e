#include "model/pack_drive_path.h"

namespace strata {

std::filesystem::path pack_drive_path(const std::filesystem::path& pack_dir, const std::string& path,
                                      const std::string& relative, const std::string& file) {
  const std::filesystem::path p(path);
  std::filesystem::path at = (p.is_absolute() ? p : pack_dir / p) / file;
  std::error_code ec;
  if (!relative.empty() && !std::filesystem::exists(at, ec)) {
    std::filesystem::path beside = pack_dir / relative / file;
    if (std::filesystem::exists(beside, ec)) return beside;
  }
  return at;
}

}  // namespace strata
