#pragma once
// The current time in UTC as text: ISO 8601 for the files strata writes
// (probe, tuned profile), or another strftime format (a folder's name).
#include <ctime>
#include <string>

namespace strata {

inline std::string utc_now(const char* format = "%Y-%m-%dT%H:%M:%SZ") {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char s[64];
  return std::strftime(s, sizeof s, format, &tm) ? s : "";
}

}  // namespace strata
