#pragma once
// coreutils' sha256sum, the independent reference for the SHA-256 a hub
// publishes (and strata checks downloads against).
#include <cstdio>
#include <filesystem>
#include <string>

namespace strata::testfiles {

inline std::string sha256sum(const std::filesystem::path& p) {
  std::string out;
  FILE* pipe = ::popen(("sha256sum '" + p.string() + "'").c_str(), "r");
  char buf[256];
  while (pipe && std::fgets(buf, sizeof buf, pipe)) out += buf;
  if (pipe) ::pclose(pipe);
  return out.substr(0, out.find(' '));
}

}  // namespace strata::testfiles
