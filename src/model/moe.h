#pragma once
// Feed-forward blocks: the dense SwiGLU MLP, the routers of the three
// families and the mixture-of-experts block that groups rows by expert so
// that each selected expert's weights are fetched once per step. They say
// what to compute; the backend (backend/backend.h) computes it in the step's
// tensors (model/step_state.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"
#include "kernels/linear.h"
#include "model/expert_provider.h"
#include "model/model_config.h"
#include "model/step_state.h"
#include "model/tensor_names.h"

namespace strata {

class WeightBinder;

// How a step runs its routed experts on `threads` threads, and how busy
// each way keeps them (shares, 0..1): `experts` (largest token group first)
// with rows[e] rows each; their products have `expert_width` rows (gate,
// up) and `width` (down). One per thread: the groups dealt, largest first,
// to the least loaded thread. Split: the products' groups of 64 rows
// (kernels/linear.cpp's for interleaved matrices; 8 for others), gate and up
// of every expert in one list, then down of every expert in another, each
// list dealt over the threads in waves (kernels::linear_batch). The step
// runs them one per thread (no hand-off per product) for groups of at most 4
// rows (decode), for four experts a thread or more, and otherwise where that
// keeps the threads busier; else split, over the experts ready at once.
// MoeBlock::forward runs it so; `strata budget` divides the experts'
// compute by busy(). `load`: scratch of at least min(threads,
// experts.size()) (nothing is allocated).
struct ExpertThreading {
  double one_per_thread = 1.0;
  double split = 1.0;
  bool runs_one_per_thread = false;
  double best() const { return one_per_thread > split ? one_per_thread : split; }
  double busy() const { return runs_one_per_thread ? one_per_thread : split; }
};
ExpertThreading expert_threading(std::span<const int32_t> experts, std::span<const uint32_t> rows, size_t threads,
                                 size_t expert_width, size_t width, std::span<uint64_t> load);

struct SwiGlu {
  kernels::WeightMatrix gate, up, down;
  ExpertActivation activation = {};  // SiLU by default; SiTU for Kimi K3
  // out = down(silu(gate(x)) · up(x)) for n rows, through `g` and `u`
  // (the step's dense_gate/up or gate/up, [n × width()] at least).
  void forward(Tensor x, size_t n, Tensor out, Backend& b, Tensor g, Tensor u) const;
  // forward() in two halves: the gate and up products (independent ops),
  // then the activation and the down product.
  void project(Tensor x, size_t n, Backend& b, Tensor g, Tensor u) const;
  void finish(size_t n, Tensor out, Backend& b, Tensor g, Tensor u) const;
  size_t width() const { return static_cast<size_t>(gate.out); }
  // The three projections of layer `layer` named by the table kinds
  // `gate`, `up`, `down` (the dense MLP's, or the shared experts').
  static SwiGlu bind(WeightBinder& w, TensorKind gate, TensorKind up, TensorKind down, int64_t layer, int64_t hidden,
                     int64_t width);
};

// Chooses, for each row, k experts and their weights: its linear, then the
// backend's routing (RouteSpec).
struct Router {
  kernels::WeightMatrix gate;
  RouteSpec spec;
  // ids and weights: [n × k] host arrays; `logits` [n × experts] is scratch.
  void route(Tensor x, size_t n, Tensor logits, int32_t* ids, float* weights, Backend& b) const;
};

// `weight` is the router's linear (HF base name, "<weight>.weight").
// DeepSeek-V3: sigmoid scores; the correction bias (`bias`, a tensor name)
// steers selection only; group-limited top-k; optional renormalisation;
// routed_scaling_factor.
std::unique_ptr<Router> make_sigmoid_group_router(WeightBinder& w, const ModelConfig& c, const std::string& weight,
                                                  const std::string& bias);
// Qwen3-MoE: softmax over all experts, top-k, optional renormalisation.
std::unique_ptr<Router> make_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& prefix);
// gpt-oss: linear with bias, top-k of the logits, softmax over the k chosen.
std::unique_ptr<Router> make_topk_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& prefix);

// A latent MoE (Kimi K3): the routed experts work on down(x); their
// combined output goes through norm and up before the shared experts' is
// added. The router still reads x.
struct LatentProjection {
  kernels::WeightMatrix down, up;
  const float* norm = nullptr;
  float eps = 0;
};

class MoeBlock {
 public:
  MoeBlock(int64_t layer, const ModelConfig& c, std::unique_ptr<Router> router, std::optional<SwiGlu> shared,
           ExpertProvider& experts, ExpertActivation activation = {},
           std::optional<LatentProjection> latent = std::nullopt);
  // `while_reading` runs once the reads of missing experts are submitted
  // (the model starts next-layer prefetch there, as background reads).
  // defer_routing: where the backend holds the whole layer and routes the
  // step itself (Backend::routes_held), the ids and weights come back only
  // at its collect_routing(), noted in step.held_routing; else (or false)
  // in step.ids and step.weights on return.
  void forward(Tensor x, size_t n, Tensor out, Backend& b, StepState& step,
               const std::function<void()>& while_reading = {}, bool defer_routing = false) const;
  // The experts this block's router picks for `x` (distinct, the likeliest
  // first; held in step.guess): run on the previous layer's residual, a guess
  // at what forward() will need. Uses only the step's guess_* buffers.
  std::span<const int32_t> predict(Tensor x, size_t n, Backend& b, StepState& step) const;
  int64_t layer() const { return layer_; }
  // The backend holds every expert of this layer (Backend::hold_layer),
  // all shaped as `shapes`: forward() asks the provider for none of them.
  void held_whole(const ExpertWeights& shapes) const {
    shapes_ = shapes;
    mixed_shapes_ = false;
  }
  // Whether `b` routes and runs n rows of this layer itself (forward() with defer_routing).
  bool held_by(const Backend& b, size_t n) const { return b.routes_held(layer_, n, router_->spec); }
  const std::optional<SwiGlu>& shared() const { return shared_; }

 private:
  int64_t layer_;
  const ModelConfig& c_;
  std::unique_ptr<Router> router_;
  std::optional<SwiGlu> shared_;
  ExpertProvider& experts_;
  ExpertActivation activation_;
  std::optional<LatentProjection> latent_;
  // The layer's expert shapes and formats (the first expert fetched), for
  // the jobs of experts the backend holds; unset until one was fetched, or
  // when the layer's experts differ in shape or format.
  mutable std::optional<ExpertWeights> shapes_;
  void note_shapes(const ExpertWeights& w) const;
  // forward() where the backend routes and runs the experts itself.
  void forward_held(Tensor x, size_t n, Tensor out, Backend& b, StepState& step) const;
  mutable bool mixed_shapes_ = false;
};

}  // namespace strata
