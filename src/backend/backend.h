#pragma once
// The seam between the model and the machine that computes it. The model
// says what to compute (products with its weights, norms, attention over a
// sequence's cache, routing, a group of experts and their combine) on tensors
// the backend owns; the backend decides where and how. The CPU backend
// (backend/cpu_backend.h) is the first; a GPU backend implements the same
// interface.
//
// The contract, for every backend:
// - Memory. Activations live in tensors: f32 arrays in buffers the backend
//   allocates, named by handle (buffer, offset, size), never by pointer, so
//   the memory may be a device's. The model allocates every tensor a step
//   needs once, when it is planned (model/step_state.h), and plan() lets the
//   backend reserve its own scratch for steps of that size: no op allocates,
//   and allocated_bytes() is exactly what the RAM budget counts for them.
//   KV caches are made by the backend (new_cache()) and live where it
//   computes; only it reads or writes their rows.
// - Weights. WeightMatrix and the f32 vectors (norm weights, biases, sinks)
//   of the trunk are host memory that outlives the model: a device backend
//   may copy them once, keyed by address. A routed expert's weights are valid
//   only during the run_experts() call that names them: the expert cache
//   reuses the same memory for other experts, so they are never cached by
//   address.
// - Order. Ops take effect as if run one after another in the order they
//   are issued, from one thread. A backend may queue them and return early,
//   but it reads every host argument (op structs, spans, ids, weights) before
//   the call returns: the caller reuses them at once. route() and download()
//   have written their host outputs when they return.
// - Bits. Every op computes exactly the expression written here (products in
//   kernels/linear.h's accumulation order; the other orders and groupings
//   below), so a token's logits are the same bits at any thread count and
//   whatever other rows share its step. Transcendentals (exp, sin, cos, tanh)
//   are the C++ library's on the CPU; a backend whose own differ in the last
//   bit gives logits identical among its own runs, not to the CPU's, and says
//   so in its header.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/batch.h"
#include "backend/expert.h"
#include "backend/kv_cache.h"
#include "backend/rope.h"
#include "kernels/linear.h"

