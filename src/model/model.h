#pragma once
// A loaded model: configuration, resident trunk weights, an expert provider,
// and the forward pass over a batch of rows, layer by layer:
// norm → attention (KV) → norm → dense MLP or router + experts.
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/kv_cache.h"
#include "formats/tensor.h"
#include "kernels/linear.h"
#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/compute_device.h"
#include "model/expert_provider.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/mtp_layer.h"
#include "model/route_observer.h"
#include "model/step_state.h"
#include "model/weights.h"

namespace strata {

// forward() ended a pass early because Model::set_pass_stop()'s check said so.
class PassStopped : public std::exception {
 public:
  const char* what() const noexcept override { return "the pass was stopped before its end"; }
};

// How a model runs, as runtime/loader.h planned it from the load options.
struct ModelSetup {
  int threads = 0;           // 0: all hardware threads
  ComputeDevice device;      // --device
  int64_t context = 4096;    // positions a sequence may reach (--ctx); >= 1
  int64_t max_batch = 4096;  // rows of one sequence per step (prefill chunk); >= 1
  // Rows of one pass (Model::forward: layer by layer over steps of
  // max_batch rows), at most the context; 0: max_batch.
  int64_t max_pass = 0;
};

// How the RAM budget was split (all bytes; zero without a budget). `step`:
// the planned step state and backend scratch (Model::step_bytes(), exact);
// `baseline`: the process's own memory before the model was loaded, measured.
struct MemoryPlan {
  // staging: a device backend's host staging (Backend::staging_bytes()).
  uint64_t budget = 0, trunk = 0, kv = 0, step = 0, staging = 0, baseline = 0, cache = 0;
};

// A sequence's cache for a model of config `c` at `context` positions, in
// steps of up to `max_batch` rows (what Model::new_cache() makes): its bytes
// are the backend's cache_bytes() of it.
CacheShape cache_shape_of(const ModelConfig& c, int64_t context, int64_t max_batch);

struct Layer {
  const float* attn_norm = nullptr;
  const float* mlp_norm = nullptr;
  std::unique_ptr<Attention> attention;
  std::optional<SwiGlu> dense;    // dense layers
  std::unique_ptr<MoeBlock> moe;  // routed layers
  // AttnRes (Kimi K3): the depth mixes' queries (norm weight ⊙ projection)
  // before attention and before the feed-forward block; empty without.
  std::vector<float> attn_res_query, mlp_res_query;
};

// A next-token-prediction layer (model/mtp_layer.h): a decoder layer bound
// like the others (index num_hidden_layers + k, its experts in RAM) and its
// own weights. Run by mtp_forward() for drafting; forward() does not run it.
struct MtpLayer {
  Layer layer;
  MtpHead head;
};

// An AttnRes depth mix's query: _apply_attn_res scores with norm.weight ⊙
// proj.weight, one vector (the tensors of `layer`, or -1 for the model's own).
std::vector<float> depth_query(WeightBinder& w, const ModelConfig& c, TensorKind norm, TensorKind proj, int64_t layer);

// A step's sizes and its backend's limits for `rows` rows, as a Model of
// config `c` at `context` positions plans them (`held`: its backend may hold
// layers, and then routes any step of them). Model::step_bytes() is
// StepState::bytes() of the one plus its backend's scratch for the other;
// `strata budget` plans the CPU's step from these without building a Model.
// `span`: the rows of a pass (StepSizes::span; 0: `rows`).
StepSizes plan_step_sizes(const ModelConfig& c, size_t rows, bool held, size_t span = 0);
StepLimits plan_step_limits(const ModelConfig& c, const StepSizes& z, int64_t context);

// A model is built in two steps by runtime/loader.h: the constructor takes
// the checkpoint and binds the trunk's token table, final norm and output
// head; attach_experts() hands it the provider its MoE layers fetch routed
// experts from, and binds the layers. Only then can it run.
class Model {
 public:
  Model(Checkpoint checkpoint, const ModelSetup& setup);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Binds every layer against `experts` and plans the step state and the
  // backend's scratch for steps of max_batch_rows() rows. `prefetch`: every
  // step guesses the next MoE layer's experts while this layer's reads are
  // in flight (ExpertProvider::prefetch). `plan`: how the budget was split, for the
  // stats.
  void attach_experts(std::unique_ptr<ExpertProvider> experts, bool prefetch, const MemoryPlan& plan);
  // Whether attach_experts() handed every MoE layer to the backend whole
  // (Backend::hold_layer: a GPU whose budget takes every routed expert).
  bool experts_held_on_device() const {
    size_t moe = 0;
    for (const Layer& l : layers_) moe += l.moe ? 1 : 0;
    return moe > 0 && held_layers_ == moe;
  }
  // Binds every layer and every routed expert as attach_experts() and the
  // expert providers would, and lets go of each layer's at once: what
  // `strata pack` runs on its source before writing anything, so that a
  // tensor that is missing, empty or not of the shape the config implies (a
  // transposed one) is an error naming it and its file, never a pack that
  // fails when it is loaded. The model stays unable to run.
  void check_tensors();
  // Bytes the step state and the backend's scratch take for steps of `rows`
  // rows in passes of `span` (0, 0: max_batch_rows() and max_pass_rows();
  // rows alone: passes as wide as a step), as attach_experts() plans them
  // (the layers need not be bound yet: computed from the config).
  uint64_t step_bytes(size_t rows = 0, size_t span = 0) const;
  // What attach_experts() did allocate for it: the step state's tensors and
  // arrays and the backend's scratch (equal to step_bytes()).
  uint64_t allocated_step_bytes() const { return backend_->allocated_bytes() + step_.host_bytes(); }
  // Changes the rows of one step and of one pass (0: as one step), before
  // attach_experts() (the loader fits them to a budget).
  void set_max_batch_rows(int64_t rows, int64_t pass = 0);
  // Streaming: the untied token table is read a row per step straight from
  // its mapped file and those pages are let go again, so it is not held in
  // RAM. False (and nothing changes) when the table is tied or was converted.
  bool read_token_table_by_rows();
  // A device's copies of the output head and the token table, made now
  // rather than in the first prompt (Backend::preload); an untied table read
  // by rows is read whole for it, and its pages let go again.
  void preload_head_and_table();
  // Whether read_token_table_by_rows() took effect.
  bool token_table_by_rows() const { return embed_rows_only_; }

