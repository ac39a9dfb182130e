#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "util/error.h"

namespace strata {

Tensor Tensor::slice(uint64_t from, uint64_t count) const {
  if (from > size || count > size - from)
    throw Error("internal: values [" + std::to_string(from) + ", " + std::to_string(from + count) +
                ") of a tensor of " + std::to_string(size));
  return Tensor{buffer, offset + from, count};
}

size_t checked_expert_width(const ExpertJob& j, size_t hidden, Tensor xs, Tensor ys, bool* fused) {
  const ExpertWeights& e = *j.weights;
  *fused = e.gate_up.valid();
  const size_t width = static_cast<size_t>(*fused ? e.gate_up.out / 2 : e.gate.out);
  const size_t in = static_cast<size_t>(*fused ? e.gate_up.in : e.gate.in);
  if ((j.first + j.rows) * hidden > std::min(xs.size, ys.size) || in != hidden ||
      static_cast<size_t>(e.down.in) != width || static_cast<size_t>(e.down.out) != hidden)
    throw Error("internal: an expert's shape or rows do not match its tensors");
  return width;
}

LogitPick largest_logit(std::span<const float> row) {
  // The best value kept in a register (read back through the index, each
  // comparison waited on the load before it: a vocabulary of 152k took
  // ~0.2-0.7 ms a token, a tenth of a GPU's decode step).
  LogitPick p;
  float top = row.empty() ? 0.0f : row[0];
  for (size_t i = 0; i < row.size(); ++i) {
    p.non_finite += !std::isfinite(row[i]);
    if (row[i] > top) {
      top = row[i];
      p.id = static_cast<int32_t>(i);
    }
  }
  return p;
}

void Backend::linear_stacked(std::span<const kernels::WeightMatrix* const> ws, Tensor x, size_t n, Tensor y) {
  uint64_t at = 0;
  for (const kernels::WeightMatrix* w : ws) {
    const uint64_t count = n * static_cast<uint64_t>(w->out);
    linear(*w, x, n, y.slice(at, count));
    at += count;
  }
}

void Backend::pick_largest(Tensor logits, size_t rows, size_t vocab, LogitPick* picks) {
  std::vector<float> row(vocab);
  for (size_t i = 0; i < rows; ++i) {
    download(logits.slice(i * vocab, vocab), row.data());
    picks[i] = largest_logit(row);
  }
}

}  // namespace strata
