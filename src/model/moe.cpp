#include "model/moe.h"

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <utility>

#include "model/weights.h"
#include "util/error.h"
#include "util/timeline.h"

namespace strata {

void SwiGlu::project(Tensor x, size_t n, Backend& b, Tensor g_all, Tensor u_all) const {
  IndependentOps together(b);
  b.linear(gate, x, n, g_all.rows(0, n, width()));
  b.linear(up, x, n, u_all.rows(0, n, width()));
}

void SwiGlu::finish(size_t n, Tensor out, Backend& b, Tensor g_all, Tensor u_all) const {
  const Tensor g = g_all.rows(0, n, width()), u = u_all.rows(0, n, width());
  b.glu(activation, g, u);
  b.linear(down, g, n, out);
}

void SwiGlu::forward(Tensor x, size_t n, Tensor out, Backend& b, Tensor g_all, Tensor u_all) const {
  project(x, n, b, g_all, u_all);
  finish(n, out, b, g_all, u_all);
}

SwiGlu SwiGlu::bind(WeightBinder& w, TensorKind gate, TensorKind up, TensorKind down, int64_t layer, int64_t hidden,
                    int64_t width) {
  return {w.resident(w.linear(hf_name(gate, layer), width, hidden)),
          w.resident(w.linear(hf_name(up, layer), width, hidden)),
          w.resident(w.linear(hf_name(down, layer), hidden, width))};
}

void Router::route(Tensor x, size_t n, Tensor logits, int32_t* ids, float* weights, Backend& b) const {
  const Tensor l = logits.rows(0, n, static_cast<uint64_t>(spec.experts));
  b.linear(gate, x, n, l);
  b.route(spec, l, n, ids, weights);
}

namespace {

RouteSpec spec_of(const ModelConfig& c, RouteSpec::Kind kind) {
  RouteSpec s;
  s.kind = kind;
  s.experts = c.n_routed_experts;
  s.k = c.num_experts_per_tok;
  s.normalize = c.norm_topk_prob;
  return s;
}

}  // namespace

std::unique_ptr<Router> make_sigmoid_group_router(WeightBinder& w, const ModelConfig& c, const std::string& p,
                                                  const std::string& bias) {
  auto r = std::make_unique<Router>();
  r->gate = w.linear(p, c.n_routed_experts, c.hidden_size);
  r->spec = spec_of(c, RouteSpec::Kind::SigmoidGroup);
  r->spec.bias = w.vector(bias, c.n_routed_experts);
  r->spec.groups = c.n_group;
  r->spec.topk_groups = c.topk_group;
  r->spec.scale = static_cast<float>(c.routed_scaling_factor);
  return r;
}

std::unique_ptr<Router> make_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& p) {
  auto r = std::make_unique<Router>();
  r->gate = w.linear(p, c.n_routed_experts, c.hidden_size);
  r->spec = spec_of(c, RouteSpec::Kind::Softmax);
  return r;
}

std::unique_ptr<Router> make_topk_softmax_router(WeightBinder& w, const ModelConfig& c, const std::string& p) {
  auto r = std::make_unique<Router>();
  r->gate = w.linear(p, c.n_routed_experts, c.hidden_size, /*bias=*/true);
  r->spec = spec_of(c, RouteSpec::Kind::TopkSoftmax);
  return r;
}

MoeBlock::MoeBlock(int64_t layer, const ModelConfig& c, std::unique_ptr<Router> router, std::optional<SwiGlu> shared,
                   ExpertProvider& experts, ExpertActivation activation, std::optional<LatentProjection> latent)
    : layer_(layer),
      c_(c),
      router_(std::move(router)),
      shared_(std::move(shared)),
      experts_(experts),
      activation_(activation),
      latent_(std::move(latent)) {}

std::span<const int32_t> MoeBlock::predict(Tensor x, size_t n, Backend& b, StepState& step) const {
  const size_t K = static_cast<size_t>(c_.num_experts_per_tok);
  if (n > step.sizes.guess_rows) throw Error("internal: a guess over more rows than planned");
  router_->route(x, n, step.guess_logits, step.guess_ids.data(), step.guess_weights.data(), b);
  // Most likely first: picked by more rows, then by a larger routing weight,
  // then the lower id.
  step.guess.clear();
  std::fill(step.guess_count.begin(), step.guess_count.end(), 0u);
  for (size_t s = 0; s < n * K; ++s) {
    const int32_t e = step.guess_ids[s];
    if (step.guess_count[e]++ == 0) {
      step.guess.push_back(e);
      step.guess_best[e] = 0.0f;
    }
    step.guess_best[e] = std::max(step.guess_best[e], step.guess_weights[s]);
  }
  std::sort(step.guess.begin(), step.guess.end(), [&](int32_t a, int32_t b) {
    if (step.guess_count[a] != step.guess_count[b]) return step.guess_count[a] > step.guess_count[b];
    if (step.guess_best[a] != step.guess_best[b]) return step.guess_best[a] > step.guess_best[b];
    return a < b;
  });
  return step.guess;
}