namespace strata {

class ThreadPool;

// `size` f32 values from `offset` in buffer `buffer` of a backend.
struct Tensor {
  uint32_t buffer = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  // Values [from, from + count) of this tensor (strata::Error past its end).
  Tensor slice(uint64_t from, uint64_t count) const;
  // Rows [first, first + count) of a row-major tensor of `width` columns.
  Tensor rows(uint64_t first, uint64_t count, uint64_t width) const { return slice(first * width, count * width); }
  bool empty() const { return size == 0; }
};

// The largest step the model will issue, for Backend::plan().
struct StepLimits {
  size_t rows = 0;             // rows of one step
  int64_t context = 0;         // positions a row may attend to
  size_t widest_in = 0;        // the widest input of any product (trunk or expert)
  size_t hidden = 0;
  size_t experts = 0;           // routed experts a router chooses from; 0 without MoE
  size_t experts_per_token = 0;
  size_t expert_width = 0;     // one routed expert's gate (= up) width; 0 without MoE
  bool fused_gate_up = false;  // experts store gate and up as one interleaved matrix
  size_t latent = 0, latent_rope = 0;  // MLA: kv_lora_rank, qk_rope_head_dim; 0 without MLA
  size_t kda_head_dim = 0;             // Kimi Delta Attention's head width; 0 without it
  size_t heads = 0;                    // the most heads of any attention layer
  size_t depth_values = 0;             // the most values a depth_mix() softmax runs over
};

// Grouped-query attention for one layer over a step's rows. q: [rows × heads
// × dim], k and v: [rows × kv_heads × dim], as projected. Per row, in order:
// each q and k head gets the per-head RMSNorm (when given) and the rotation
// at the row's position; k and v are written to the row's cache; then every
// head attends to the positions its row sees (the sliding window or all up to
// its own), a sink being one more logit in the softmax with no value. Scores
// are kernels::dot(q, key) · scale, softmax in kernels::softmax, and the
// output the axpys of the values in increasing position. out: [rows × heads
// × dim].
struct GqaAttend {
  int64_t layer = 0;
  std::span<const Row> rows;
  Tensor q, k, v, out;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  const Rope* rope = nullptr;
  const float* q_norm = nullptr;  // optional
  const float* k_norm = nullptr;  // optional
  float eps = 0;
  const float* sinks = nullptr;   // optional, per head
  int64_t window = 0;             // 0: no sliding window
  float scale = 1;
};

// Multi-head latent attention (absorbed) for one layer. q: [rows × heads ×
// (nope + rope_dim)]; kv: [rows × (latent + rope_dim)], the kv_a projection.
// Per row: RMSNorm of the latent part (kv_norm) and the rotated rope part
// become the cache row; each head's query is absorbed into latent space
// (q_nope · W_UK[h], kernels::linear_transposed on the fused kv_b, or the
// split k_b[h]), scores are q · k · scale over the query [q_latent | q_rope]
// and the cache row [latent | k_rope] (the CPU backend: one dot over both;
// a GPU's: the two parts' dots summed, the same value to rounding), softmax,
// the latent is the axpys of the cached latents, and W_UV[h] expands it.
// out: [rows × heads × v_dim]. Without `rope` (NoPE, Kimi K3) the rope parts
// are plain features: nothing is rotated.
struct MlaAttend {
  int64_t layer = 0;
  std::span<const Row> rows;
  Tensor q, kv, out;
  int64_t heads = 0, nope = 0, rope_dim = 0, latent = 0, v_dim = 0;
  const Rope* rope = nullptr;  // null: NoPE
  const float* kv_norm = nullptr;
  float eps = 0;
  float scale = 1;
  const kernels::WeightMatrix* kv_b = nullptr;  // fused [heads × (nope + v_dim), latent], or null and:
  std::span<const kernels::WeightMatrix> k_b;   // per head [latent × nope]
  std::span<const kernels::WeightMatrix> v_b;   // per head [v_dim × latent]
};

// Kimi Delta Attention for one layer (Kimi K3), each sequence's rows in
// position order against the recurrent state in its cache (CacheShape::
// state_floats: heads·head_dim² for S, then 3·(conv_kernel-1)·heads·head_dim
// for the q, k and v convolutions' last inputs). q, k, v: [rows × heads ×
// head_dim] as projected; decay: [rows × heads × head_dim], f_b(f_a(x));
// beta: [rows × heads], b_proj(x); gate: [rows × heads × head_dim],
// g_proj(x). Per row and head, in this order: each of q, k, v through its
// causal depthwise convolution (weights [channels × kernel], the last tap on
// the current input) and SiLU; g = lower_bound · sigmoid(e^A_log[h] ·
// (decay + dt_bias)); b = sigmoid(beta); q = q / sqrt(Σq² + 1e-6) ·
// head_dim^-½, k = k / sqrt(Σk² + 1e-6); S[k][·] *= e^g[k]; S += k ⊗ b·(v -
// Sᵀk); o = Sᵀq; out = rms_norm(o, o_norm, eps) · sigmoid(gate). S in f32.
// A sequence's rows must be consecutive in the step.
struct KdaAttend {
  int64_t layer = 0;
  std::span<const Row> rows;
  Tensor q, k, v, decay, beta, gate, out;
  int64_t heads = 0, head_dim = 0, conv_kernel = 0;
  const float* conv[3] = {nullptr, nullptr, nullptr};  // q, k, v: [heads·head_dim × conv_kernel]
  const float* a_log = nullptr;    // [heads]
  const float* dt_bias = nullptr;  // [heads·head_dim]
  const float* o_norm = nullptr;   // [head_dim], shared by the heads
  float lower_bound = -5.0f;
  float eps = 1e-5f;
};

// Recurrent state values per sequence a KDA layer keeps (KdaAttend).
inline int64_t kda_state_floats(int64_t heads, int64_t head_dim, int64_t conv_kernel) {
  return heads * head_dim * head_dim + 3 * (conv_kernel - 1) * heads * head_dim;
}

// How router logits become each row's k experts and their weights.
// SigmoidGroup (DeepSeek-V3): s = sigmoid(logit); choice = s + bias; with
// groups > 1 only the topk_groups groups with the best sum of their two best
// choices compete; the k best choices win (ties to the lower id); weights s,
// divided by (their sum + 1e-20) if normalize, times scale.
// Softmax (Qwen3-MoE): p = softmax(logits) (in place); the k best p; divided
// by their sum if normalize. TopkSoftmax (gpt-oss): the k best logits,
// softmax over those k.
struct RouteSpec {
  enum class Kind { SigmoidGroup, Softmax, TopkSoftmax } kind = Kind::Softmax;
  int64_t experts = 0, k = 0;
  int64_t groups = 1, topk_groups = 1;
  const float* bias = nullptr;  // SigmoidGroup: steers the choice only
  bool normalize = false;
  float scale = 1;
};

// One routed expert's rows: rows [first, first + rows) of the gathered
// inputs go through `weights`; the results go to the same rows of the output.
struct ExpertJob {
  const ExpertWeights* weights = nullptr;
  size_t first = 0, rows = 0;
  // Which expert it is (-1: unknown). A model's (layer, expert) always has
  // the same weights, so a device backend may keep a copy under this key
  // (its expert cache) though the host memory is reused.
  int64_t layer = -1;
  int32_t expert = -1;
  // The backend said it holds this expert (Backend::holds_expert): `weights`
  // then only describes the layer's expert shapes and formats (another
  // expert's arrays) and the backend computes from its own copy.
  bool held = false;
};

// The checks every backend's run_experts() makes of a job before any runs:
// throws strata::Error when its weights' shapes disagree with `hidden` or its
// rows lie outside xs or ys. Returns its gate (= up) width; *fused: whether
// gate and up are one interleaved matrix.
size_t checked_expert_width(const ExpertJob& job, size_t hidden, Tensor xs, Tensor ys, bool* fused);

// A device backend's expert cache (VRAM), counted since the backend began.
struct DeviceExpertStats {
  uint64_t hits = 0;            // expert runs whose weights were already on the device
  uint64_t uploads = 0;         // experts copied to the device's cache
  uint64_t bytes_uploaded = 0;
  uint64_t staged = 0;          // expert runs read from host memory (no cache, or it could not hold them)
  uint64_t capacity_bytes = 0;  // the cache's budget (--vram)
  uint64_t held_routes = 0;     // layer steps routed and run on the device alone (route_held)
  uint64_t host_staging_bytes = 0;  // host memory its staging buffers hold now (at most staging_bytes())
  // Expert bytes uploaded or staged that the device read in place from the
  // RAM cache (Backend::adopt_host_memory) instead of through its staging.
  uint64_t bytes_in_place = 0;
  // Every op's compute dispatches, and the barriers between commands (not
  // only the experts': a step's whole cost in commands).
  uint64_t dispatches = 0;
  uint64_t barriers = 0;
};

// A MoE layer's routing, routed experts and combine in one call, on a device
// that holds all of the layer's experts (Backend::route_held).
struct HeldRoute {
  RouteSpec spec;
  Tensor logits;  // the router's [n × experts]
  size_t n = 0;
  int64_t layer = 0;
  ExpertActivation act;
  Tensor x;           // the experts' input [n × width]
  size_t width = 0;   // of x's rows and the experts' outputs (hidden, or a latent MoE's width)
  Tensor ys;          // scratch for the experts' outputs [n·k × width]
  Tensor shared;      // added to the combine where given [n × width]
  Tensor out;         // [n × width]
  int32_t* ids = nullptr;  // [n × k] host memory, filled by the next collect_routing()
  float* weights = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Threads the backend computes with (the CPU's pool).
  virtual int threads() const = 0;
  // That pool, for host work between the backend's calls on the step's
  // thread (the expert cache's rewrites of landed experts); nullptr for a
  // backend that computes elsewhere.
  virtual ThreadPool* host_pool() { return nullptr; }
  // Makes `w` resident in the backend's own memory now rather than at its
  // first use (a GPU uploads it; the CPU reads weights in place): the
  // output head and the token table, whose first use would otherwise put
  // their upload (and an untied table's read from the drive) inside the
  // first prompt's time. Never changes results.
  virtual void preload(const kernels::WeightMatrix& w) { (void)w; }
  // Whether the trunk's matrices should be rewritten into the interleaved
  // layouts (kernels/interleave.h), faster on the CPU. Routed experts take
  // them on every backend, as packs store them (every backend reads them).
  virtual bool wants_interleaved() const { return false; }
  // The end of a phase (a warm-up, say) for a backend's own profiling where
  // it was asked for (STRATA_VK_PROFILE): what ran so far is reported under
  // `label` and counting starts afresh. No effect on results.
  virtual void profile_phase(std::string_view label) { (void)label; }
  // Whether the backend keeps (layer, expert) in its own memory (a GPU's
  // expert cache), so it needs no fetch: true promises the copy to the next
  // run_experts() call if that call names it in a held job and no other
  // run_experts() call comes between.
  virtual bool holds_expert(int64_t layer, int32_t expert) {
    (void)layer;
    (void)expert;
    return false;
  }
  // Whether it has (layer, expert) in its own memory now, changing nothing
  // (for guesses: a held expert needs no read ahead).
  virtual bool has_expert(int64_t layer, int32_t expert) const {
    (void)layer;
    (void)expert;
    return false;
  }
  // Whether run_experts() computes many experts in a few dispatches (a GPU):
  // then it is given every expert that is ready at once, never one at a time.
  virtual bool groups_experts() const { return false; }
  // Its expert cache's counts (all zero for a backend that computes in host memory).
  virtual DeviceExpertStats expert_cache_stats() const { return {}; }
  // Bytes of its own memory that routed experts kept for good may take, and
  // what one expert takes there (0, 0 on a backend that keeps none).
  virtual uint64_t hold_budget() const { return 0; }
  virtual uint64_t held_expert_bytes(const ExpertWeights& e) const {
    (void)e;
    return 0;
  }
  // hold_layer()'s source of a layer's experts: fills `out` with the next
  // ones as (expert id, weights), blocking while none is ready, each valid
  // until the next call (a streaming provider reuses its memory); 0 once
  // every expert has been handed out.
  using ExpertBatch = std::vector<std::pair<int, const ExpertWeights*>>;
  using ExpertSource = std::function<size_t(ExpertBatch& out)>;
  // Takes all `experts` routed experts of a layer (ids 0 .. experts-1, in
  // any order, from `next`) into its own memory for good, where it has room
  // for them (a GPU's expert cache whose budget holds every expert): true
  // when it holds the whole layer from now on, false (holding none for
  // good) otherwise. Each expert's weights are read while it is current only.
  virtual bool hold_layer(int64_t layer, size_t experts, const ExpertSource& next) {
    (void)layer;
    (void)experts;
    (void)next;
    return false;
  }
  // Whether route_held() runs n rows of `layer` routed by `spec` (a layer it
  // holds whole, a step it can group, a routing it can do).
  virtual bool routes_held(int64_t layer, size_t n, const RouteSpec& spec) const {
    (void)layer;
    (void)n;
    (void)spec;
    return false;
  }
  // route(), then run_experts() over every row's k experts and
  // combine_experts(), with the same bits, without the host waiting for the
  // choice: ids and weights come back at the next collect_routing() (until
  // then they must stay valid and are not read). Only where routes_held().
  virtual void route_held(const HeldRoute& op) { (void)op; }
  // Waits for the device's work; the ids and weights of every route_held()
  // since the last call are in place when it returns.
  virtual void collect_routing() {}
  // The ops recorded between the two calls are independent: none reads what
  // another writes, none writes what another writes. A device may then run
  // them at once (no barrier between them). Only linear() calls: an op of
  // several dependent steps would lose its own order. Nested pairs count as one.
  virtual void begin_independent() {}
  virtual void end_independent() {}

  // --- memory ---
  // Host memory a device backend keeps to move data to and from its device
  // (weights staged for a submission, uploads, op arguments), besides its
  // tensors and caches. limit_staging(bytes), before the first step, keeps
  // it within `bytes` (a RAM budget's share); staging_bytes() is then the
  // most it holds (what the budget counts). None on the CPU.
  virtual void limit_staging(uint64_t bytes) { (void)bytes; }
  virtual uint64_t staging_bytes() const { return 0; }
  // Host memory that routed experts are handed out from (a streamed model's
  // RAM expert cache), which a device backend may read in place instead of
  // copying each expert into its staging: a GPU copies from it by DMA, when
  // the work recorded runs. Returns whether it does; then every overwrite of
  // that memory is announced first by host_memory_written(), and an empty
  // span gives it back (the work recorded runs first) before it is freed.
  virtual bool adopt_host_memory(std::span<const uint8_t> memory) {
    (void)memory;
    return false;
  }
  // [p, p + bytes) of adopted memory, a part no expert's bytes cross (a
  // cache slot), is about to be overwritten: what was recorded that reads it
  // runs first.
  virtual void host_memory_written(const void* p, size_t bytes) {
    (void)p;
    (void)bytes;
  }
  // A tensor of `size` values (contents undefined until written), held until
  // release_tensors(). Memory a step never reaches need not be touched.
  virtual Tensor allocate(uint64_t size) = 0;
  // Frees every tensor allocated so far; their handles are no longer valid.
  // A backend with copies of host weights in its own memory forgets them too.
  virtual void release_tensors() = 0;
  // Reserves the backend's own scratch for steps within `limits` (replacing
  // any earlier plan). Ops of a larger step throw strata::Error.
  virtual void plan(const StepLimits& limits) = 0;
  // Bytes plan(limits) reserves, without reserving them.
  virtual uint64_t scratch_bytes(const StepLimits& limits) const = 0;
  // Bytes of every tensor allocated and of the planned scratch.
  virtual uint64_t allocated_bytes() const = 0;
  virtual void upload(Tensor dst, const float* src) = 0;
  // Copies `src` to host memory (waits for the ops that write it).
  virtual void download(Tensor src, float* dst) = 0;
  virtual std::unique_ptr<KvCache> new_cache(const CacheShape& shape) = 0;
  // Bytes a cache of `shape` holds once it reaches max_positions.
  virtual uint64_t cache_bytes(const CacheShape& shape) const = 0;
  // Bytes one snapshot of such a cache holds (KvCache::snapshot(): the
  // recurrent states; 0 without).
  virtual uint64_t cache_snapshot_bytes(const CacheShape& shape) const = 0;

  // --- ops ---
  // out row i = the token table's row tokens[i], dequantized.
  virtual void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, Tensor out) = 0;
  // y [n × w.out] = x [n × w.in] · wᵀ (+ bias), kernels/linear.h.
  virtual void linear(const kernels::WeightMatrix& w, Tensor x, size_t n, Tensor y) = 0;
  // The products of several matrices of one x (q, k and v): y holds each
  // matrix's n rows of outputs after the previous matrix's, n · Σ out in
  // all. The same bits as a linear() each, which is the default; a backend
  // may run them as one product where that is faster (the Vulkan backend
  // for one row: one dispatch instead of one a matrix).
  virtual void linear_stacked(std::span<const kernels::WeightMatrix* const> ws, Tensor x, size_t n, Tensor y);
  // y row i = kernels::rms_norm(x row i, weight); x and y may be the same.
  virtual void rms_norm(Tensor x, const float* weight, size_t rows, size_t width, float eps, Tensor y) = 0;
  // picks[i] = the LogitPick of row i of `logits` (rows × vocab). By default
  // the rows are downloaded and reduced on the host (largest_logit()).
  virtual void pick_largest(Tensor logits, size_t rows, size_t vocab, LogitPick* picks);
  // y[i] += x[i].
  virtual void add(Tensor y, Tensor x) = 0;
  // add(h, delta), then rms_norm(h, weight, rows, width, eps, y): the
  // residual stream's add and the next norm in one op (a GPU saves a
  // dispatch), with their bits.
  virtual void add_rms_norm(Tensor h, Tensor delta, const float* weight, size_t rows, size_t width, float eps,
                            Tensor y) {
    add(h, delta);
    rms_norm(h, weight, rows, width, eps, y);
  }
  // dst = src (the same size).
  virtual void copy(Tensor dst, Tensor src) = 0;
  // gate[i] = act(gate[i], up[i]) (apply_activation, backend/expert.h).
  virtual void glu(const ExpertActivation& act, Tensor gate, Tensor up) = 0;
  // y[i] *= sigmoid(gate[i]).
  virtual void sigmoid_mul(Tensor y, Tensor gate) = 0;
  // Attention over depth (Kimi K3's AttnRes), per row: the values are the
  // row in each of `blocks` and then in `partial`; score_i = (v_i ·
  // query) / sqrt(mean(v_i²) + eps); out = Σ_i softmax(score)_i · v_i, in
  // that order.
  virtual void depth_mix(std::span<const Tensor> blocks, Tensor partial, const float* query, size_t rows,
                         size_t width, float eps, Tensor out) = 0;
  virtual void gqa_attention(const GqaAttend& op) = 0;
  virtual void mla_attention(const MlaAttend& op) = 0;
  virtual void kda_attention(const KdaAttend& op) = 0;
  // ids and weights: [n × spec.k], host memory, written when it returns.
  // A row's slots come in choice order: the best first, ties to the lower
  // id (the weights' sum and softmax run in that order).
  virtual void route(const RouteSpec& spec, Tensor logits, size_t n, int32_t* ids, float* weights) = 0;
  // dst row j = src row rows[j] (width values each).
  virtual void gather_rows(Tensor src, size_t width, std::span<const uint32_t> rows, Tensor dst) = 0;
  // For each job, ys rows = down(act(gate(xs rows), up(xs rows))) (hidden
  // values a row in and out; ys may be xs: a job reads its rows before it
  // writes them, and jobs own disjoint rows). one_per_thread: each expert on one thread, many
  // at once (small token groups); otherwise the jobs' products spread over
  // the threads together. Same bits either way.
  virtual void run_experts(std::span<const ExpertJob> jobs, const ExpertActivation& act, Tensor xs, Tensor ys,
                           size_t hidden, bool one_per_thread) = 0;
  // out row r = Σ over its k slots, in increasing expert id (never arrival
  // order), of ys row slot_rows[r·k + j] · weights[r·k + j], summed from 0 in
  // f32 one product at a time (o += y · w, not fused); then + shared row r
  // where shared is given.
  virtual void combine_experts(Tensor ys, size_t hidden, std::span<const uint32_t> slot_rows, const int32_t* ids,
                               const float* weights, size_t n, size_t k, Tensor shared, Tensor out) = 0;
};

// begin_independent() ... end_independent() for a scope.
class IndependentOps {
 public:
  explicit IndependentOps(Backend& b) : b_(b) { b_.begin_independent(); }
  ~IndependentOps() { b_.end_independent(); }
  IndependentOps(const IndependentOps&) = delete;
  IndependentOps& operator=(const IndependentOps&) = delete;

 private:
  Backend& b_;
};

// The CPU backend on `threads` threads (0: every hardware thread).
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace strata
