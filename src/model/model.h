#pragma once
// A loaded model: configuration, resident trunk weights, an expert provider,
// and the forward pass over a batch of rows, layer by layer:
// norm → attention (KV) → norm → dense MLP or router + experts.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <optional>
#include <span>
#include <vector>

#include "formats/tensor.h"
#include "kernels/linear.h"
#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/expert_provider.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace strata {

struct LoadOptions {
  LoadOptions() = default;
  explicit LoadOptions(int worker_threads) : threads(worker_threads) {}
  int threads = 0;  // 0: all hardware threads
  // Read routed experts from the drives into a RAM cache instead of serving
  // them from the mapped checkpoint. Implied by ram_bytes and by packed models.
  bool stream = false;
  // The whole process's budget (trunk + KV + buffers + expert cache); 0 = none.
  uint64_t ram_bytes = 0;
  // Cache size in experts, overriding what the budget allows (tests, tuning);
  // 0 = from the budget, or every expert when there is no budget.
  size_t cache_slots = 0;
  int64_t context = 4096;  // positions a sequence may reach (--ctx); the KV cache is budgeted for it
  int64_t max_batch = 0;   // rows of one sequence per step (prefill chunk); 0 = from the budget
  enum class Prefetch { Auto, On, Off } prefetch = Prefetch::Auto;
  // Expert checksums (packed models), see ExpertVerify.
  using Verify = ExpertVerify;
  Verify verify = Verify::First;
  std::string io_backend;  // "" = $STRATA_IO or io_uring, "pread"
  // Expert heat between runs: "" = the default place (see expert_heat.h),
  // "none" = neither read nor written.
  std::string heat;
};

// How the RAM budget was split (all bytes; zero without a budget).
struct MemoryPlan {
  uint64_t budget = 0, trunk = 0, kv = 0, overhead = 0, cache = 0;
};

struct Layer {
  const float* attn_norm = nullptr;
  const float* mlp_norm = nullptr;
  std::unique_ptr<Attention> attention;
  std::optional<SwiGlu> dense;    // dense layers
  std::unique_ptr<MoeBlock> moe;  // routed layers
};

class Model {
 public:
  // Reads config.json and the safetensors of a Hugging Face model directory.
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const LoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  // Where config.json, generation_config.json and the tokenizer are (the
  // model directory, or a pack's trunk).
  const std::filesystem::path& trunk_path() const { return trunk_path_; }
  std::unique_ptr<KvCache> new_cache() const;
  // Positions a sequence may reach (--ctx).
  int64_t context() const { return context_; }
  // Rows of one sequence a forward step may take (prompts longer than this
  // are prefilled in chunks of it).
  int64_t max_batch_rows() const { return max_batch_; }
  bool streaming() const { return streaming_; }
  ExpertStats expert_stats() const { return experts_->stats(); }
  void begin_expert_epoch() { experts_->begin_epoch(); }
  const MemoryPlan& memory_plan() const { return plan_; }
  // Writes this run's expert heat for the next run (streaming models only).
  void save_heat() const;

  // Feeds tokens[from..] of one sequence at positions from.. into `cache`, in
  // chunks of max_batch_rows() (the same bits as one big batch: the kernels
  // are batch-invariant), and writes the last token's logits. Stops early,
  // returning false, when `cancelled` says so between chunks.
  bool prefill(std::span<const int32_t> tokens, size_t from, KvCache& cache, float* logits,
               const std::function<bool()>& cancelled = {});

  // Runs one step over `rows`; writes vocab_size logits for each row with
  // want_logits, in row order, into `logits`. Advances each cache's length.
  void forward(std::span<const Row> rows, float* logits);

 private:
  Model(std::filesystem::path dir, ModelConfig config, std::unique_ptr<TensorSource> source, int threads);
  void bind_weights(const LoadOptions& options);
  void set_limits(const LoadOptions& options);
  // The experts of a checkpoint or pack as a streaming provider within the budget.
  std::unique_ptr<ExpertProvider> make_streaming(const ExpertBindFn& bind, const LoadOptions& options);
  // Starts reading the experts layer `next` will probably pick for `h`.
  void prefetch_for(size_t next, const float* h, size_t n);

  std::filesystem::path dir_;
  ModelConfig config_;
  std::unique_ptr<TensorSource> source_;
  WeightBinder binder_;
  ThreadPool pool_;
  kernels::WeightMatrix embed_, lm_head_;
  bool embed_rows_only_ = false;  // streaming: the token table's pages are dropped after each lookup
  const float* final_norm_ = nullptr;
  std::unique_ptr<ExpertProvider> experts_;
  std::vector<Layer> layers_;
  Checkpoint::Kind kind_ = Checkpoint::Kind::HuggingFace;
  std::filesystem::path trunk_path_;
  bool streaming_ = false;
  bool prefetch_ = false;
  MemoryPlan plan_;
  int64_t context_ = 4096;
  int64_t max_batch_ = 4096;
  std::vector<int64_t> windows_;  // per layer: sliding window, 0 = full attention
  std::filesystem::path heat_path_;
};

// Each architecture binds its layers and experts through its spec (model/arch.h).

}  // namespace strata
