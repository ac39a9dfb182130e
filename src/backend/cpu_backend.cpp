#include "backend/cpu_backend.h"
#include "backend/cpu_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu_attention.h"
#include "backend/host_routing.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace strata {

using cpu_rows::for_elements;
using cpu_rows::for_rows;

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

CpuBackend::CpuBackend(int threads) : pool_(threads > 0 ? threads : default_thread_count()) {
  // Buffer 0 is never handed out, so a default Tensor is never a real one.
  buffers_.emplace_back();
  sizes_.push_back(0);
}

Tensor CpuBackend::allocate(uint64_t size) {
  // Not value-initialised: pages a step never reaches are never touched.
  buffers_.emplace_back(new float[std::max<uint64_t>(size, 1)]);
  sizes_.push_back(size);
  tensor_bytes_ += size * sizeof(float);
  return Tensor{static_cast<uint32_t>(buffers_.size() - 1), 0, size};
}

void CpuBackend::release_tensors() {
  buffers_.resize(1);
  sizes_.resize(1);
  tensor_bytes_ = 0;
}

float* CpuBackend::host(Tensor t) const {
  if (t.buffer == 0 || t.buffer >= buffers_.size() || t.offset + t.size > sizes_[t.buffer])
    throw Error("internal: a tensor that is not one of the CPU backend's");
  return buffers_[t.buffer].get() + t.offset;
}

CpuBackend::ScratchSizes CpuBackend::scratch_sizes(const StepLimits& l, size_t threads) {
  const size_t sums = l.widest_in / 32;
  const size_t ctx = static_cast<size_t>(std::max<int64_t>(l.context, 0)), slots = l.rows * l.experts_per_token;
  ScratchSizes z;
  z.sums = l.rows * sums;
  z.rows = threads * l.widest_in;
  z.worker_sums = threads * sums;
  z.attn_block = std::min(l.rows, kRowsPerBlock);
  z.attn_floats_each = cpu_attention_floats(z.attn_block, ctx, l.latent, l.latent_rope);
  z.attn_floats = threads * z.attn_floats_each;
  z.attn_pointers = threads * cpu_attention_pointers(ctx);
  z.attn_ints = threads * cpu_attention_ints(z.attn_block);
  z.expert_act = slots * (l.fused_gate_up ? 4 : 2) * l.expert_width;
  z.expert_sums = slots * sums;
  z.route_floats = route_scratch_floats(static_cast<int64_t>(l.experts));
  z.route_ints = route_scratch_ints(static_cast<int64_t>(l.experts));
  z.combine_order = l.experts_per_token;
  z.runs = l.rows;
  z.depth_scores = l.depth_values;
  z.threads = threads;
  z.linear_jobs = 2 * std::min(slots, l.experts);  // gate and up of each distinct expert
  return z;
}

uint64_t CpuBackend::ScratchSizes::bytes() const {
  return (sums + rows + worker_sums + attn_floats + expert_act + expert_sums) * sizeof(float) +
         attn_pointers * sizeof(const float*) + attn_ints * sizeof(int64_t) +
         threads * ((route_floats + depth_scores) * sizeof(float) + (route_ints + combine_order) * sizeof(int32_t)) +
         runs * sizeof(std::pair<size_t, size_t>) + linear_jobs * sizeof(kernels::LinearJob);
}

uint64_t CpuBackend::scratch_bytes(const StepLimits& limits) const {
  return scratch_sizes(limits, static_cast<size_t>(pool_.size())).bytes();
}

uint64_t CpuBackend::scratch_bytes_for(const StepLimits& limits, size_t threads) {
  return scratch_sizes(limits, threads).bytes();
}

void CpuBackend::plan(const StepLimits& l) {
  const ScratchSizes z = scratch_sizes(l, static_cast<size_t>(pool_.size()));
  limits_ = l;
  sums_.reset(z.sums);
  rows_.reset(z.rows);
  worker_sums_.reset(z.worker_sums);
  attn_floats_.reset(z.attn_floats);
  attn_pointers_.reset(z.attn_pointers);
  attn_ints_.reset(z.attn_ints);
  expert_act_.reset(z.expert_act);
  expert_sums_.reset(z.expert_sums);
  route_floats_.reset(z.threads * z.route_floats);
  route_ints_.reset(z.threads * z.route_ints);
  combine_order_.reset(z.threads * z.combine_order);
  depth_scores_.reset(z.threads * z.depth_scores);
  runs_.clear();
  runs_.shrink_to_fit();
  runs_.reserve(z.runs);
  linear_jobs_.clear();
  linear_jobs_.shrink_to_fit();
  linear_jobs_.reserve(z.linear_jobs);
  planned_ = z;
}

