#include "model/step_state.h"

#include <algorithm>
#include <initializer_list>

namespace strata {

namespace {

// Lays tensors one after another from the start of `work`.
class Layout {
 public:
  explicit Layout(Tensor work) : work_(work) {}
  Tensor next(uint64_t size) {
    const Tensor t = work_.slice(at_, size);
    at_ += size;
    return t;
  }

 private:
  Tensor work_;
  uint64_t at_ = 0;
};

// Values of the work tensor: the largest of the phases.
uint64_t work_size(const StepSizes& z) {
  const uint64_t rows = z.rows;
  const AttentionWidths& a = z.attention;
  const uint64_t attention = rows * (a.q + a.k + a.v + a.out + a.q_latent + a.kv + a.gate + a.beta);
  const uint64_t dense = rows * 2 * z.dense_width;
  const uint64_t moe = z.experts ? rows * (2 * z.shared_width + z.experts + z.hidden + z.experts_per_token * z.hidden +
                                           2 * z.latent_width)
                                 : 0;
  const uint64_t head = static_cast<uint64_t>(z.logit_rows) * z.vocab;
  return std::max({attention, dense, moe, head, rows * z.mtp_in});
}

}  // namespace

StepState::StepState(Backend& b, const StepSizes& z) : sizes(z) {
  const size_t rows = z.rows, span = z.span, slots = z.rows * z.experts_per_token;
  h = b.allocate(span * z.hidden);
  normed = b.allocate(rows * z.hidden);
  delta = b.allocate(span * z.hidden);
  guess_normed = b.allocate(z.guess_rows * z.hidden);
  guess_logits = b.allocate(z.guess_rows * z.experts);
  work = b.allocate(work_size(z));
  const AttentionWidths& a = z.attention;
  Layout attention(work);
  qkv = attention.next(rows * (a.q + a.k + a.v));
  q = qkv.slice(0, rows * a.q);
  k = qkv.slice(rows * a.q, rows * a.k);
  v = qkv.slice(rows * (a.q + a.k), rows * a.v);
  heads = attention.next(rows * a.out);
  q_latent = attention.next(rows * a.q_latent);
  kv = attention.next(rows * a.kv);
  gate_in = attention.next(rows * a.gate);
  beta = attention.next(rows * a.beta);
  Layout dense(work);
  dense_gate = dense.next(rows * z.dense_width);
  dense_up = dense.next(rows * z.dense_width);
  if (z.experts) {
    Layout moe(work);
    gate = moe.next(rows * z.shared_width);
    up = moe.next(rows * z.shared_width);
    router_logits = moe.next(rows * z.experts);
    shared = moe.next(rows * z.hidden);
    xs = moe.next(slots * z.hidden);
    latent_in = moe.next(rows * z.latent_width);
    latent_out = moe.next(rows * z.latent_width);
  }
  bank.reserve(z.depth_blocks);
  for (size_t i = 0; i < z.depth_blocks; ++i) bank.push_back(b.allocate(span * z.hidden));
  bank_part.reserve(z.depth_blocks);
  mixed = b.allocate(z.depth_blocks ? rows * z.hidden : 0);
  logits = Layout(work).next(static_cast<uint64_t>(z.logit_rows) * z.vocab);
  mtp_in = Layout(work).next(rows * z.mtp_in);

  tokens.resize(span);
  ids.resize(slots);
  weights.resize(slots);
  count.resize(z.experts);
  first.resize(z.experts);
  next.resize(z.experts);
  unique.reserve(z.experts);
  thread_load.resize(z.experts);
  held.reserve(z.experts);
  wanted.reserve(z.experts);
  slot_rows.resize(slots);
  gather.resize(slots);
  jobs.reserve(z.experts);
  ready.reserve(z.experts);
  held_routing.reserve(z.moe_layers);
  held_ids.resize(z.moe_layers * z.held_rows * z.experts_per_token);
  held_weights.resize(held_ids.size());
  guess_sample.resize(z.guess_rows);
  guess_ids.resize(z.guess_rows * z.experts_per_token);
  guess_weights.resize(z.guess_rows * z.experts_per_token);
  guess.reserve(z.experts);
  guess_reads.reserve(z.experts);
  guess_count.resize(z.experts);
  guess_best.resize(z.experts);
  selected.reserve(rows);
  chunk.reserve(span);
}

uint64_t StepState::bytes(const StepSizes& z) {
  const uint64_t rows = z.rows, span = z.span, slots = z.rows * z.experts_per_token, e = z.experts,
                 guess = z.guess_rows * z.experts_per_token, held = z.moe_layers * z.held_rows * z.experts_per_token;
  const uint64_t floats = (2 * span + rows) * z.hidden + z.guess_rows * (z.hidden + z.experts) + work_size(z) +
                         (z.depth_blocks ? z.depth_blocks * span * z.hidden + rows * z.hidden : 0);
  return floats * sizeof(float) + span * sizeof(int32_t) + slots * (sizeof(int32_t) + sizeof(float)) +
         e * 3 * sizeof(uint32_t) + e * sizeof(int32_t) + slots * 2 * sizeof(uint32_t) + e * sizeof(ExpertJob) +
         e * sizeof(std::pair<int, const ExpertWeights*>) + guess * (sizeof(int32_t) + sizeof(float)) +
         e * (sizeof(int32_t) + sizeof(uint32_t) + sizeof(float)) + rows * sizeof(uint32_t) + span * sizeof(Row) +
         2 * z.depth_blocks * sizeof(Tensor) + z.moe_layers * sizeof(HeldRouting) +
         held * (sizeof(int32_t) + sizeof(float)) + z.guess_rows * sizeof(uint32_t) + e * sizeof(uint64_t);
}

uint64_t StepState::host_bytes() const {
  auto bytes = [](const auto& v) { return static_cast<uint64_t>(v.capacity() * sizeof(v[0])); };
  return (bank.capacity() + bank_part.capacity()) * sizeof(Tensor) + bytes(tokens) + bytes(ids) + bytes(weights) + bytes(count) + bytes(first) + bytes(next) + bytes(unique) + bytes(thread_load) +
         bytes(slot_rows) + bytes(gather) + bytes(jobs) + bytes(ready) + bytes(guess_sample) + bytes(guess_ids) +
         bytes(guess_weights) +
         bytes(guess) + bytes(guess_count) + bytes(guess_best) + bytes(selected) + bytes(chunk) +
         bytes(held_routing) + bytes(held_ids) + bytes(held_weights);
}

}  // namespace strata
