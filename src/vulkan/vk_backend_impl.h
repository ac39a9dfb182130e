#pragma once
// The Vulkan backend's class (vulkan_backend.h states its contract); its ops
// are spread over vk_backend*.cpp by kind.
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "vulkan/vk_arena.h"
#include "vulkan/vk_context.h"
#include "vulkan/vk_expert_cache.h"
#include "vulkan/vk_formats.h"
#include "vulkan/vk_kv_cache.h"
#include "vulkan/vk_stream.h"
#include "vulkan/vk_weights.h"

namespace strata::vk {

// What a grouped product of few rows (linear.comp, linear_il.comp GROUPED)
// applies to its input as it loads it: an expert's activation of the gate
// values x points at and the up values `up` floats after them (mode:
// elementwise.comp's, activation.glsl; 0 for none).
struct LoadActivation {
  uint32_t mode = 0, up = 0;
  float a = 0, b = 0;
};

class VulkanBackend final : public Backend, private CacheIo {
 public:
  // vram_bytes: the expert cache's budget; < 0: half the device's memory on a
  // GPU with its own, none where the device computes in host memory.
  VulkanBackend(int index, int64_t vram_bytes);
  ~VulkanBackend() override;

  std::string name() const override { return "vulkan"; }
  int threads() const override { return 1; }
  bool groups_experts() const override { return true; }
  bool holds_expert(int64_t layer, int32_t expert) override;
  bool has_expert(int64_t layer, int32_t expert) const override;

  Tensor allocate(uint64_t size) override;
  void release_tensors() override;
  void plan(const StepLimits& limits) override;
  uint64_t scratch_bytes(const StepLimits& limits) const override;
  uint64_t allocated_bytes() const override;
  void upload(Tensor dst, const float* src) override;
  void download(Tensor src, float* dst) override;
  std::unique_ptr<KvCache> new_cache(const CacheShape& shape) override;
  uint64_t cache_bytes(const CacheShape& shape) const override;
  uint64_t cache_snapshot_bytes(const CacheShape& shape) const override;

  void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, Tensor out) override;
  void preload(const kernels::WeightMatrix& w) override;
  void linear(const kernels::WeightMatrix& w, Tensor x, size_t n, Tensor y) override;
  void linear_stacked(std::span<const kernels::WeightMatrix* const> ws, Tensor x, size_t n, Tensor y) override;
  void rms_norm(Tensor x, const float* weight, size_t rows, size_t width, float eps, Tensor y) override;
  void add_rms_norm(Tensor h, Tensor delta, const float* weight, size_t rows, size_t width, float eps,
                    Tensor y) override;
  void pick_largest(Tensor logits, size_t rows, size_t vocab, LogitPick* picks) override;
  void add(Tensor y, Tensor x) override;
  void copy(Tensor dst, Tensor src) override;
  void glu(const ExpertActivation& act, Tensor gate, Tensor up) override;
  void sigmoid_mul(Tensor y, Tensor gate) override;
  void depth_mix(std::span<const Tensor> blocks, Tensor partial, const float* query, size_t rows, size_t width,
                 float eps, Tensor out) override;
  void gqa_attention(const GqaAttend& op) override;
  void mla_attention(const MlaAttend& op) override;
  void kda_attention(const KdaAttend& op) override;
  void route(const RouteSpec& spec, Tensor logits, size_t n, int32_t* ids, float* weights) override;
  void gather_rows(Tensor src, size_t width, std::span<const uint32_t> rows, Tensor dst) override;
  void run_experts(std::span<const ExpertJob> jobs, const ExpertActivation& act, Tensor xs, Tensor ys, size_t hidden,
                   bool one_per_thread) override;
  void combine_experts(Tensor ys, size_t hidden, std::span<const uint32_t> slot_rows, const int32_t* ids,
                       const float* weights, size_t n, size_t k, Tensor shared, Tensor out) override;
  DeviceExpertStats expert_cache_stats() const override;
  void limit_staging(uint64_t bytes) override;
  uint64_t staging_bytes() const override;
  bool adopt_host_memory(std::span<const uint8_t> memory) override;
  void host_memory_written(const void* p, size_t bytes) override;
  uint64_t hold_budget() const override { return experts_->budget(); }
  uint64_t held_expert_bytes(const ExpertWeights& e) const override { return expert_bytes(e); }
  bool hold_layer(int64_t layer, size_t experts, const ExpertSource& next) override;
  bool routes_held(int64_t layer, size_t n, const RouteSpec& spec) const override;
  void route_held(const HeldRoute& op) override;
  void collect_routing() override { finish(); }
  void profile_phase(std::string_view label) override;
  void begin_independent() override { stream_->begin_independent(); }
  void end_independent() override { stream_->end_independent(); }