void MoeBlock::note_shapes(const ExpertWeights& w) const {
  if (mixed_shapes_) return;
  if (!shapes_) {
    shapes_ = w;
    return;
  }
  const auto a = std::as_const(*shapes_).matrices();
  const auto c = w.matrices();
  for (size_t i = 0; i < a.size(); ++i)
    if (!kernels::same_layout(*a[i], *c[i])) {
      // Held jobs would describe some experts wrongly: this layer fetches all.
      mixed_shapes_ = true;
      shapes_.reset();
      return;
    }
}

namespace {

// Token groups up to this size are computed an expert per thread.
constexpr size_t kExpertsInParallelRows = 4;

// A product split over the threads is split in groups of this many output
// rows (kernels/linear.cpp: four tiles of 16 for interleaved matrices, the
// Q8_0, MXFP4 and Q4_K experts usually come in; 8 for others, where this
// overstates what splitting leaves idle).
constexpr size_t kSplitRows = 64;

}  // namespace

ExpertThreading expert_threading(std::span<const int32_t> experts, std::span<const uint32_t> rows, size_t threads,
                                 size_t expert_width, size_t width, std::span<uint64_t> load) {
  ExpertThreading t;
  if (threads <= 1 || experts.empty()) return t;
  const size_t bins = std::min(threads, experts.size());
  if (load.size() < bins) throw Error("internal: expert_threading given too little scratch");
  std::fill_n(load.begin(), bins, 0);
  uint64_t total = 0;
  for (int32_t e : experts) {
    const uint32_t r = rows[static_cast<size_t>(e)];
    *std::min_element(load.begin(), load.begin() + static_cast<std::ptrdiff_t>(bins)) += r;
    total += r;
  }
  const uint64_t most = *std::max_element(load.begin(), load.begin() + static_cast<std::ptrdiff_t>(bins));
  t.one_per_thread = most ? static_cast<double>(total) / (static_cast<double>(threads) * static_cast<double>(most)) : 1.0;
  // Split, the step's experts share two lists of row groups (gate and up of
  // all, then down of all), each dealt over the threads.
  const size_t first = experts.size() * 2 * ((expert_width + kSplitRows - 1) / kSplitRows),
               second = experts.size() * ((width + kSplitRows - 1) / kSplitRows);
  auto waves = [&](size_t groups) { return (groups + threads - 1) / threads; };
  t.split = static_cast<double>(first + second) / static_cast<double>(threads * (waves(first) + waves(second)));
  t.runs_one_per_thread = rows[static_cast<size_t>(experts.front())] <= kExpertsInParallelRows ||
                          experts.size() >= 4 * threads || t.one_per_thread >= t.split;
  return t;
}

void MoeBlock::forward_held(Tensor x, size_t n, Tensor out, Backend& b, StepState& step) const {
  const size_t K = static_cast<size_t>(c_.num_experts_per_tok), hidden = static_cast<size_t>(c_.hidden_size);
  const size_t width = latent_ ? static_cast<size_t>(latent_->down.out) : hidden;
  const size_t at = step.held_routing.empty() ? 0 : step.held_routing.back().at + step.held_routing.back().n * K;
  if (at + n * K > step.held_ids.size() || step.held_routing.size() == step.held_routing.capacity())
    throw Error("internal: more layers routed on the device than planned");
  step.held_routing.push_back({layer_, n, at});
  HeldRoute op;
  op.spec = router_->spec;
  op.logits = step.router_logits.rows(0, n, static_cast<uint64_t>(router_->spec.experts));
  op.n = n;
  op.layer = layer_;
  op.act = activation_;
  op.width = width;
  op.ys = step.xs;
  op.ids = step.held_ids.data() + at;
  op.weights = step.held_weights.data() + at;
  {
    // The router's and the shared experts' products read x alone.
    IndependentOps together(b);
    b.linear(router_->gate, x, n, op.logits);
    if (shared_) shared_->project(x, n, b, step.gate, step.up);
  }
  if (shared_) shared_->finish(n, step.shared.rows(0, n, hidden), b, step.gate, step.up);
  op.x = latent_ ? step.latent_in.rows(0, n, width) : x;
  if (latent_) b.linear(latent_->down, x, n, op.x);
  if (!latent_) {
    op.shared = shared_ ? step.shared.rows(0, n, hidden) : Tensor{};
    op.out = out;
    b.route_held(op);
    return;
  }
  // As forward(): the combine through the latent norm and up projection, then the shared experts.
  op.out = step.latent_out.rows(0, n, width);
  b.route_held(op);
  b.rms_norm(op.out, latent_->norm, n, width, latent_->eps, op.out);
  b.linear(latent_->up, op.out, n, out);
  if (shared_) b.add(out, step.shared.rows(0, n, hidden));
}

