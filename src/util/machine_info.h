#pragma once
// What machine this is, as benchmarks record it and tuned profiles are
// keyed by: its host name, CPU model, cores, memory and kernel.
#include <cstdint>
#include <string>

namespace strata {

struct MachineInfo {
  std::string host;     // gethostname
  std::string cpu;      // /proc/cpuinfo's first "model name", trimmed; "" unknown
  unsigned cores = 0;   // hardware threads
  uint64_t memory_bytes = 0;  // MemTotal
  std::string kernel;   // uname -r
};

MachineInfo this_machine();

}  // namespace strata