 private:
  struct Slot {
    Arena::Piece piece;
    uint64_t size = 0;  // floats
  };
  // The device address of `t`'s first value (strata::Error when it is not one of this backend's tensors).
  uint64_t address(Tensor t) const;
  const Slot& slot(Tensor t) const;
  // `bytes` of host staging for an op's arguments, valid until the stream
  // next finishes (finish() rewinds it). Nothing between an op's first
  // stage() and its last dispatch may finish: an op makes its weights
  // resident first, and calls make_room() (which may finish) only before it
  // stages anything.
  Arena::Piece stage(uint64_t bytes);
  // Whether the staging has passed its cap; make_room() then runs what is
  // recorded and reuses it.
  bool staging_full() const;
  void make_room();
  Arena::Piece stage(const void* src, uint64_t bytes);
  // Weights staged for this submission (host memory: they may be large).
  Arena::Piece stage_bulk(const void* src, uint64_t bytes);
  // Host bytes into device memory (mapped: written in place once the
  // recorded ops are done; else staged and copied in order), and back.
  // `fresh`: memory no recorded op refers to yet (a new weight copy), written
  // without waiting.
  void copy_in(VkBuffer buffer, uint64_t offset, uint8_t* mapped, const void* src, uint64_t bytes, bool fresh);
  // Whether [p, p + bytes) lies in adopted host memory (adopt_host_memory()),
  // and if so the device address of p there, after noting that recorded work
  // reads it (host_memory_written() runs that work first).
  bool in_host_memory(const void* p, uint64_t bytes) const;
  uint64_t host_memory_read(const void* p, uint64_t bytes);
  void copy_out(VkBuffer buffer, uint64_t offset, const uint8_t* mapped, void* dst, uint64_t bytes);
  // Runs what is recorded and waits; the staging is free again.
  void finish() override;
  // CacheIo, for the caches this backend makes.
  const Context& context() const override { return *ctx_; }
  void copy_on_device(const Buffer& src, const Buffer& dst, uint64_t bytes) override;
  void zero(const Buffer& b) override;
  void read(const Buffer& src, void* dst, uint64_t bytes) override;
  void write(const Buffer& dst, const void* src, uint64_t bytes) override;

