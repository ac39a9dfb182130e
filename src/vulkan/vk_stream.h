#pragma once
// The backend's queue of work: compute pipelines made from the embedded
// shaders (one pipeline layout for all: 128 bytes of push constants, no
// descriptor sets, since shaders reach memory by device address), and
// command buffers that ops are recorded into. Between every two commands is
// a memory barrier, so commands take effect one after another in the order
// they were recorded, across submissions too (one queue). Each barrier names
// only what the commands before it wrote with (compute, transfer) and what
// the next one reads with (compute, its indirect grid, transfer): it is
// recorded before the next command, when that is known. On NVIDIA's driver
// a barrier naming every stage cost 6.2 µs a command, this one 3.8
// (docs/PERFORMANCE.md).
//
// A buffer is submitted, without waiting, once it holds kCommandsPerSubmit
// commands, so the GPU works through the first ops of a step while the host
// records the rest; finish() submits what remains and waits for everything.
// After a finish() the GPU is idle, so the next buffers go out at 1, 2, 4
// ... commands before the full count: it starts on the first command at
// once. Past that, buffers are large: each submission leaves the GPU idle
// for a while between buffers (docs/PERFORMANCE.md), and the host records
// far faster than the GPU runs.
// Nothing the host hands to recorded ops may change before finish() (the
// backend's staging is rewound only then). Dispatches the caller declares
// independent (begin_independent) share one barrier, after the last.
// STRATA_VK_DEBUG=1 in the environment runs each dispatch alone and names it
// on stderr: a shader that faults then shows which it was. STRATA_VK_PROFILE=1
// times every command on the GPU (vk_profile.h).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include <vulkan/vulkan.h>

#include "vulkan/vk_buffer.h"
#include "vulkan/vk_context.h"
#include "vulkan/vk_profile.h"

namespace strata::vk {

class Stream {
 public:
  static constexpr uint32_t kPushBytes = 128;
  explicit Stream(const Context& ctx);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Records shader `name` over groups (x, y, z) with `push` as its push
  // constants (at most kPushBytes). Throws strata::Error for an unknown shader.
  void dispatch(std::string_view name, const void* push, uint32_t bytes, uint32_t x, uint32_t y = 1, uint32_t z = 1);
  template <class P>
  void dispatch(std::string_view name, const P& push, uint32_t x, uint32_t y = 1, uint32_t z = 1) {
    static_assert(sizeof(P) <= kPushBytes);
    dispatch(name, &push, sizeof(P), x, y, z);
  }
  // The same, with the grid read on the device from three words at `grid` +
  // `offset` (4-aligned) that earlier commands wrote (a grid sized by what
  // they found: Vulkan's indirect dispatch).
  template <class P>
  void dispatch_indirect(std::string_view name, const P& push, VkBuffer grid, uint64_t offset) {
    static_assert(sizeof(P) <= kPushBytes);
    dispatch_indirect(name, &push, sizeof(P), grid, offset);
  }
  void dispatch_indirect(std::string_view name, const void* push, uint32_t bytes, VkBuffer grid, uint64_t offset);
  void copy(VkBuffer src, uint64_t src_offset, VkBuffer dst, uint64_t dst_offset, uint64_t bytes);
  // Zeroes `bytes` (a multiple of 4) from `offset`.
  void zero(VkBuffer dst, uint64_t offset, uint64_t bytes);
  // Submits what was recorded and waits until everything submitted is done.
  void finish();
  // The profile's table so far under `label` (vk_profile.h), if profiling;
  // called after finish(), so every submission is in it.
  void profile_phase(std::string_view label);
  // Dispatches recorded between the two are independent of each other: no
  // barrier between them, one before the next command after the last
  // (copies and fills keep theirs). Nested pairs count as one; no Vulkan
  // call here, so a scope's end cannot throw.
  void begin_independent() { ++independent_; }
  // Whether a dispatch recorded now would be one of an independent run.
  bool independent() const { return independent_ > 0; }
  // Called before anything else is recorded (a dispatch, a copy, a fill)
  // and before a finish: a command the caller held back (to record it fused
  // with the next, where the next allows) goes in first, in its place.
  void set_before_recording(std::function<void()> hook) { before_recording_ = std::move(hook); }
  void end_independent();
  // Compute dispatches and barriers between commands recorded so far: what
  // a step costs the GPU beyond its work (each is a few microseconds on
  // NVIDIA's driver: docs/PERFORMANCE.md), and what fusing ops saves.
  uint64_t dispatches() const { return dispatches_; }
  uint64_t barriers() const { return barriers_; }

