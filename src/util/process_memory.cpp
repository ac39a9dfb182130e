#include "util/process_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace strata {

uint64_t resident_anonymous_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) != 0) continue;
    std::istringstream fields(line.substr(8));
    uint64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

}  // namespace strata
