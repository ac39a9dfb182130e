#include "vulkan/vk_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "util/error.h"
#include "vulkan/vk_pipeline_stats.h"
#include "vulkan/vk_shaders.h"

namespace strata::vk {

Stream::Stream(const Context& ctx) : ctx_(ctx) {
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo li{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  li.pushConstantRangeCount = 1;
  li.pPushConstantRanges = &range;
  check(vkCreatePipelineLayout(ctx.device(), &li, nullptr, &layout_), "vkCreatePipelineLayout");
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = ctx.queue_family();
  check(vkCreateCommandPool(ctx.device(), &pi, nullptr, &pool_), "vkCreateCommandPool");
  for (Slot& slot : ring_) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(ctx.device(), &ai, &slot.cmd), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    check(vkCreateFence(ctx.device(), &fi, nullptr, &slot.fence), "vkCreateFence");
  }
  sync_ = std::getenv("STRATA_VK_DEBUG") != nullptr;
  profile_.reset(Profile::from_environment(ctx, kRing));
}

Stream::~Stream() {
  VkDevice d = ctx_.device();
  vkDeviceWaitIdle(d);
  profile_.reset();
  for (auto& [name, p] : pipelines_) vkDestroyPipeline(d, p, nullptr);
  for (Slot& slot : ring_) vkDestroyFence(d, slot.fence, nullptr);
  vkDestroyCommandPool(d, pool_, nullptr);
  vkDestroyPipelineLayout(d, layout_, nullptr);
}

VkPipeline Stream::pipeline(std::string_view name) {
  auto it = pipelines_.find(name);
  if (it != pipelines_.end()) return it->second;
  const Shader* found = nullptr;
  for (const Shader& s : shaders())
    if (name == s.name) found = &s;
  if (!found) throw Error("internal: no Vulkan shader named " + std::string(name));
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = found->count * 4;
  mi.pCode = found->words;
  VkShaderModule module = VK_NULL_HANDLE;
  check(vkCreateShaderModule(ctx_.device(), &mi, nullptr, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.layout = layout_;
  if (ctx_.pipeline_statistics()) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  VkPipeline p = VK_NULL_HANDLE;
  const VkResult r = vkCreateComputePipelines(ctx_.device(), VK_NULL_HANDLE, 1, &ci, nullptr, &p);
  vkDestroyShaderModule(ctx_.device(), module, nullptr);
  check(r, "vkCreateComputePipelines");
  if (ctx_.pipeline_statistics()) print_pipeline_statistics(ctx_.device(), p, name);
  pipelines_.emplace(std::string(name), p);
  return p;
}

void Stream::begin() {
  if (recording_) return;
  Slot& slot = ring_[current_];
  if (slot.pending) wait(current_);  // the GPU is kRing submissions behind: the host waits
  if (slot.spent) {
    check(vkResetFences(ctx_.device(), 1, &slot.fence), "vkResetFences");
    slot.spent = false;
  }
  // (The pool lets a buffer be reset by beginning it again.)
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(slot.cmd, &bi), "vkBeginCommandBuffer");
  recording_ = true;
  in_buffer_ = 0;
  if (profile_) profile_->begin(slot.cmd, current_);
}

void Stream::barrier(VkCommandBuffer cmd, bool for_host) {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  if (for_host) {
    b.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd, stages, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, nullptr, 0, nullptr);
    return;
  }
  // The next command may also take its grid from what this one wrote.
  ++barriers_;
  b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                    VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_INDIRECT_COMMAND_READ_BIT;
  vkCmdPipelineBarrier(cmd, stages, stages | VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT, 0, 1, &b, 0, nullptr, 0, nullptr);
}

void Stream::barrier_before(VkCommandBuffer cmd, Kind next) {
  ++barriers_;
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  VkPipelineStageFlags src = 0, dst = 0;
  if (written_ & kWroteCompute) src |= VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, b.srcAccessMask |= VK_ACCESS_SHADER_WRITE_BIT;
  if (written_ & kWroteTransfer) src |= VK_PIPELINE_STAGE_TRANSFER_BIT, b.srcAccessMask |= VK_ACCESS_TRANSFER_WRITE_BIT;
  if (next == Kind::Transfer) {
    dst = VK_PIPELINE_STAGE_TRANSFER_BIT;
    b.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  } else {
    dst = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    if (next == Kind::Indirect) {
      dst |= VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT;
      b.dstAccessMask |= VK_ACCESS_INDIRECT_COMMAND_READ_BIT;
    }
  }
  vkCmdPipelineBarrier(cmd, src, dst, 0, 1, &b, 0, nullptr, 0, nullptr);
}

void Stream::end_independent() {
  if (independent_ > 0) --independent_;
  if (independent_ == 0) owed_in_run_ = false;  // the run's barrier is owed to whatever comes next
}

void Stream::pay_barrier(Kind next) {
  // A command's barrier is recorded before the next command (then what that
  // one does is known), and covers every command before it in submission
  // order, those of buffers submitted earlier too. Inside an independent run
  // the run's own dispatches owe none to each other; a copy, a fill or an
  // indirect dispatch in a run pays (the barrier before the run's first
  // dispatch named compute alone).
  if (!owes_barrier_ || (independent_ > 0 && owed_in_run_ && next == Kind::Compute)) return;
  barrier_before(ring_[current_].cmd, next);
  owes_barrier_ = false;
  written_ = 0;
}

void Stream::recorded(std::string_view name, Kind kind) {
  const VkCommandBuffer cmd = ring_[current_].cmd;
  unseen_by_host_ = true;
  owed_in_run_ = independent_ > 0 && kind != Kind::Transfer && !sync_;  // copies and fills keep theirs
  owes_barrier_ = true;
  written_ |= kind == Kind::Transfer ? kWroteTransfer : kWroteCompute;
  if (profile_) profile_->command(cmd, current_, name);
  if (++in_buffer_ >= submit_at_) submit();
}

void Stream::before_recording() {
  if (!before_recording_ || in_before_recording_) return;
  // The held-back command was recorded outside any independent run: it goes
  // in with its own barrier even where the next command is in one.
  struct Restore {
    Stream& s;
    int independent;
    ~Restore() {
      s.independent_ = independent;
      s.in_before_recording_ = false;
    }
  } restore{*this, independent_};
  in_before_recording_ = true;
  independent_ = 0;
  before_recording_();
}

VkCommandBuffer Stream::bind(std::string_view name, const void* push, uint32_t bytes, Kind kind) {
  before_recording();
  const VkPipeline p = pipeline(name);
  begin();
  pay_barrier(kind);
  const VkCommandBuffer cmd = ring_[current_].cmd;
  vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
  vkCmdPushConstants(cmd, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, bytes, push);
  return cmd;
}

void Stream::dispatched(std::string_view name, uint32_t x, uint32_t y, uint32_t z) {
  const bool indirect = x == 0;
  ++dispatches_;
  if (profile_ && profile_->by_grid())
    recorded(std::string(name) + (indirect ? std::string("[indirect]")
                                           : "[" + std::to_string(x) + "," + std::to_string(y) + "," +
                                                 std::to_string(z) + "]"),
             Kind::Compute);
  else
    recorded(name, Kind::Compute);
  if (sync_) {
    std::fprintf(stderr, "vk: %.*s %u %u %u%s\n", static_cast<int>(name.size()), name.data(), x, y, z,
                 indirect ? " (indirect)" : "");
    finish();
  }
}

void Stream::dispatch(std::string_view name, const void* push, uint32_t bytes, uint32_t x, uint32_t y, uint32_t z) {
  if (x == 0 || y == 0 || z == 0) return;
  vkCmdDispatch(bind(name, push, bytes, Kind::Compute), x, y, z);
  dispatched(name, x, y, z);
}

void Stream::dispatch_indirect(std::string_view name, const void* push, uint32_t bytes, VkBuffer grid,
                               uint64_t offset) {
  vkCmdDispatchIndirect(bind(name, push, bytes, Kind::Indirect), grid, offset);
  dispatched(name, 0, 0, 0);
}

void Stream::copy(VkBuffer src, uint64_t src_offset, VkBuffer dst, uint64_t dst_offset, uint64_t bytes) {
  if (bytes == 0) return;
  before_recording();
  begin();
  pay_barrier(Kind::Transfer);
  VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(ring_[current_].cmd, src, dst, 1, &region);
  if (profile_ && profile_->by_grid())
    recorded("copy[" + std::to_string(bytes) + "]", Kind::Transfer);
  else
    recorded("copy", Kind::Transfer);
}

void Stream::zero(VkBuffer dst, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  before_recording();
  begin();
  pay_barrier(Kind::Transfer);
  vkCmdFillBuffer(ring_[current_].cmd, dst, offset, bytes, 0);
  recorded("zero", Kind::Transfer);
}

void Stream::submit() {
  if (!recording_) return;
  recording_ = false;
  Slot& slot = ring_[current_];
  check(vkEndCommandBuffer(slot.cmd), "vkEndCommandBuffer");
  if (profile_) profile_->submitted(current_);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &slot.cmd;
  check(vkQueueSubmit(ctx_.queue(), 1, &si, slot.fence), "vkQueueSubmit");
  slot.pending = true;
  current_ = (current_ + 1) % kRing;
  submit_at_ = std::min(2 * submit_at_, kCommandsPerSubmit);
}

void Stream::wait(size_t i) {
  Slot& slot = ring_[i];
  const auto t0 = std::chrono::steady_clock::now();
  check(vkWaitForFences(ctx_.device(), 1, &slot.fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  if (profile_)
    profile_->finished(i, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  slot.pending = false;
  slot.spent = true;
}

void Stream::finish() {
  before_recording();
  // The barrier independent dispatches still owe: a fence wait and a new
  // submission order the host, not the device, against what they wrote.
  if (owes_barrier_) {
    begin();
    barrier(ring_[current_].cmd);
    owes_barrier_ = false;
    written_ = 0;
  }
  if (unseen_by_host_) {  // the host reads what the last commands wrote
    begin();
    barrier(ring_[current_].cmd, true);
    unseen_by_host_ = false;
  }
  submit();
  // Oldest first: current_ is the slot after the last one submitted.
  for (size_t k = 0; k < kRing; ++k) {
    const size_t i = (current_ + k) % kRing;
    if (ring_[i].pending) wait(i);
  }
  submit_at_ = 1;
  if (profile_) profile_->drained();
}

void Stream::profile_phase(std::string_view label) {
  if (profile_) profile_->report(label);
}

}  // namespace strata::vk
