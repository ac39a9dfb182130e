#pragma once
// How long a prompt step's routed experts take on this machine, run as the
// CPU backend runs them (backend/cpu_experts.cpp, one expert per thread):
// each expert's gate and up products over its rows, the activation, then
// down, all on one thread, the pool handing experts to its threads.
//
// Why not the large product's rate (runtime/product_timer.h) spread over the
// threads: a prompt's experts are small matrices, each multiplied by the
// rows it got on one thread, and the activations between the products take
// time of their own. On this machine (2 threads) budget_check's model b
// spent 4.1 ms a prompt token in its experts where the 64-row rate gave 3.5
// (docs/PERFORMANCE.md, "Session 42").
//
// The weights: `copies` experts of the model's shapes (gate and up `width` x
// `hidden`, down `hidden` x `width`), product_timer.h's timing_matrix()
// each; a step's experts take the
// copies in turn, so an expert's weights come from memory where a step has
// more experts than the copies (a model's experts do not stay in the
// caches between steps either). Activations: SiLU-GLU.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/linear.h"

namespace strata {

class ThreadPool;

class ExpertStepTimer {
 public:
  // `hidden` and `width` multiples of 32.
  ExpertStepTimer(bool mxfp4, int64_t hidden, int64_t width, size_t copies);
  ExpertStepTimer(const ExpertStepTimer&) = delete;
  ExpertStepTimer& operator=(const ExpertStepTimer&) = delete;

  // Seconds one step's `experts` experts of `rows` rows each take: the
  // median of steps run for about `seconds` (3 at least), after one to warm
  // up.
  double seconds(size_t experts, size_t rows, ThreadPool& pool, double seconds) const;

 private:
  struct Expert {
    kernels::WeightMatrix gate, up, down;
  };
  int64_t hidden_, width_;
  std::vector<uint8_t> data_;
  std::vector<Expert> copies_;
};

}  // namespace strata
