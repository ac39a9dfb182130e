#pragma once
// The CPU backend: tensors in host memory, ops on the kernels of
// kernels/linear.h and kernels/ops.h over one thread pool, KV caches in host
// memory (backend/host_kv_cache.h). Its scratch is planned once per step
// size (plan()): per pool thread a share for attention, for products run on
// one thread and for the routers', the combine's and the depth mix's rows,
// and per expert slot a share for the experts' activations.
#include <algorithm>
#include <cstdint>
#include <span>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/host_kv_cache.h"
#include "util/thread_pool.h"

namespace strata {

// Planned host scratch: allocated once, never value-initialised (pages no
// step reaches stay untouched), never resized by an op.
template <class T>
class HostArray {
 public:
  void reset(size_t n) {
    data_.reset();
    data_.reset(new T[std::max<size_t>(n, 1)]);
    size_ = n;
  }
  T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::span<T> span() const { return {data_.get(), size_}; }

 private:
  std::unique_ptr<T[]> data_;
  size_t size_ = 0;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);

  std::string name() const override { return "cpu"; }
  int threads() const override { return pool_.size(); }
  ThreadPool* host_pool() override { return &pool_; }
  bool wants_interleaved() const override { return true; }

  Tensor allocate(uint64_t size) override;
  void release_tensors() override;
  void plan(const StepLimits& limits) override;
  uint64_t scratch_bytes(const StepLimits& limits) const override;
  // The same for a CPU backend of `threads` threads, without one.
  static uint64_t scratch_bytes_for(const StepLimits& limits, size_t threads);
  uint64_t allocated_bytes() const override;
  void upload(Tensor dst, const float* src) override;
  void download(Tensor src, float* dst) override;
  // The rows read where they are (no copy).
  void pick_largest(Tensor logits, size_t rows, size_t vocab, LogitPick* picks) override;
  std::unique_ptr<KvCache> new_cache(const CacheShape& shape) override;
  uint64_t cache_bytes(const CacheShape& shape) const override { return HostKvCache::bytes_at(shape); }
  uint64_t cache_snapshot_bytes(const CacheShape& shape) const override {
    return HostKvCache::snapshot_bytes_at(shape);
  }

  void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, Tensor out) override;
  void linear(const kernels::WeightMatrix& w, Tensor x, size_t n, Tensor y) override;
  void rms_norm(Tensor x, const float* weight, size_t rows, size_t width, float eps, Tensor y) override;
  void add(Tensor y, Tensor x) override;
  void copy(Tensor dst, Tensor src) override;
  void glu(const ExpertActivation& act, Tensor gate, Tensor up) override;
  void sigmoid_mul(Tensor y, Tensor gate) override;
  void depth_mix(std::span<const Tensor> blocks, Tensor partial, const float* query, size_t rows, size_t width,
                 float eps, Tensor out) override;
  void kda_attention(const KdaAttend& op) override;
  void gqa_attention(const GqaAttend& op) override;
  void mla_attention(const MlaAttend& op) override;
  void route(const RouteSpec& spec, Tensor logits, size_t n, int32_t* ids, float* weights) override;
  void gather_rows(Tensor src, size_t width, std::span<const uint32_t> rows, Tensor dst) override;
  void run_experts(std::span<const ExpertJob> jobs, const ExpertActivation& act, Tensor xs, Tensor ys, size_t hidden,
                   bool one_per_thread) override;
  void combine_experts(Tensor ys, size_t hidden, std::span<const uint32_t> slot_rows, const int32_t* ids,
                       const float* weights, size_t n, size_t k, Tensor shared, Tensor out) override;

 private:
  // The host address of `t` (strata::Error when it is not a tensor of this backend).
  float* host(Tensor t) const;
  // Scratch for a product over n rows spread over the pool.
  kernels::LinearScratch pool_scratch(size_t n);
  // Scratch for a product of one row on pool thread `worker` alone.
  kernels::LinearScratch worker_scratch(int worker);
  // The row-attention scratch of pool thread `worker`.
  struct AttentionScratch {
    float* floats;
    const float** pointers;
    int64_t* ints;
    size_t block;  // rows of a block its floats are laid out for
  };
  AttentionScratch attention_scratch(int worker);
  void check_step(size_t rows) const;
  // check_step(), and every row's position inside the planned context.
  void check_positions(std::span<const Row> rows) const;
  void expert_forward(const ExpertJob& job, const ExpertActivation& act, const float* x, float* y, int worker,
                      bool spread);
  void experts_spread(std::span<const ExpertJob> jobs, const ExpertActivation& act, const float* x, float* y,
                      size_t hidden);

  ThreadPool pool_;
  std::vector<std::unique_ptr<float[]>> buffers_;
  std::vector<uint64_t> sizes_;
  uint64_t tensor_bytes_ = 0;

  // Lengths of the scratch arrays below for a plan (one place for plan() and scratch_bytes()).
  struct ScratchSizes {
    size_t sums, rows, worker_sums, attn_block, attn_floats_each, attn_floats, attn_pointers, attn_ints, expert_act, expert_sums,
        route_floats, route_ints, combine_order, runs, depth_scores, linear_jobs;
    size_t threads;  // route_*, combine_order and depth_scores are each thread's
    uint64_t bytes() const;
  };
  static ScratchSizes scratch_sizes(const StepLimits& l, size_t threads);

  StepLimits limits_;
  ScratchSizes planned_{};
  // Planned scratch (scratch_sizes() gives the lengths).
  HostArray<float> sums_;          // rows × widest_in/32: block sums of a product over the pool
  HostArray<float> rows_;          // threads × widest_in: a dequantized row per thread
  HostArray<float> worker_sums_;   // threads × widest_in/32: block sums of a one-row product
  HostArray<float> attn_floats_;   // threads × planned_.attn_floats_each
  HostArray<const float*> attn_pointers_;  // threads × 2·context
  HostArray<int64_t> attn_ints_;   // threads × 2·planned_.attn_block
  HostArray<float> expert_act_;    // rows·k × slot stride: an expert's gate, up (and fused gate_up) rows
  HostArray<float> expert_sums_;   // rows·k × widest_in/32
  HostArray<float> route_floats_;  // threads × the routers' per-row scratch
  HostArray<int32_t> route_ints_;
  HostArray<int32_t> combine_order_;  // threads × experts_per_token
  HostArray<float> depth_scores_;  // threads × a depth mix's scores
  std::vector<std::pair<size_t, size_t>> runs_;  // attention's row blocks (capacity: rows)
  std::vector<kernels::LinearJob> linear_jobs_;  // experts_spread's products (capacity: two an expert of a step)
};

}  // namespace strata