  // How a product walks its rows (linear.comp): n rows x_stride and y_stride
  // values apart; with heads > 1, head h uses matrix rows from h·head_rows
  // and x, y from h·x_head, h·y_head.
  struct ProductShape {
    size_t n = 0;
    uint32_t x_stride = 0, y_stride = 0;
    uint32_t heads = 1, head_rows = 0, x_head = 0, y_head = 0;
  };
  // y = x · wᵀ for `w` at `ref` (resident or staged).
  void product(const WeightRef& ref, WeightFormat f, uint64_t x, uint64_t y, const ProductShape& shape);
  void product(const WeightRef& ref, WeightFormat f, uint64_t x, size_t n, uint64_t y) {
    product(ref, f, x, y, ProductShape{n, ref.in_cols, ref.out_rows});
  }
  // MLA's per-head products: per_head[h] (or rows [h·head_rows + row0, +
  // rows_per_head) of `fused`) times head h of x.
  void head_products(std::span<const kernels::WeightMatrix> per_head, const kernels::WeightMatrix* fused, int64_t row0,
                     int64_t rows_per_head, int64_t head_rows, uint64_t x, uint32_t x_stride, uint32_t x_head,
                     size_t n, uint64_t y, uint32_t y_stride, uint32_t y_head, int64_t heads);
  void check_positions(std::span<const Row> rows) const;
  // The rows' RowRefs (attention.glsl) for `layer`, staged.
  uint64_t row_refs(std::span<const Row> rows, int64_t layer, int64_t window);
  // The rows' rotation factors (Rope::rotation), staged; a step's layers
  // share one copy (the same rope and positions until the next finish()).
  uint64_t rotations(std::span<const Row> rows, const Rope* rope);
  // Rows of a step whose scores fit the planned score scratch at once.
  size_t score_rows(size_t heads) const;
  // Whether a row step's scores prep its heads themselves (the PREP builds
  // of gqa_row_scores.comp and mla_row_scores.comp): rows each their
  // sequence's only row (decode steps), heads (or latent parts) of at most
  // kPrepInScoresChannels, at most kPrepInScoresPositions seen.
  static bool preps_in_scores(std::span<const Row> rows, int64_t window, int64_t widest);
  // Whether an attention op's rows take the tiled path (gqa_scores.comp or
  // mla_scores.comp, attend_softmax.comp, attend_values.comp): many rows of one sequence,
  // each attending from position 0 of a cache without a ring.
  bool tiled_attention(std::span<const Row> rows, int64_t layer, int64_t window) const;
  // Attention's steps after the scores for rows row0 .. row0 + n of a chunk
  // (`rows` their RowRefs): each head's softmax (attend_softmax.comp, with
  // the heads' sinks where given), and the weighted sums of the values
  // (attend_row_values.comp: head h's d channels from kv head h / (heads /
  // kv_heads) of rows `width` values wide, of the key cache `from_keys`).
  void attend_softmax(uint64_t rows, uint64_t sinks, uint32_t heads, bool has_sinks, uint32_t row0, uint32_t n);
  void attend_row_values(uint64_t rows, uint64_t out, uint32_t heads, uint32_t kv_heads, uint32_t d, uint32_t width,
                         bool from_keys, uint32_t row0, uint32_t n);
  // The same sums for a prompt's chunk rows row0 .. row0 + n of one cache
  // (the tiled path, attend_values.comp; the same bits), whose rows see at
  // most `positions` positions.
  void attend_values(uint64_t rows, uint64_t out, uint32_t heads, uint32_t kv_heads, uint32_t d, uint32_t width,
                     bool from_keys, uint32_t row0, uint32_t n, uint32_t positions);
  // Rows' softmax then values outside the tiled path: one dispatch
  // (attend_row.comp) for heads up to kRowAttendWideChannels, else
  // attend_softmax and attend_row_values.
  void attend_rows(uint64_t rows, uint64_t sinks, bool has_sinks, uint64_t out, uint32_t heads, uint32_t kv_heads,
                   uint32_t d, uint32_t width, bool from_keys, uint32_t row0, uint32_t n);
  // The most positions a row of `rows` attends to.
  static int64_t most_positions(std::span<const Row> rows, int64_t window);
  // The tiled path for chunk rows [r0, r0 + m) of a GQA op, whose rows see
  // at most `positions` positions (q after gqa_prep, `rows` its RowRefs).
  void gqa_tiled(uint64_t q, uint64_t out, uint64_t rows, uint64_t sinks, const GqaAttend& op, size_t r0, size_t m,
                 uint32_t positions);
  // `w` staged in host memory for the current submission.
  WeightRef staged(const kernels::WeightMatrix& w);
  // A job's weights on the device: from the expert cache (copied there
  // first when it has room), else staged.
  ExpertCache::Entry expert_weights(const ExpertJob& job);
  // Device bytes of one expert's copy (its arrays, each 256-aligned).
  uint64_t expert_bytes(const ExpertWeights& e) const;
  // The kernel for a product of `rows` batch rows by a matrix of `outputs`
  // rows, and the tile a workgroup of it computes: linear.comp (4 rows of 4
  // outputs; built for one row too), linear_row.comp (one row of 8 outputs,
  // up to kStagedOutputs outputs; of 4 built SPREAD, up to kSpreadOutputs), linear_il.comp (4 rows of a group of 16
  // interleaved outputs), or from kTiledRows rows on, linear_mm.comp (32
  // rows of 32 outputs) and linear_il_mm.comp (64 rows of 64). Each layout's
  // kernels give a row the same bits.
  struct ProductKernel {
    std::string_view name;  // with "grouped_" for the grouped build (a name that lives for good)
    uint32_t outputs = 0, rows = 0;
    uint64_t groups_x(uint64_t out_rows) const { return (out_rows + outputs - 1) / outputs; }
    uint64_t groups_y(uint64_t n) const { return (n + rows - 1) / rows; }
  };
  static constexpr uint64_t kTiledRows = 16;
  // The most outputs a one-row product takes linear_row.comp for, and built
  // SPREAD for.
  static constexpr uint64_t kStagedOutputs = 16384, kSpreadOutputs = 512;
  static ProductKernel product_kernel(WeightFormat f, uint64_t rows, bool grouped, uint64_t outputs = 0);
  // One product of a grouped dispatch (jobs.glsl's Job): rows of x and y
  // contiguous.
  struct ProductJob {
    WeightFormat format;
    WeightRef w;
    uint64_t x = 0, y = 0;
    uint32_t n = 0;
  };
  // The activation `act` as a down product's load, with the up values `up`
  // floats after the gate values.
  static LoadActivation load_activation(const ExpertActivation& act, uint64_t up);
  // Whether kernel k (a grouped one) applies a LoadActivation: the kernels of
  // few rows, not the tiled ones.
  static bool activates_on_load(const ProductKernel& k) { return k.rows < kTiledRows; }
  // Each format's jobs in one dispatch (linear_grouped_<format>), in order.
  void grouped_products(std::span<const ProductJob> jobs, const LoadActivation& load = {});
  // Routed experts [a, b) of `jobs` whose weights are `w`: their gate/up
  // products, the activation and the down products, each one dispatch for
  // all of them; scratch rows from `offsets` (floats into each scratch part).
  void expert_group(std::span<const ExpertJob> jobs, std::span<const ExpertCache::Entry> w,
                    std::span<const uint64_t> offsets, size_t a, size_t b, uint64_t total,
                    const ExpertActivation& act, Tensor xs, Tensor ys, size_t hidden);
  // route.comp over n rows of logits, the ids and weights to device addresses;
  // with `held` (the device address of held.glsl's HeldArgs), its HELD build,
  // which writes each row's expert jobs too.
  void dispatch_route(const RouteSpec& spec, Tensor logits, size_t n, uint64_t ids, uint64_t weights,
                      uint64_t held = 0);
  // gather_rows.comp: `count` rows of `width` floats from src to dst, their
  // source rows listed at device address `rows`.
  void dispatch_gather(uint64_t src, uint64_t dst, uint64_t rows, size_t width, size_t count);
  // One grouped dispatch of kernel `k` over `count` jobs at device address
  // `jobs`, `groups_x` × `groups_y` workgroups each.
  void dispatch_grouped(const ProductKernel& k, uint64_t jobs, uint64_t groups_x, uint64_t groups_y,
                        uint64_t count, const LoadActivation& load = {});
  // The same with the grid (x, y, count) read on the device from `grid` at
  // `offset` bytes, written there by an earlier op.
  void dispatch_grouped_indirect(const ProductKernel& k, uint64_t jobs, const Arena::Piece& grid, uint64_t offset,
                                 const LoadActivation& load = {});
  // gate_up's alternating gate and up values into `gate` and `up` (count each).
  void split_gate_up(uint64_t gate, uint64_t up, uint64_t gate_up, uint64_t count);
  // combine.comp: out row r = its k slots' ys rows (slot_rows, weights: [n × k]
  // device arrays, sorted by id within a row) summed, + shared row r where given.
  // It is held back (outside an independent run): where the next op is the
  // add_rms_norm of its output into the stream, norm_rows() records both as
  // one dispatch (rms_norm.comp's COMBINE build, the same bits); anything else recorded
  // first records it alone (Stream::set_before_recording). A decode step
  // saves a dispatch a MoE layer so.
  void dispatch_combine(uint64_t ys, uint64_t slot_rows, uint64_t weights, size_t width, size_t n, size_t k,
                        Tensor shared, Tensor out);
  struct CombinePush {
    uint64_t ys, out, shared, rows, weights;
    uint32_t hidden, k, has_shared;
  };
  struct HeldBackCombine {
    CombinePush push;
    size_t n = 0;
  };
  std::optional<HeldBackCombine> held_back_combine_;
  void record_held_back_combine();
  // elementwise.comp's modes.
  enum class Elementwise : uint32_t { Add, Copy, SigmoidMul, SiluGlu, ClampedSwiGlu, Situ, SplitGateUp };
  void elementwise(Elementwise mode, uint64_t y, uint64_t x, uint64_t count, float a = 0, float b = 0);
  // rms_norm.comp over `rows` rows of x (first x += delta where delta is not 0).
  void norm_rows(uint64_t x, uint64_t delta, const float* weight, size_t rows, size_t width, float eps, uint64_t y);
  // The experts' activation over `count` gate values at g (up values at u), written over the gate.
  void activation(const ExpertActivation& act, uint64_t g, uint64_t u, uint64_t count);
  void check_step(size_t rows) const;
  // Whether route.comp takes `spec` (its shared arrays' sizes; a group
  // routing needs its bias); otherwise the host routes.
  static bool routes_on_gpu(const RouteSpec& spec);