uint64_t CpuBackend::allocated_bytes() const { return tensor_bytes_ + planned_.bytes(); }

void CpuBackend::check_step(size_t rows) const {
  if (rows > limits_.rows)
    throw Error("internal: a step of " + std::to_string(rows) + " rows on a backend planned for " +
                std::to_string(limits_.rows));
}

void CpuBackend::check_positions(std::span<const Row> rows) const {
  check_step(rows.size());
  for (const Row& r : rows)
    if (r.pos < 0 || r.pos >= limits_.context)
      throw Error("internal: a row at position " + std::to_string(r.pos) + " on a backend planned for a context of " +
                  std::to_string(limits_.context));
}

kernels::LinearScratch CpuBackend::pool_scratch(size_t n) {
  check_step(n);
  return {sums_.span().first(n * (limits_.widest_in / 32)), rows_.span()};
}

kernels::LinearScratch CpuBackend::worker_scratch(int worker) {
  const size_t sums = limits_.widest_in / 32, w = static_cast<size_t>(worker);
  return {worker_sums_.span().subspan(w * sums, sums), rows_.span().subspan(w * limits_.widest_in, limits_.widest_in)};
}

CpuBackend::AttentionScratch CpuBackend::attention_scratch(int worker) {
  const size_t w = static_cast<size_t>(worker);
  return {attn_floats_.data() + w * planned_.attn_floats_each,
          attn_pointers_.data() + w * (planned_.attn_pointers / static_cast<size_t>(pool_.size())),
          attn_ints_.data() + w * cpu_attention_ints(planned_.attn_block), planned_.attn_block};
}

void CpuBackend::upload(Tensor dst, const float* src) { std::memcpy(host(dst), src, dst.size * sizeof(float)); }

void CpuBackend::download(Tensor src, float* dst) { std::memcpy(dst, host(src), src.size * sizeof(float)); }

void CpuBackend::pick_largest(Tensor logits, size_t rows, size_t vocab, LogitPick* picks) {
  const float* p = host(logits.slice(0, rows * vocab));
  for (size_t i = 0; i < rows; ++i) picks[i] = largest_logit(std::span<const float>(p + i * vocab, vocab));
}

std::unique_ptr<KvCache> CpuBackend::new_cache(const CacheShape& shape) { return std::make_unique<HostKvCache>(shape); }

void CpuBackend::embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, Tensor out) {
  const size_t width = static_cast<size_t>(table.in);
  float* o = host(out.rows(0, tokens.size(), width));
  for_rows(pool_, tokens.size(), width, [&](int, size_t r0, size_t r1) {
    for (size_t i = r0; i < r1; ++i) kernels::dequantize_row(table, tokens[i], o + i * width);
  });
}

void CpuBackend::linear(const kernels::WeightMatrix& w, Tensor x, size_t n, Tensor y) {
  const float* xp = host(x.slice(0, n * static_cast<uint64_t>(w.in)));
  float* yp = host(y.slice(0, n * static_cast<uint64_t>(w.out)));
  kernels::linear(w, xp, n, yp, &pool_, pool_scratch(n));
}

void CpuBackend::rms_norm(Tensor x, const float* weight, size_t rows, size_t width, float eps, Tensor y) {
  const float* xp = host(x.slice(0, rows * width));
  float* yp = host(y.slice(0, rows * width));
  for_rows(pool_, rows, width, [&](int, size_t r0, size_t r1) {
    for (size_t i = r0; i < r1; ++i) kernels::rms_norm(xp + i * width, weight, width, eps, yp + i * width);
  });
}

void CpuBackend::add(Tensor y, Tensor x) {
  float* yp = host(y);
  const float* xp = host(x.slice(0, y.size));
  for_elements(pool_, y.size, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) yp[i] += xp[i];
  });
}

void CpuBackend::copy(Tensor dst, Tensor src) {
  if (dst.size != src.size) throw Error("internal: copy() between tensors of different sizes");
  std::memmove(host(dst), host(src), dst.size * sizeof(float));
}

