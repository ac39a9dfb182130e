#include "util/machine_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace strata {

namespace {

std::string trimmed(std::string s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace

MachineInfo this_machine() {
  MachineInfo m;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) m.host = host;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      if (const size_t c = line.find(':'); c != std::string::npos) m.cpu = trimmed(line.substr(c + 1));
      break;
    }
  m.cores = std::thread::hardware_concurrency();
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") {
      m.memory_bytes = kib << 10;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  struct utsname u {};
  if (::uname(&u) == 0) m.kernel = u.release;
  return m;
}

}  // namespace strata