  // Whether a layer of experts shaped as `first` can be held (its matrices
  // complete, gate and up alike, its width within the planned scratch).
  bool holdable(const ExpertWeights& first) const;
  // A layer held whole (hold_layer): its experts' WeightRefs on the device,
  // per expert gate, up, down, gate_up (held.glsl's table).
  struct HeldLayer {
    Buffer table;
    WeightFormat first = WeightFormat::F32, down = WeightFormat::F32;  // gate/up (or gate_up), down
    uint32_t first_rows = 0, down_rows = 0;                            // their outputs
    size_t width = 0;    // an expert's gate (= up) width
    size_t experts = 0;  // the layer's
    bool fused = false;
  };
  // Steps of at most this many rows make a job per row and slot
  // (route.comp's HELD build); larger ones group their rows by expert on the device
  // (held_groups.comp, route_held_groups).
  static constexpr size_t kHeldRows = 8;
  // A row's softmax and values go in one dispatch (attend_row.comp, a value
  // channel an invocation of 128) for heads of at most this many channels,
  // and of 512 (attend_row_wide) for heads of at most the wide count.
  static constexpr uint32_t kRowAttendChannels = 128;
  static constexpr uint32_t kRowAttendWideChannels = 512;
  // Rows seeing at most this many positions prep their heads in the scores'
  // dispatch (the PREP builds): each of its 16-position workgroups redoes a
  // head's prep, about a fifth of what scoring 16 positions loads, which at
  // some length outweighs the dispatch saved (a guess until measured:
  // docs/PERFORMANCE.md, session 45).
  static constexpr int64_t kPrepInScoresPositions = 4096;
  static constexpr int64_t kPrepInScoresChannels = 512;  // the PREP builds' PREP_MAX_DIM
  static constexpr uint64_t kJobBytes = 104;  // jobs.glsl's Job
  static constexpr uint64_t kHeldGridWords = 6;  // held_groups.comp's two product grids
  static uint64_t held_job_floats(const StepLimits& l);
  // route_held()'s ids and weights on their way to the host: copied there,
  // and the hits counted, when the stream finishes.
  struct HeldCopy {
    const uint8_t* from;
    int32_t* ids;
    float* weights;
    size_t count;
  };
  void collect_held_routes();
  // route_held() for a step of more than kHeldRows rows, after route.comp
  // wrote the choice at `ids` and `weights`.
  void route_held_groups(const HeldRoute& op, const HeldLayer& h, uint64_t ids, uint64_t weights);
  // How a held layer's jobs take its experts' gate and up (held.glsl's
  // GATE_UP_*): apart, fused, or fused and read as pairs by the down
  // product `k_down` (which activates on load).
  static uint32_t gate_up_mode(const HeldLayer& h, const ProductKernel& k_down);
  // A held layer's products from its device-made jobs (`jobs` an expert
  // part, at most `rows` rows each: first at `first`, down at `second`),
  // the activation and the combine of `ys` in the order at `slot_rows`.
  // With `grids`, the products' two grids are read there (first, then down:
  // three words each) instead of sized for `rows`.
  void held_experts(const HeldRoute& op, const HeldLayer& h, uint64_t first, uint64_t second, uint64_t rows,
                    uint64_t jobs, uint64_t ys, uint64_t slot_rows, uint64_t sorted,
                    const Arena::Piece* grids = nullptr);

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Arena> tensors_;
  std::unique_ptr<Arena> staging_;  // staged expert weights
  // Each staging arena's cap (limit_staging()); the arenas are made with
  // these, and make_room() and copy_in() run what is recorded before one
  // would pass its cap.
  uint64_t staging_cap_ = 0, upload_cap_ = 0, args_cap_ = 0;
  std::unique_ptr<Arena> args_;     // op arguments
  std::unique_ptr<Arena> uploads_;  // copies of resident weights and tensors on their way up
  std::unique_ptr<WeightStore> weights_;
  std::vector<Slot> slots_;
  uint64_t tensor_bytes_ = 0;
  StepLimits limits_;
  uint64_t scratch_floats_ = 0;
  Slot expert_act_;  // the planned activations of one expert job: gate, up (fused: gate_up too)
  Slot scores_;      // attention scores: score_rows() rows × heads × (context + 1)
  Slot mla_;         // MLA's absorbed queries, rotated queries and attended latents
  Slot route_;       // route.comp's ids, then weights: rows × experts_per_token each
  Slot held_jobs_;   // the held layers' jobs (first, then down), slot rows and weights for the combine
  std::unique_ptr<Buffer> readback_;
  // Adopted host memory (a streamed model's RAM expert cache), imported as a
  // buffer, and the parts of it that work recorded since the stream last
  // finished reads: begin -> end.
  std::unique_ptr<Buffer> host_memory_;
  std::map<const uint8_t*, const uint8_t*> host_reads_;
  std::unique_ptr<ExpertCache> experts_;
  DeviceExpertStats expert_stats_;
  uint64_t epoch_ = 0;  // finish() calls so far: what ops still to run may read was used in this one
  // The last rotations() staged: reused while epoch_, the rotation (each
  // layer has its own Rope, the same frequencies) and the positions are the
  // same: the host's sines and cosines once a step, not once a layer.
  struct StagedRotations {
    uint64_t epoch = ~uint64_t{0};
    std::vector<float> inv_freq;
    float attention_factor = 0;
    std::vector<int64_t> positions;
    uint64_t address = 0;
  } rotations_;
  std::unordered_map<int64_t, HeldLayer> held_;  // after ctx_: destroyed before the device
  std::vector<HeldCopy> held_copies_;
};

}  // namespace strata::vk