void CpuBackend::glu(const ExpertActivation& act, Tensor gate, Tensor up) {
  float* g = host(gate);
  const float* u = host(up.slice(0, gate.size));
  for_elements(pool_, gate.size, [&](size_t i0, size_t i1) { apply_activation(act, g + i0, u + i0, i1 - i0); });
}

void CpuBackend::sigmoid_mul(Tensor y, Tensor gate) {
  float* yp = host(y);
  const float* g = host(gate.slice(0, y.size));
  for_elements(pool_, y.size, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) yp[i] *= kernels::sigmoid(g[i]);
  });
}

void CpuBackend::depth_mix(std::span<const Tensor> blocks, Tensor partial, const float* query, size_t rows,
                           size_t width, float eps, Tensor out) {
  const size_t nb = blocks.size() + 1;
  if (nb > planned_.depth_scores) throw Error("internal: a depth mix over more blocks than planned");
  float* o_all = host(out.slice(0, rows * width));
  const float* part = host(partial.slice(0, rows * width));
  for (const Tensor& b : blocks) (void)host(b.slice(0, rows * width));  // checked once, not per row
  for_rows(pool_, rows, nb * width, [&](int worker, size_t r0, size_t r1) {
    float* score = depth_scores_.data() + static_cast<size_t>(worker) * planned_.depth_scores;
    for (size_t r = r0; r < r1; ++r) {
      auto value = [&](size_t i) {
        return i + 1 < nb ? buffers_[blocks[i].buffer].get() + blocks[i].offset + r * width : part + r * width;
      };
      for (size_t i = 0; i < nb; ++i) {
        const float* v = value(i);
        const float inv = 1.0f / std::sqrt(kernels::dot(v, v, width) / static_cast<float>(width) + eps);
        score[i] = kernels::dot(v, query, width) * inv;
      }
      kernels::softmax(score, nb);
      float* o = o_all + r * width;
      std::fill_n(o, width, 0.0f);
      for (size_t i = 0; i < nb; ++i) kernels::axpy(score[i], value(i), o, width);
    }
  });
}

void CpuBackend::gather_rows(Tensor src, size_t width, std::span<const uint32_t> rows, Tensor dst) {
  const float* s = host(src);
  float* d = host(dst.slice(0, rows.size() * width));
  for (const uint32_t r : rows)
    if ((static_cast<uint64_t>(r) + 1) * width > src.size) throw Error("internal: gather_rows() past its source");
  for_rows(pool_, rows.size(), width, [&](int, size_t j0, size_t j1) {
    for (size_t j = j0; j < j1; ++j) std::copy_n(s + static_cast<size_t>(rows[j]) * width, width, d + j * width);
  });
}

void CpuBackend::combine_experts(Tensor ys, size_t hidden, std::span<const uint32_t> slot_rows, const int32_t* ids,
                                 const float* weights, size_t n, size_t k, Tensor shared, Tensor out) {
  if (k > planned_.combine_order) throw Error("internal: a combine of more experts per row than planned");
  const float* y_all = host(ys);
  float* o_all = host(out.slice(0, n * hidden));
  const float* s = shared.empty() ? nullptr : host(shared.slice(0, n * hidden));
  for_rows(pool_, n, k * hidden, [&](int worker, size_t r0, size_t r1) {
    int32_t* order = combine_order_.data() + static_cast<size_t>(worker) * planned_.combine_order;
    for (size_t r = r0; r < r1; ++r) {
      for (size_t j = 0; j < k; ++j) order[j] = static_cast<int32_t>(j);
      std::sort(order, order + k, [&](int32_t a, int32_t b) { return ids[r * k + a] < ids[r * k + b]; });
      float* o = o_all + r * hidden;
      std::fill_n(o, hidden, 0.0f);
      for (size_t j = 0; j < k; ++j) {
        const size_t slot = r * k + static_cast<size_t>(order[j]);
        const float w = weights[slot];
        const float* y = y_all + static_cast<size_t>(slot_rows[slot]) * hidden;
        for (size_t i = 0; i < hidden; ++i) o[i] += y[i] * w;
      }
      if (s)
        for (size_t i = 0; i < hidden; ++i) o[i] += s[r * hidden + i];
    }
  });
}

}  // namespace strata
