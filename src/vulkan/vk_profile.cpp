#include "vulkan/vk_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace strata::vk {

namespace {
constexpr uint32_t kQueries = 8192;  // timestamps in all: per slot, the first, then one per command
}

Profile* Profile::from_environment(const Context& ctx, size_t slots) {
  const char* v = std::getenv("STRATA_VK_PROFILE");
  if (v == nullptr || *v == '\0' || std::string(v) == "0") return nullptr;
  uint32_t count = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(ctx.physical(), &count, nullptr);
  std::vector<VkQueueFamilyProperties> families(count);
  vkGetPhysicalDeviceQueueFamilyProperties(ctx.physical(), &count, families.data());
  const uint32_t bits = families.at(ctx.queue_family()).timestampValidBits;
  const double period = ctx.properties().limits.timestampPeriod;
  if (bits == 0 || period <= 0) {
    std::fprintf(stderr, "vk profile: this queue cannot write timestamps; not profiling\n");
    return nullptr;
  }
  VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qi.queryCount = kQueries;
  VkQueryPool pool = VK_NULL_HANDLE;
  check(vkCreateQueryPool(ctx.device(), &qi, nullptr, &pool), "vkCreateQueryPool");
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  return new Profile(ctx, pool, slots, period, mask, std::string(v) == "2");
}

Profile::Profile(const Context& ctx, VkQueryPool pool, size_t slots, double ns_per_tick, uint64_t mask, bool by_grid)
    : ctx_(ctx),
      pool_(pool),
      ns_per_tick_(ns_per_tick),
      mask_(mask),
      by_grid_(by_grid),
      per_slot_(kQueries / slots),
      names_(slots),
      began_(slots) {}

Profile::~Profile() {
  report("the rest");
  vkDestroyQueryPool(ctx_.device(), pool_, nullptr);
}

void Profile::report(std::string_view label) {
  std::fprintf(stderr, "vk profile: -- %.*s --\n", static_cast<int>(label.size()), label.data());
  std::vector<std::pair<std::string, Totals>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.gpu_ns > b.second.gpu_ns; });
  std::fprintf(stderr, "vk profile: %-44s %9s %11s %9s %6s %11s\n", "command", "count", "gpu ms", "us each", "share",
               "host ms");
  for (const auto& [name, t] : rows)
    std::fprintf(stderr, "vk profile: %-44s %9llu %11.2f %9.2f %5.1f%% %11.2f\n", name.c_str(),
                 static_cast<unsigned long long>(t.count), t.gpu_ns / 1e6, t.gpu_ns / 1e3 / std::max<uint64_t>(t.count, 1),
                 gpu_ns_ > 0 ? 100 * t.gpu_ns / gpu_ns_ : 0.0, t.host_ns / 1e6);
  std::fprintf(stderr,
               "vk profile: %llu submissions; gpu %.2f ms; host recording %.2f ms, waiting %.2f ms "
               "(%.1f us per submission); %llu commands untimed\n",
               static_cast<unsigned long long>(submissions_), gpu_ns_ / 1e6, record_ns_ / 1e6, wait_ns_ / 1e6,
               submissions_ ? wait_ns_ / 1e3 / submissions_ : 0.0, static_cast<unsigned long long>(untimed_));
  std::fprintf(stderr,
               "vk profile: host away after a finish (the GPU idle, the host neither recording nor waiting): "
               "%.2f ms in %llu (%.1f us each)\n",
               away_ns_ / 1e6, static_cast<unsigned long long>(aways_), aways_ ? away_ns_ / 1e3 / aways_ : 0.0);
  std::vector<std::pair<std::string, Totals>> gaps(gaps_.begin(), gaps_.end());
  std::sort(gaps.begin(), gaps.end(), [](const auto& a, const auto& b) { return a.second.gpu_ns > b.second.gpu_ns; });
  std::fprintf(stderr, "vk profile: gpu idle between submissions %.2f ms; largest by the commands either side:\n",
               idle_ns_ / 1e6);
  for (size_t i = 0; i < std::min<size_t>(gaps.size(), 12); ++i)
    std::fprintf(stderr, "vk profile:   %-60s %9llu %11.2f ms\n", gaps[i].first.c_str(),
                 static_cast<unsigned long long>(gaps[i].second.count), gaps[i].second.gpu_ns / 1e6);
  totals_.clear();
  gaps_.clear();
  have_end_ = false;
  submissions_ = untimed_ = aways_ = 0;
  record_ns_ = wait_ns_ = gpu_ns_ = idle_ns_ = away_ns_ = 0;
}

void Profile::drained() {
  if (drained_) return;  // finished again with nothing run between: idle since the first
  drained_ = true;
  drained_at_ = Clock::now();
}

void Profile::begin(VkCommandBuffer cmd, size_t slot) {
  names_[slot].clear();
  began_[slot] = last_ = Clock::now();
  if (drained_) {
    drained_ = false;
    ++aways_;
    away_ns_ += std::chrono::duration<double, std::nano>(last_ - drained_at_).count();
  }
  vkCmdResetQueryPool(cmd, pool_, first_query(slot), static_cast<uint32_t>(per_slot_));
  vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, first_query(slot));
}

void Profile::command(VkCommandBuffer cmd, size_t slot, std::string_view name) {
  const Clock::time_point now = Clock::now();
  totals_[std::string(name)].host_ns += std::chrono::duration<double, std::nano>(now - last_).count();
  last_ = now;
  std::vector<std::string>& names = names_[slot];
  if (names.size() + 1 >= per_slot_) {
    ++untimed_;
    return;
  }
  names.emplace_back(name);
  vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_,
                      first_query(slot) + static_cast<uint32_t>(names.size()));
}

void Profile::submitted(size_t slot) {
  const Clock::time_point now = Clock::now();
  totals_["(submit)"].host_ns += std::chrono::duration<double, std::nano>(now - last_).count();
  record_ns_ += std::chrono::duration<double, std::nano>(now - began_[slot]).count();
}

void Profile::finished(size_t slot, double waited_ns) {
  wait_ns_ += waited_ns;
  ++submissions_;
  const std::vector<std::string>& names = names_[slot];
  std::vector<uint64_t> ticks(names.size() + 1);
  check(vkGetQueryPoolResults(ctx_.device(), pool_, first_query(slot), static_cast<uint32_t>(ticks.size()),
                              ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  if (names.empty()) return;
  // Submissions finish in the order they went out (one queue), so the gap to
  // the one before is time the GPU had nothing to run.
  if (have_end_) {
    const double idle = static_cast<double>((ticks[0] - end_tick_) & mask_) * ns_per_tick_;
    Totals& g = gaps_[end_name_ + " -> " + names.front()];
    ++g.count;
    g.gpu_ns += idle;
    idle_ns_ += idle;
  }
  have_end_ = true;
  end_tick_ = ticks.back();
  end_name_ = names.back();
  for (size_t i = 0; i < names.size(); ++i) {
    const double ns = static_cast<double>((ticks[i + 1] - ticks[i]) & mask_) * ns_per_tick_;
    Totals& t = totals_[names[i]];
    ++t.count;
    t.gpu_ns += ns;
    gpu_ns_ += ns;
  }
}

}  // namespace strata::vk
