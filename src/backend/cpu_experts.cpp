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

// Every job's products spread over the pool together, in three hand-offs for
// the batch: gate and up of all, the activations, down of all (each product's
// bits as expert_forward's: the same kernels on the same rows).
void CpuBackend::experts_spread(std::span<const ExpertJob> jobs, const ExpertActivation& act, const float* x, float* y,
                                size_t hidden) {
  if (2 * jobs.size() > linear_jobs_.capacity()) throw Error("internal: more experts in a step than planned");
  const size_t stride = (limits_.fused_gate_up ? 4 : 2) * limits_.expert_width;
  const size_t sums = limits_.widest_in / 32;
  struct Part {
    const ExpertWeights* e;
    size_t n, width;
    float *gate, *up, *gu;
    std::span<float> sums;
  };
  auto part = [&](const ExpertJob& j) {
    const ExpertWeights& e = *j.weights;
    const bool fused = e.gate_up.valid();
    const size_t width = static_cast<size_t>(fused ? e.gate_up.out / 2 : e.gate.out);
    float* gate = expert_act_.data() + j.first * stride;
    float* up = gate + j.rows * width;
    return Part{&e, j.rows, width, gate, up, fused ? up + j.rows * width : nullptr,
                expert_sums_.span().subspan(j.first * sums, j.rows * sums)};
  };
  linear_jobs_.clear();
  for (const ExpertJob& j : jobs) {
    const Part p = part(j);
    const float* xj = x + j.first * hidden;
    if (p.gu) {
      linear_jobs_.push_back({&p.e->gate_up, xj, p.n, p.gu, p.sums});
    } else {
      // gate and up read the same x: one set of block sums serves both
      // (filled before the threads start, by each in turn, the same values).
      linear_jobs_.push_back({&p.e->gate, xj, p.n, p.gate, p.sums});
      linear_jobs_.push_back({&p.e->up, xj, p.n, p.up, p.sums});
    }
  }
  kernels::linear_batch(linear_jobs_, &pool_, rows_.span());
  const auto activate = [&](size_t j0, size_t j1) {
    for (size_t i = j0; i < j1; ++i) {
      const Part p = part(jobs[i]);
      if (p.gu)
        for (size_t k = 0; k < p.n * p.width; ++k) {
          p.gate[k] = p.gu[2 * k];
          p.up[k] = p.gu[2 * k + 1];
        }
      apply_activation(act, p.gate, p.up, p.n * p.width);
    }
  };
  // (One pointer captured: the pool's std::function holds it without allocating.)
  pool_.parallel_for(jobs.size(), [f = &activate](size_t j0, size_t j1) { (*f)(j0, j1); });
  linear_jobs_.clear();
  for (const ExpertJob& j : jobs) {
    const Part p = part(j);
    linear_jobs_.push_back({&p.e->down, p.gate, p.n, y + j.first * hidden, p.sums});
  }
  kernels::linear_batch(linear_jobs_, &pool_, rows_.span());
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
  if (jobs.size() == 1) {
    expert_forward(jobs[0], act, x + jobs[0].first * hidden, y + jobs[0].first * hidden, 0, true);
    return;
  }
  if (!one_per_thread) {
    experts_spread(jobs, act, x, y, hidden);
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
