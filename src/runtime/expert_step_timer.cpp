#include "runtime/expert_step_timer.h"

#include <algorithm>

#include "backend/expert.h"
#include "runtime/product_timer.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata {

ExpertStepTimer::ExpertStepTimer(bool mxfp4, int64_t hidden, int64_t width, size_t copies)
    : hidden_(hidden), width_(width) {
  if (hidden < 32 || width < 32 || hidden % 32 != 0 || width % 32 != 0)
    throw Error("internal: an expert timer's widths must be multiples of 32");
  kernels::WeightMatrix probe;
  probe.dtype = mxfp4 ? DType::MXFP4 : DType::Q8_0;
  probe.in = hidden;
  const size_t in_rows = probe.row_bytes();  // gate and up: rows `hidden` wide
  probe.in = width;
  const size_t down_rows = probe.row_bytes();
  const size_t gate = in_rows * static_cast<size_t>(width), down = down_rows * static_cast<size_t>(hidden);
  const size_t each = 2 * gate + down;
  copies = std::max<size_t>(copies, 1);
  data_.resize(each * copies);
  for (size_t c = 0; c < copies; ++c) {
    uint8_t* at = data_.data() + c * each;
    copies_.push_back({timing_matrix(mxfp4, width, hidden, at), timing_matrix(mxfp4, width, hidden, at + gate),
                       timing_matrix(mxfp4, hidden, width, at + 2 * gate)});
  }
}

double ExpertStepTimer::seconds(size_t experts, size_t rows, ThreadPool& pool, double seconds) const {
  experts = std::max<size_t>(experts, 1);
  rows = std::max<size_t>(rows, 1);
  const size_t h = static_cast<size_t>(hidden_), w = static_cast<size_t>(width_);
  const size_t workers = static_cast<size_t>(pool.size());
  // Every expert's rows in and out; each thread's gate and up.
  std::vector<float> x(experts * rows * h, 0.5f), y(experts * rows * h);
  std::vector<float> act(workers * 2 * rows * w);
  // Each thread's scratch for its products, made once as the backend's is.
  const Expert& any = copies_.front();
  size_t sums = 0, row = 0;
  for (const kernels::WeightMatrix* m : {&any.gate, &any.up, &any.down}) {
    sums = std::max(sums, kernels::linear_sum_floats(*m, rows));
    row = std::max(row, kernels::linear_row_floats(*m));
  }
  std::vector<float> scratch(workers * (sums + row));
  const ExpertActivation silu;
  size_t next = 0;  // the copy the step's first expert takes
  return median_run_seconds(
      [&] {
        pool.parallel_for_indexed(experts, [&](int worker, size_t e0, size_t e1) {
          float* gate = act.data() + static_cast<size_t>(worker) * 2 * rows * w;
          float* up = gate + rows * w;
          float* mine = scratch.data() + static_cast<size_t>(worker) * (sums + row);
          const kernels::LinearScratch s{{mine, sums}, {mine + sums, row}};
          for (size_t e = e0; e < e1; ++e) {
            const Expert& ex = copies_[(next + e) % copies_.size()];
            const float* xe = x.data() + e * rows * h;
            kernels::linear(ex.gate, xe, rows, gate, nullptr, s);
            kernels::linear(ex.up, xe, rows, up, nullptr, s);
            apply_activation(silu, gate, up, rows * w);
            kernels::linear(ex.down, gate, rows, y.data() + e * rows * h, nullptr, s);
          }
        });
        next = (next + experts) % copies_.size();
      },
      seconds);
}

}  // namespace strata