  // What the loader needs to plan around the trunk.
  Checkpoint::Kind kind() const { return kind_; }
  const TensorSource& tensors() const { return *source_; }
  WeightBinder& binder() { return binder_; }
  const kernels::WeightMatrix& token_table() const { return embed_; }

  const ModelConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  // What the weights are, wherever they are (model/weights_identity.h).
  const std::string& identity() const { return identity_; }
  // A pack whose weights were re-quantized says so in every output: the
  // loader sets its one-line label (pack/lossy.h); "" for exact weights.
  const std::string& approximation() const { return approximation_; }
  void set_approximation(std::string label) { approximation_ = std::move(label); }
  // Where config.json, generation_config.json and the tokenizer are (the
  // model directory, or a pack's trunk).
  const std::filesystem::path& trunk_path() const { return trunk_path_; }
  std::unique_ptr<KvCache> new_cache() const;
  // Bytes one sequence's cache holds once it reaches context() (the budget's KV share).
  uint64_t cache_bytes_at_context() const;
  // Bytes one snapshot of such a cache holds (its recurrent states; 0 for a
  // model without): what a session keeps besides its cache (runtime/session.h).
  uint64_t cache_snapshot_bytes() const;
  // Positions a sequence may reach (--ctx).
  int64_t context() const { return context_; }
  // Rows of one sequence a forward step may take.
  int64_t max_batch_rows() const { return max_batch_; }
  // Rows one pass may take (>= max_batch_rows()): a prompt up to this long is
  // prefilled in one pass, layer by layer, so a streamed layer's experts are
  // read once for all of it; a longer one in passes of this many.
  int64_t max_pass_rows() const { return max_pass_; }
  bool streaming() const { return experts_ && experts_->streams(); }
  // Whether `layer`'s routed experts are read into the expert cache when
  // routed to (not held with the trunk).
  bool streams_experts_of(int64_t layer) const { return streaming() && experts_->serves_layer(layer); }
  ExpertStats expert_stats() const {
    ExpertStats s = experts_ ? experts_->stats() : ExpertStats{};
    s.device = backend_->expert_cache_stats();
    return s;
  }
  void begin_expert_epoch() {
    if (experts_) experts_->begin_epoch();
  }
  // ExpertProvider::settle().
  void settle_expert_reads() {
    if (experts_) experts_->settle();
  }
  const MemoryPlan& memory_plan() const { return plan_; }
  // Writes this run's expert heat for the next run (streaming models only).
  // The heat only makes the next start faster, so a heat that cannot be
  // written (a read-only or missing home, a full disk) is not an error of
  // the run: the reason comes back, for one warning line; "" when written.
  [[nodiscard]] std::string save_heat() const {
    try {
      if (experts_) experts_->save_heat();
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  // Feeds tokens[from..] of one sequence at positions from.. into `cache`, in
  // passes of max_pass_rows() (the same bits as one big batch: the kernels
  // are batch-invariant), and writes the last token's logits. Stops early,
  // returning false, when `cancelled` says so between passes.
  bool prefill(std::span<const int32_t> tokens, size_t from, KvCache& cache, float* logits,
               const std::function<bool()>& cancelled = {});

  // Runs one step over `rows`; writes vocab_size logits for each row with
  // want_logits, in row order, into `logits`, and hidden_size values for each
  // row with want_hidden, in row order, into `hidden`: its final hidden state
  // after the final norm (what the output head reads; computed apart, so the
  // logits are the same bits either way). Advances each cache's length.
  // Rows run in passes of up to max_pass_rows(), in order; a pass of more
  // than max_batch_rows() rows runs layer by layer, each layer over its
  // parts of max_batch_rows() rows in order before the next layer (a part
  // attends to the earlier parts' rows, which that layer wrote first), so a
  // streamed layer's experts are fetched for its parts back to back and read
  // once where the expert cache holds them (ExpertProvider::keep_layer).
  // Either way the same bits: rows are batch-invariant. A row with pick_only gets its
  // LogitPick in `picks` (one per row with want_logits, in row order; its
  // place in `logits` may be left unwritten).
  // Throws PassStopped where set_pass_stop()'s check ended a pass.
  void forward(std::span<const Row> rows, float* logits, float* hidden = nullptr, LogitPick* picks = nullptr);

  // Next-token-prediction layer `k` (model/mtp_layer.h; mtp_layers()[k]) over
  // `rows`, each in a cache of its own shape (new_mtp_cache()): the row at
  // position p feeds token t_{p+1} (Row::token) and hidden state h_p
  // (`hidden`, one hidden_size row per row: the main model's final hidden
  // state at p, forward()'s want_hidden, or an earlier MTP row's output when
  // drafting further ahead), and attends over its cache's rows up to p at
  // RoPE position p. Rows with want_logits get vocab_size logits for the
  // token at p+2 (into `logits`, in row order) and their output hidden state
  // (the block's, before shared_head.norm: the h a chained next row takes,
  // as vLLM's MTP proposer feeds it) into `out_hidden`. Advances each cache's
  // length; a step of more than max_batch_rows() rows runs as several. Runs
  // on the forward pass's step state: never during forward().
  void mtp_forward(size_t k, std::span<const Row> rows, const float* hidden, float* logits, float* out_hidden);
  // A cache for MTP rows: one MLA layer's rows up to context().
  std::unique_ptr<KvCache> new_mtp_cache() const;
  uint64_t mtp_cache_bytes_at_context() const;

  Backend& backend() { return *backend_; }
  // Why the model computes on the CPU though --device auto asked for a GPU
  // (empty otherwise): one line for the user.
  const std::string& device_notice() const { return device_notice_; }

  // Router traces: `o` (or null) sees every MoE layer's choices from the
  // next step on; it must outlive the steps it sees.
  void set_route_observer(RouteObserver* o) { route_observer_ = o; }

  // A pass of several parts (a long prompt, layer by layer) can take long, so
  // before each of its layers but the first `stop` (or none) is asked whether
  // to go on. When it says stop, the device's recorded work is waited for and
  // forward() throws PassStopped: what the caches of the pass's rows hold is
  // then undefined, and the caller drops every sequence that had rows in it.
  // A pass of one part (a step) always runs to its end.
  void set_pass_stop(std::function<bool()> stop) { pass_stop_ = std::move(stop); }

  // The next-token-prediction layers (ModelConfig::num_nextn_predict_layers),
  // bound by attach_experts(); empty for a model without.
  std::span<const MtpLayer> mtp_layers() const { return mtp_; }

 private:
  // One pass of at most max_pass_rows() rows.
  void forward_pass(std::span<const Row> rows, float* logits, float* hidden, LogitPick* picks);
  // A step's first work: the rows' caches grown to hold them, their tokens taken.
  void take_rows(std::span<const Row> rows);
  // One MTP step of at most max_batch_rows() rows (model/mtp_forward.cpp).
  void mtp_step(const MtpLayer& mtp, std::span<const Row> rows, const float* hidden, float* logits,
                float* out_hidden);
  // Logits of the rows of `last` whose Row wants them: norm, then `head`, a
  // planned number of rows at a time, downloaded into `logits` in row order;
  // where every row of a part is pick_only, only their picks (into `picks`).
  void output_head(Tensor last, std::span<const Row> rows, const float* norm, const kernels::WeightMatrix& head,
                   float* logits, LogitPick* picks = nullptr);
  // Checks rows before any runs: tokens in the vocabulary, a cache, positions in it.
  void check_rows(std::span<const Row> rows) const;
  // Starts reading the experts layer `next` will probably pick for `h`
  // (`pass`: for a pass of several parts, ExpertProvider::prefetch); false
  // where the provider cut the guess short.
  bool prefetch_for(size_t next, Tensor h, size_t n, bool pass);
  // Where the backend's expert memory holds every routed expert (a GPU's
  // --vram), hands it each MoE layer whole (Backend::hold_layer).
  void hold_experts_on_device();
  // The choices of the layers the backend routed itself this step
  // (step_.held_routing): waited for, counted, reported to the observer.
  void collect_held_routing(std::span<const Row> rows);
  CacheShape cache_shape() const;
  CacheShape mtp_cache_shape() const;
  // What the step state holds, for steps of `rows` rows (plan_step_sizes and
  // plan_step_limits for this model and backend).
  StepSizes step_sizes(size_t rows, size_t span) const {
    return plan_step_sizes(config_, rows, backend_->hold_budget() > 0, span);
  }
  StepLimits step_limits(const StepSizes& sizes) const { return plan_step_limits(config_, sizes, context_); }

  std::filesystem::path dir_;
  std::string identity_;
  std::string approximation_;
  std::string device_notice_;
  ModelConfig config_;
  std::unique_ptr<TensorSource> source_;
  WeightBinder binder_;
  std::unique_ptr<Backend> backend_;
  StepState step_;
  kernels::WeightMatrix embed_, lm_head_;
  bool embed_rows_only_ = false;  // streaming: the token table's pages are dropped after each lookup
  const float* final_norm_ = nullptr;
  std::vector<float> output_res_query_;  // AttnRes: the mix before the final norm
  std::unique_ptr<ExpertProvider> experts_;
  std::vector<Layer> layers_;
  std::unique_ptr<ExpertProvider> mtp_experts_;  // the MTP layers' routed experts, in RAM
  std::vector<MtpLayer> mtp_;
  Checkpoint::Kind kind_ = Checkpoint::Kind::HuggingFace;
  std::filesystem::path trunk_path_;
  bool prefetch_ = false;
  MemoryPlan plan_;
  int64_t context_ = 4096;
  int64_t max_batch_ = 4096;
  int64_t max_pass_ = 4096;
  RouteObserver* route_observer_ = nullptr;
  size_t held_layers_ = 0;  // MoE layers hold_experts_on_device() handed to the backend
  std::function<bool()> pass_stop_;
};

// Each architecture binds its layers and experts through its spec (model/arch.h).

}  // namespace strata