  static constexpr size_t kRing = 4;                  // command buffers in turn
  static constexpr uint32_t kCommandsPerSubmit = 128;  // a buffer goes out at this many (a layer records ~17)

 private:
  struct Slot {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    bool pending = false;  // submitted, not yet waited for
    bool spent = false;    // waited for: its fence is signalled until the slot is next recorded into
  };
  VkPipeline pipeline(std::string_view name);
  // What a command does: a dispatch (its grid given, or read from a buffer)
  // or a copy or fill. The barrier before it waits for what the commands
  // since the last barrier wrote, in the stages this kind reads and writes in.
  enum class Kind { Compute, Indirect, Transfer };
  // A dispatch's start: the barrier owed, then shader `name` bound with its
  // push constants in the buffer being recorded (returned); and its end,
  // after the dispatch command: profile (grid x, y, z; x 0 for an indirect
  // one), and with STRATA_VK_DEBUG the wait.
  VkCommandBuffer bind(std::string_view name, const void* push, uint32_t bytes, Kind kind);
  void dispatched(std::string_view name, uint32_t x, uint32_t y, uint32_t z);
  void begin();
  // After a command: its barrier owed (to the next command), its timestamp
  // when profiling, and the buffer submitted when it is full.
  void recorded(std::string_view name, Kind kind);
  // Every stage's writes before it against every stage after it (a
  // finish's, for the next submission). `for_host` (once, before a finish's
  // submit): the host reads what they wrote.
  void barrier(VkCommandBuffer cmd, bool for_host = false);
  // What the commands since the last barrier wrote, against what a command
  // of kind `next` reads and writes.
  void barrier_before(VkCommandBuffer cmd, Kind next);
  // The barrier owed, before a command of kind `next` (none between the
  // dispatches of one independent run).
  void pay_barrier(Kind next);
  // Submits the buffer being recorded (without waiting).
  void submit();
  // Waits for slot i's submission and makes the slot free. Its fence and
  // buffer are reset where it is next recorded into (begin): the GPU idles
  // from a finish until the next submission, so a finish resets nothing and
  // the next step's first buffer pays for its own reset alone.
  void wait(size_t i);

  const Context& ctx_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  // Found by the caller's string_view, without a string made each dispatch.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, VkPipeline, NameHash, std::equal_to<>> pipelines_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::array<Slot, kRing> ring_{};
  size_t current_ = 0;  // the slot recorded into next
  bool recording_ = false;
  uint32_t in_buffer_ = 0;
  uint32_t submit_at_ = 1;  // commands the buffer being recorded goes out at
  int independent_ = 0;         // begin_independent() calls not yet ended
  std::function<void()> before_recording_;
  bool in_before_recording_ = false;  // the hook is recording its command
  void before_recording();
  bool owes_barrier_ = false;   // a command was recorded without its barrier
  bool owed_in_run_ = false;    // by a dispatch of the independent run still open
  static constexpr uint32_t kWroteCompute = 1, kWroteTransfer = 2;
  uint32_t written_ = 0;        // what the commands since the last barrier were
  bool unseen_by_host_ = false;  // commands recorded since the host's barrier
  bool sync_ = false;  // STRATA_VK_DEBUG: every dispatch alone
  uint64_t dispatches_ = 0, barriers_ = 0;
  std::unique_ptr<Profile> profile_;
};

}  // namespace strata::vk
