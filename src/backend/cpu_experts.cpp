// The CPU backend's routed experts (run_experts in backend.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu_backend.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace strata {

// One expert's rows: gate and up for every row (from one fused matrix whose
// rows alternate gate/up, gpt-oss as HF ships it, or from two matrices), the
// activation written over gate, then down. Its scratch is the share of the
// planned activations that its rows' slots own, so experts computed at once
// never share any.
void CpuBackend::expert_forward(const ExpertJob& job, const ExpertActivation& act, const float* x, float* y,
                                int worker, bool spread) {
  const ExpertWeights& e = *job.weights;
  const size_t n = job.rows;
  const bool fused = e.gate_up.valid();
  const size_t width = static_cast<size_t>(fused ? e.gate_up.out / 2 : e.gate.out);
  const size_t stride = (limits_.fused_gate_up ? 4 : 2) * limits_.expert_width;
  const size_t sums = limits_.widest_in / 32;
  float* gate = expert_act_.data() + job.first * stride;
  float* up = gate + n * width;
  kernels::LinearScratch scratch{expert_sums_.span().subspan(job.first * sums, n * sums),
                                 spread ? rows_.span() : worker_scratch(worker).rows};
  ThreadPool* pool = spread ? &pool_ : nullptr;
  if (fused) {
    float* gu = up + n * width;
    kernels::linear(e.gate_up, x, n, gu, pool, scratch);
    for (size_t i = 0; i < n * width; ++i) {
      gate[i] = gu[2 * i];
      up[i] = gu[2 * i + 1];
    }
  } else {
    kernels::linear(e.gate, x, n, gate, pool, scratch);
    kernels::linear(e.up, x, n, up, pool, scratch);
  }
  apply_activation(act, gate, up, n * width);
  kernels::linear(e.down, gate, n, y, pool, scratch);
}

void CpuBackend::run_experts(std::span<const ExpertJob> jobs, const ExpertActivation& act, Tensor xs, Tensor ys,
                             size_t hidden, bool one_per_thread) {
  const float* x = host(xs);
  float* y = host(ys);
  // Every job is checked here, on the calling thread, before any runs: what
  // the threads run cannot fail on the plan.
  const size_t stride = (limits_.fused_gate_up ? 4 : 2) * limits_.expert_width, sums = limits_.widest_in / 32;
  for (const ExpertJob& j : jobs) {
    bool fused = false;
    const size_t width = checked_expert_width(j, hidden, xs, ys, &fused);
    if (width > limits_.expert_width || (fused && !limits_.fused_gate_up) || (j.first + j.rows) * stride > expert_act_.size() ||
        (j.first + j.rows) * sums > expert_sums_.size() || std::max(hidden, width) > limits_.widest_in)
      throw Error("internal: an expert wider or with more rows than planned");
  }
  if (!one_per_thread || jobs.size() == 1) {
    for (const ExpertJob& j : jobs) expert_forward(j, act, x + j.first * hidden, y + j.first * hidden, 0, true);
    return;
  }
  struct Ctx {
    CpuBackend* self;
    std::span<const ExpertJob> jobs;
    const ExpertActivation* act;
    const float* x;
    float* y;
    size_t hidden;
  } ctx{this, jobs, &act, x, y, hidden};
  pool_.parallel_for_indexed(jobs.size(), [c = &ctx](int worker, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const ExpertJob& j = c->jobs[i];
      c->self->expert_forward(j, *c->act, c->x + j.first * c->hidden, c->y + j.first * c->hidden, worker, false);
    }
  });
}

}  // namespace strata
