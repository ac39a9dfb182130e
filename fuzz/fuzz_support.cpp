#include "fuzz_support.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace strata::fuzz {

namespace fs = std::filesystem;

const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("strata-fuzz-" + std::to_string(getpid()));
    fs::remove_all(d, ec);
    fs::create_directories(d);
    return d;
  }();
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(dir, ec);
    });
    return true;
  }();
  (void)cleanup;
  return dir;
}

void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("fuzz harness: cannot write " + path.string());
}

std::vector<std::string_view> split_parts(std::string_view data, std::size_t n) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    const std::size_t at = data.find(kPartMarker);
    if (at == std::string_view::npos) break;
    parts.push_back(data.substr(0, at));
    data.remove_prefix(at + kPartMarker.size());
  }
  parts.push_back(data);
  return parts;
}

}  // namespace strata::fuzz
