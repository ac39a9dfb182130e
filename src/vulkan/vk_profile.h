#pragma once
// Where a Vulkan stream's time goes, for tuning (STRATA_VK_PROFILE=1 in the
// environment; off otherwise, at no cost). Each recorded command is followed
// by a GPU timestamp, so a command's time is the gap to the one before it
// (commands run one after another: the stream puts a barrier between
// them, across submissions too). Per submission it also times the host:
// recording (from the first command to the submit) and waiting for the
// fence; and within recording, the
// host time before each command since the one before it (the op's own host
// work, and the model's between ops, while the GPU waits for the submit).
// At destruction (and at each report()) it prints one table to stderr: per command name, count, GPU
// time and the host time before it; then submissions, host recording and
// waiting time, and GPU time in total; the host's time away from the stream
// between a finish() and the next command; then where the GPU sat idle between
// submissions (the host behind it), by the commands on either side of the
// gap, largest first. STRATA_VK_PROFILE=2 keeps dispatches
// apart by their grid as well (name[x,y,z]): one matrix's products from
// another's.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vulkan/vk_context.h"

namespace strata::vk {

class Profile {
 public:
  // nullptr when STRATA_VK_PROFILE is unset or the queue cannot time.
  // `slots`: the stream's command buffers, each with its share of queries.
  static Profile* from_environment(const Context& ctx, size_t slots);
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Called by the stream as command buffer `slot` begins, after each
  // command, as it is submitted, and once its fence was waited for
  // (`waited_ns`: how long the host blocked).
  void begin(VkCommandBuffer cmd, size_t slot);
  void command(VkCommandBuffer cmd, size_t slot, std::string_view name);
  // Whether commands are told apart by grid (STRATA_VK_PROFILE=2).
  bool by_grid() const { return by_grid_; }
  void submitted(size_t slot);
  void finished(size_t slot, double waited_ns);
  // Called as a finish() returns (everything waited for): the time until the
  // next command buffer begins is the host's own, the GPU idle meanwhile.
  void drained();
  // Prints the table of what ran since the last report (all submissions
  // waited for), headed by `label`, and starts counting afresh.
  void report(std::string_view label);

 private:
  explicit Profile(const Context& ctx, VkQueryPool pool, size_t slots, double ns_per_tick, uint64_t mask,
                   bool by_grid);
  uint32_t first_query(size_t slot) const { return static_cast<uint32_t>(slot * per_slot_); }
  using Clock = std::chrono::steady_clock;
  struct Totals {
    uint64_t count = 0;
    double gpu_ns = 0;
    double host_ns = 0;  // recording time before this command since the previous one
  };
  const Context& ctx_;
  VkQueryPool pool_;
  double ns_per_tick_;
  uint64_t mask_;
  bool by_grid_;
  size_t per_slot_;                              // queries of each command buffer
  std::vector<std::vector<std::string>> names_;  // per slot: its submission's timed commands
  std::vector<Clock::time_point> began_;         // per slot
  uint64_t untimed_ = 0;                         // commands past a slot's queries
  std::map<std::string, Totals> totals_;
  Clock::time_point last_;
  uint64_t submissions_ = 0;
  double record_ns_ = 0, wait_ns_ = 0, gpu_ns_ = 0, idle_ns_ = 0;
  bool drained_ = false;           // a finish() returned; no command buffer begun since
  Clock::time_point drained_at_;
  uint64_t aways_ = 0;             // such intervals
  double away_ns_ = 0;             // and their host time
  // The GPU's idle gaps between submissions, keyed "last command -> first command".
  std::map<std::string, Totals> gaps_;
  bool have_end_ = false;
  uint64_t end_tick_ = 0;     // the previous submission's last timestamp
  std::string end_name_;      // and its last command
};

}  // namespace strata::vk