void MoeBlock::forward(Tensor x, size_t n, Tensor out, Backend& b, StepState& step,
                       const std::function<void()>& while_reading, bool defer_routing) const {
  if (defer_routing && b.routes_held(layer_, n, router_->spec)) return forward_held(x, n, out, b, step);
  const size_t K = static_cast<size_t>(c_.num_experts_per_tok), hidden = static_cast<size_t>(c_.hidden_size);
  // What the experts read: x, or its latent projection.
  const size_t width = latent_ ? static_cast<size_t>(latent_->down.out) : hidden;
  const size_t slots = n * K;
  int32_t* ids = step.ids.data();
  float* weights = step.weights.data();
  std::optional<timeline::Scope> route_span(std::in_place, "step", "route");
  router_->route(x, n, step.router_logits, ids, weights, b);

  // Rows grouped by expert: one fetch per expert, its rows side by side in
  // xs. Largest token groups first (ties: the lower id): their reads are
  // submitted first and they are computed first, which keeps the cores
  // busiest while the rest land. (The combine below does not depend on this
  // order.)
  step.unique.clear();
  std::fill(step.count.begin(), step.count.end(), 0u);
  for (size_t s = 0; s < slots; ++s)
    if (step.count[ids[s]]++ == 0) step.unique.push_back(ids[s]);
  std::sort(step.unique.begin(), step.unique.end(), [&](int32_t a, int32_t b) {
    return step.count[a] != step.count[b] ? step.count[a] > step.count[b] : a < b;
  });
  uint32_t at = 0;
  for (int32_t e : step.unique) {
    step.first[e] = step.next[e] = at;
    at += step.count[e];
  }
  for (size_t s = 0; s < slots; ++s) {
    const uint32_t row = step.next[ids[s]]++;
    step.slot_rows[s] = row;
    step.gather[row] = static_cast<uint32_t>(s / K);
  }
  // Experts the backend holds (a GPU's expert cache) are not fetched: they
  // run first, from its copy; the rest come from the provider.
  step.held.clear();
  step.wanted.clear();
  for (int32_t e : step.unique)
    (shapes_ && b.holds_expert(layer_, e) ? step.held : step.wanted).push_back(e);
  if (!step.held.empty()) experts_.note_held(layer_, step.held);
  ExpertFetch& fetch = experts_.fetch(layer_, step.wanted);
  // Its experts are released however this block ends.
  const EndsFetch end_fetch(fetch);
  // The next layer's prefetch: its reads go out as background reads, which a
  // drive takes only once this layer's own reads are done, so they fill the
  // time of the last expert, the combine and the next attention.
  if (while_reading) while_reading();
  route_span.reset();

  // The shared expert needs no reads: compute it while the drives work.
  if (shared_) {
    const timeline::Scope span("step", "shared expert");
    shared_->forward(x, n, step.shared.rows(0, n, hidden), b, step.gate, step.up);
  }
  const Tensor expert_in = latent_ ? step.latent_in.rows(0, n, width) : x;
  if (latent_) b.linear(latent_->down, x, n, expert_in);
  b.gather_rows(expert_in, width, std::span<const uint32_t>(step.gather).first(slots), step.xs);

  // Experts run one per thread, each on its own (no barrier per product),
  // or the products of the experts ready split over the threads together, as
  // expert_threading says.
  const size_t threads = static_cast<size_t>(b.threads());
  const bool per_thread = expert_threading(step.unique, step.count, threads,
                                           static_cast<size_t>(c_.moe_intermediate_size), width, step.thread_load)
                              .runs_one_per_thread;
  const size_t most = b.groups_experts() || !per_thread || fetch.all_ready() ? step.unique.size() : 4 * threads;
  if (!step.held.empty()) {
    step.jobs.clear();
    for (int32_t e : step.held) step.jobs.push_back(ExpertJob{&*shapes_, step.first[e], step.count[e], layer_, e, true});
    b.run_experts(step.jobs, activation_, step.xs, step.xs, width, per_thread);
  }
  while (fetch.next_batch(step.ready, most) > 0) {
    step.jobs.clear();
    for (const auto& [pos, w] : step.ready) {
      const int32_t e = step.wanted[pos];
      step.jobs.push_back(ExpertJob{w, step.first[e], step.count[e], layer_, e});
      note_shapes(*w);
    }
    b.run_experts(step.jobs, activation_, step.xs, step.xs, width, per_thread);
  }
  fetch.end();
  if (latent_) {
    const Tensor combined = step.latent_out.rows(0, n, width);
    b.combine_experts(step.xs, width, std::span<const uint32_t>(step.slot_rows).first(slots), ids, weights, n, K,
                      Tensor{}, combined);
    b.rms_norm(combined, latent_->norm, n, width, latent_->eps, combined);
    b.linear(latent_->up, combined, n, out);
    if (shared_) b.add(out, step.shared.rows(0, n, hidden));
    return;
  }

  // Combine in ascending expert order per row (as transformers does), never
  // in arrival order, so the sum is the same however experts were fetched.
  b.combine_experts(step.xs, hidden, std::span<const uint32_t>(step.slot_rows).first(slots), ids, weights, n, K,
                    shared_ ? step.shared.rows(0, n, hidden) : Tensor{}, out);
}

}  // namespace strata
