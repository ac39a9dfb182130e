// The Vulkan backend's routing and routed experts (backend.h).
#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <string>

#include "backend/host_routing.h"
#include "util/error.h"
#include "vulkan/vk_backend_impl.h"

namespace strata::vk {

bool VulkanBackend::routes_on_gpu(const RouteSpec& spec) {
  return spec.experts <= 1024 && spec.k <= 64 && spec.groups <= 64 &&
         (spec.kind != RouteSpec::Kind::SigmoidGroup || spec.bias != nullptr);
}

void VulkanBackend::dispatch_route(const RouteSpec& spec, Tensor logits, size_t n, uint64_t ids, uint64_t weights,
                                   uint64_t held) {
  const uint64_t E = static_cast<uint64_t>(spec.experts);
  const bool grouped = spec.kind == RouteSpec::Kind::SigmoidGroup;
  struct {
    uint64_t logits, bias, ids, weights;
    uint32_t experts, k, groups, topk_groups, kind, normalize;
    float scale;
    uint32_t pad;
    uint64_t held;  // route_held's arguments (route.comp's HELD build)
  } push{address(logits.slice(0, n * E)),
         grouped ? weights_->address(spec.bias, E * sizeof(float)) : 0,
         ids,
         weights,
         static_cast<uint32_t>(E),
         static_cast<uint32_t>(spec.k),
         static_cast<uint32_t>(spec.groups),
         static_cast<uint32_t>(spec.topk_groups),
         static_cast<uint32_t>(spec.kind),
         spec.normalize ? 1u : 0u,
         spec.scale,
         0,
         held};
  static_assert(sizeof(push) == 72);
  stream_->dispatch(held ? "route_held" : "route", push, static_cast<uint32_t>(n));
}

void VulkanBackend::route(const RouteSpec& spec, Tensor logits, size_t n, int32_t* ids, float* weights) {
  check_step(n);  // route_ holds a step's rows
  if (static_cast<size_t>(spec.experts) > limits_.experts || spec.k > spec.experts || spec.k < 1 ||
      static_cast<size_t>(spec.k) > limits_.experts_per_token)
    throw Error("internal: routing over more experts than planned");
  if (n > 0 && routes_on_gpu(spec)) {
    // On the GPU (route.comp): the ids and weights come back, not the logits.
    const uint64_t count = n * static_cast<uint64_t>(spec.k), out = route_.piece.address;
    dispatch_route(spec, logits, n, out, out + count * sizeof(int32_t));
    std::vector<uint8_t> back(count * 8);
    copy_out(route_.piece.buffer, route_.piece.offset, route_.piece.mapped, back.data(), back.size());
    std::memcpy(ids, back.data(), count * sizeof(int32_t));
    std::memcpy(weights, back.data() + count * sizeof(int32_t), count * sizeof(float));
    return;
  }
  // Past route.comp's sizes: the logits come back and the host chooses.
  std::vector<float> all(n * static_cast<size_t>(spec.experts));
  download(logits.slice(0, all.size()), all.data());
  std::vector<float> floats(route_scratch_floats(spec.experts));
  std::vector<int32_t> ints(route_scratch_ints(spec.experts));
  route_on_host(spec, all.data(), n, ids, weights, floats.data(), ints.data());
}

void VulkanBackend::gather_rows(Tensor src, size_t width, std::span<const uint32_t> rows, Tensor dst) {
  for (uint32_t r : rows)
    if ((static_cast<uint64_t>(r) + 1) * width > src.size) throw Error("internal: gather_rows() past its source");
  if (rows.empty()) return;
  make_room();
  dispatch_gather(address(src), address(dst.slice(0, rows.size() * width)),
                  stage(rows.data(), rows.size_bytes()).address, width, rows.size());
}

void VulkanBackend::dispatch_gather(uint64_t src, uint64_t dst, uint64_t rows, size_t width, size_t count) {
  struct {
    uint64_t src, dst, rows;
    uint32_t width;
  } push{src, dst, rows, static_cast<uint32_t>(width)};
  stream_->dispatch("gather_rows", push, static_cast<uint32_t>((width + 255) / 256), static_cast<uint32_t>(count));
}

WeightRef VulkanBackend::staged(const kernels::WeightMatrix& w) {
  weight_format(w);
  const WeightSpans s = weight_spans(w);
  // Read in place where it lies in the RAM cache, aligned for the shaders'
  // loads (words: buffer_reference_align 4); else copied into this
  // submission's staging.
  auto put = [&](const void* p, uint64_t bytes) -> uint64_t {
    if (!p || !bytes) return 0;
    if (reinterpret_cast<uintptr_t>(p) % 4 == 0 && in_host_memory(p, bytes)) return host_memory_read(p, bytes);
    return stage_bulk(p, bytes).address;
  };
  // A slice's FP8 scale grid is addressed from the parent's first row.
  return weight_ref(w, put(w.data, s.data), put(w.scales, s.scales), put(w.block_scale, s.block_scale),
                    put(w.bias, s.bias));
}

bool VulkanBackend::holds_expert(int64_t layer, int32_t expert) {
  // Marked used in this submission, so nothing evicts it before the next
  // finish(); run_experts() asks for held experts before it uploads any.
  return layer >= 0 && expert >= 0 && experts_->budget() > 0 &&
         experts_->find(ExpertCache::key(layer, expert), epoch_) != nullptr;
}

bool VulkanBackend::has_expert(int64_t layer, int32_t expert) const {
  return layer >= 0 && expert >= 0 && experts_->budget() > 0 && experts_->contains(ExpertCache::key(layer, expert));
}

namespace {
uint64_t aligned(uint64_t b) { return (b + 255) / 256 * 256; }
}  // namespace

uint64_t VulkanBackend::expert_bytes(const ExpertWeights& e) const {
  // Its arrays one after another, each 256-aligned.
  uint64_t bytes = 0;
  for (const kernels::WeightMatrix* m : e.matrices())
    if (m->valid()) {
      weight_format(*m);
      const WeightSpans sp = weight_spans(*m);
      bytes += aligned(sp.data) + aligned(sp.scales) + aligned(sp.block_scale) + aligned(sp.bias);
    }
  return bytes;
}

ExpertCache::Entry VulkanBackend::expert_weights(const ExpertJob& job) {
  const ExpertWeights& e = *job.weights;
  const std::array<const kernels::WeightMatrix*, 4> mats = e.matrices();
  if (job.layer >= 0 && job.expert >= 0 && experts_->budget() > 0) {
    const uint64_t key = ExpertCache::key(job.layer, job.expert);
    if (const ExpertCache::Entry* hit = experts_->find(key, epoch_)) {
      ++expert_stats_.hits;
      return *hit;
    }
    // A held job's weights are not this expert's: never upload them.
    if (job.held) throw Error("internal: an expert the Vulkan backend held was gone when it ran");
    const uint64_t bytes = expert_bytes(e);  // a format the GPU cannot read throws before a slot is taken
    size_t index = 0;
    if (const ExpertCache::Slot* slot = experts_->reserve(key, bytes, epoch_, &index)) {
      ExpertCache::Entry entry;
      entry.key = key;
      entry.epoch = epoch_;
      WeightRef* refs[4] = {&entry.gate, &entry.up, &entry.down, &entry.gate_up};
      uint64_t at = 0;
      // The slot is read by no op still to run (the cache's rule), so it is written at once.
      auto put = [&](const void* p, uint64_t n) -> uint64_t {
        if (!p || n == 0) return 0;
        copy_in(slot->buffer, slot->offset + at, slot->mapped ? slot->mapped + at : nullptr, p, n, true);
        const uint64_t address = slot->address + at;
        at += aligned(n);
        expert_stats_.bytes_uploaded += n;
        return address;
      };
      try {
        for (size_t i = 0; i < 4; ++i) {
          const kernels::WeightMatrix& m = *mats[i];
          if (!m.valid()) continue;
          const WeightSpans sp = weight_spans(m);
          const uint64_t data = put(m.data, sp.data), scales = put(m.scales, sp.scales),
                         block_scale = put(m.block_scale, sp.block_scale), bias = put(m.bias, sp.bias);
          *refs[i] = weight_ref(m, data, scales, block_scale, bias);
        }
      } catch (...) {
        experts_->abandon(index);  // half written: it holds no expert
        throw;
      }
      experts_->commit(index, entry);
      ++expert_stats_.uploads;
      return entry;
    }
  }
  if (job.held) throw Error("internal: a held expert on a Vulkan backend without an expert cache");
  ++expert_stats_.staged;
  ExpertCache::Entry entry;
  WeightRef* refs[4] = {&entry.gate, &entry.up, &entry.down, &entry.gate_up};
  for (size_t i = 0; i < 4; ++i)
    if (mats[i]->valid()) *refs[i] = staged(*mats[i]);
  return entry;
}

LoadActivation VulkanBackend::load_activation(const ExpertActivation& act, uint64_t up) {
  switch (act.kind) {
    case ExpertActivation::Kind::SiluGlu: return {static_cast<uint32_t>(Elementwise::SiluGlu), static_cast<uint32_t>(up)};
    case ExpertActivation::Kind::ClampedSwiGlu:
      return {static_cast<uint32_t>(Elementwise::ClampedSwiGlu), static_cast<uint32_t>(up), act.limit, act.alpha};
    case ExpertActivation::Kind::Situ:
      return {static_cast<uint32_t>(Elementwise::Situ), static_cast<uint32_t>(up), act.beta, act.linear_beta};
  }
  throw Error("internal: an unknown expert activation");
}

void VulkanBackend::grouped_products(std::span<const ProductJob> jobs, const LoadActivation& load) {
  // jobs.glsl's Job: the matrix, x, y, rows.
  struct Job {
    WeightRef w;
    uint64_t x, y;
    uint32_t n, pad;
  };
  static_assert(sizeof(Job) == kJobBytes);
  // One dispatch per kernel: a format's jobs of few rows in one, of many
  // rows (tiled) in another.
  std::vector<ProductKernel> kernels(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) kernels[i] = product_kernel(jobs[i].format, jobs[i].n, true);
  std::vector<bool> done(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (done[i]) continue;
    const ProductKernel& k = kernels[i];
    std::vector<Job> same;
    uint64_t groups_x = 1, groups_y = 1;
    for (size_t j = i; j < jobs.size(); ++j)
      if (!done[j] && kernels[j].name == k.name) {
        done[j] = true;
        if (jobs[j].n == 0) continue;
        same.push_back(Job{jobs[j].w, jobs[j].x, jobs[j].y, jobs[j].n, 0});
        groups_x = std::max(groups_x, k.groups_x(jobs[j].w.out_rows));
        groups_y = std::max(groups_y, k.groups_y(jobs[j].n));
      }
    if (same.empty()) continue;
    if (load.mode != 0 && !activates_on_load(k)) throw Error("internal: an activation for a tiled product's load");
    dispatch_grouped(k, stage(same.data(), same.size() * sizeof(Job)).address, groups_x, groups_y, same.size(), load);
  }
}

namespace {
// grouped_products()'s and the held layers' push constants (linear.comp's,
// linear_il.comp's GROUPED Push; the tiled kernels read the jobs alone).
struct GroupedPush {
  uint64_t jobs;
  uint32_t act, up;
  float a, b;
};
}  // namespace

void VulkanBackend::dispatch_grouped(const ProductKernel& k, uint64_t jobs, uint64_t groups_x, uint64_t groups_y,
                                     uint64_t count, const LoadActivation& load) {
  const auto& limit = ctx_->properties().limits.maxComputeWorkGroupCount;
  if (groups_x > limit[0] || groups_y > limit[1] || count > limit[2])
    throw Error("the Vulkan backend cannot run " + std::to_string(count) + " expert products at once on " +
                ctx_->info().name + " (too many workgroups)");
  const GroupedPush push{jobs, load.mode, load.up, load.a, load.b};
  stream_->dispatch(k.name, push, static_cast<uint32_t>(groups_x), static_cast<uint32_t>(groups_y),
                    static_cast<uint32_t>(count));
}

void VulkanBackend::dispatch_grouped_indirect(const ProductKernel& k, uint64_t jobs, const Arena::Piece& grid,
                                              uint64_t offset, const LoadActivation& load) {
  const GroupedPush push{jobs, load.mode, load.up, load.a, load.b};
  stream_->dispatch_indirect(k.name, push, grid.buffer, grid.offset + offset);
}

void VulkanBackend::split_gate_up(uint64_t gate, uint64_t up, uint64_t gate_up, uint64_t count) {
  struct {
    uint64_t y, x, z;
    uint32_t count, mode;
    float a, b;
  } push{gate, up, gate_up, static_cast<uint32_t>(count), static_cast<uint32_t>(Elementwise::SplitGateUp), 0, 0};
  stream_->dispatch("elementwise", push, static_cast<uint32_t>(std::min<uint64_t>((count + 255) / 256, 65535)));
}

void VulkanBackend::expert_group(std::span<const ExpertJob> jobs, std::span<const ExpertCache::Entry> w,
                                 std::span<const uint64_t> offsets, size_t a, size_t b, uint64_t total,
                                 const ExpertActivation& act, Tensor xs, Tensor ys, size_t hidden) {
  if (a == b) return;
  // Fused and separate gate/up experts (never both in a real layer) in runs.
  const bool fused = jobs[a].weights->gate_up.valid();
  for (size_t i = a + 1; i < b; ++i)
    if (jobs[i].weights->gate_up.valid() != fused) {
      expert_group(jobs, w, offsets, a, i, total, act, xs, ys, hidden);
      expert_group(jobs, w, offsets, i, b, total, act, xs, ys, hidden);
      return;
    }
  // The scratch: every job's gate rows, then their up rows at the same
  // offsets, then (fused) their gate_up rows at twice the offsets.
  const uint64_t gate = expert_act_.piece.address, up = gate + total * sizeof(float),
                 gate_up = up + total * sizeof(float);
  // Down products of few rows activate their input as they load it (the
  // same bits as the activation apart: activation.glsl), from a fused
  // gate_up's pairs unsplit: one or two dispatches fewer.
  bool on_load = true;
  for (size_t i = a; i < b; ++i)
    on_load = on_load && activates_on_load(product_kernel(weight_format(jobs[i].weights->down), jobs[i].rows, true));
  std::vector<ProductJob> first, second;
  for (size_t i = a; i < b; ++i) {
    const ExpertJob& j = jobs[i];
    const ExpertWeights& e = *j.weights;
    const uint32_t n = static_cast<uint32_t>(j.rows);
    const uint64_t x = address(xs.rows(j.first, n, hidden)), y = address(ys.rows(j.first, n, hidden));
    const uint64_t at = offsets[i] * sizeof(float);
    if (fused) {
      first.push_back(ProductJob{weight_format(e.gate_up), w[i].gate_up, x, gate_up + 2 * at, n});
    } else {
      first.push_back(ProductJob{weight_format(e.gate), w[i].gate, x, gate + at, n});
      first.push_back(ProductJob{weight_format(e.up), w[i].up, x, up + at, n});
    }
    second.push_back(ProductJob{weight_format(e.down), w[i].down, fused && on_load ? gate_up + 2 * at : gate + at, y, n});
  }
  const uint64_t begin = offsets[a], count = (b < offsets.size() ? offsets[b] : total) - begin;
  const uint64_t g0 = gate + begin * sizeof(float), u0 = up + begin * sizeof(float);
  grouped_products(first);
  if (on_load) return grouped_products(second, load_activation(act, fused ? 0 : total));
  if (fused) split_gate_up(g0, u0, gate_up + 2 * begin * sizeof(float), count);
  activation(act, g0, u0, count);
  grouped_products(second);
}

void VulkanBackend::activation(const ExpertActivation& act, uint64_t g, uint64_t u, uint64_t count) {
  // The mode and constants a down product's load takes (the same modes).
  const LoadActivation l = load_activation(act, 0);
  elementwise(static_cast<Elementwise>(l.mode), g, u, count, l.a, l.b);
}

void VulkanBackend::run_experts(std::span<const ExpertJob> jobs, const ExpertActivation& act, Tensor xs, Tensor ys,
                                size_t hidden, bool one_per_thread) {
  (void)one_per_thread;  // every expert's products in one dispatch; the bits are the same either way
  // Each job's rows in the scratch (floats into each of its parts).
  std::vector<uint64_t> offsets(jobs.size());
  uint64_t total = 0;
  bool any_fused = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    bool fused = false;
    const size_t width = checked_expert_width(jobs[i], hidden, xs, ys, &fused);
    if (width > limits_.expert_width || (fused && !limits_.fused_gate_up))
      throw Error("internal: an expert wider than planned");
    any_fused = any_fused || fused;
    offsets[i] = total;
    total += jobs[i].rows * width;
  }
  if (total * (any_fused ? 4 : 2) > expert_act_.size) throw Error("internal: experts with more rows than planned");
  // The jobs' weights are host memory valid only during this call: copied
  // now (into the expert cache, or staged for this submission). Where the
  // staging would pass its cap, the experts so far run first and the stream
  // finishes.
  std::vector<ExpertCache::Entry> w(jobs.size());
  make_room();
  size_t a = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const bool stages = jobs[i].rows > 0 && !jobs[i].held && !has_expert(jobs[i].layer, jobs[i].expert);
    const bool no_room = stages && staging_->used() + expert_bytes(*jobs[i].weights) > staging_cap_;
    if (i > a && (staging_full() || no_room)) {
      expert_group(jobs, w, offsets, a, i, total, act, xs, ys, hidden);
      finish();
      a = i;
    } else if (i == a && no_room) {
      finish();  // nothing of this group is recorded yet: what was before it runs
    }
    if (jobs[i].rows > 0) w[i] = expert_weights(jobs[i]);  // a job without rows runs nothing
  }
  expert_group(jobs, w, offsets, a, jobs.size(), total, act, xs, ys, hidden);
}

void VulkanBackend::combine_experts(Tensor ys, size_t hidden, std::span<const uint32_t> slot_rows, const int32_t* ids,
                                    const float* weights, size_t n, size_t k, Tensor shared, Tensor out) {
  // Each row's slots in increasing expert id, as the CPU sums them.
  std::vector<uint32_t> rows(n * k);
  std::vector<float> w(n * k);
  std::vector<uint32_t> order(k);
  for (size_t r = 0; r < n; ++r) {
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return ids[r * k + a] < ids[r * k + b]; });
    for (size_t j = 0; j < k; ++j) {
      const size_t s = r * k + order[j];
      if ((static_cast<uint64_t>(slot_rows[s]) + 1) * hidden > ys.size) throw Error("internal: a slot past the experts' rows");
      rows[r * k + j] = slot_rows[s];
      w[r * k + j] = weights[s];
    }
  }
  if (n == 0) return;
  make_room();
  dispatch_combine(address(ys), stage(rows.data(), rows.size() * sizeof(uint32_t)).address,
                   stage(w.data(), w.size() * sizeof(float)).address, hidden, n, k, shared, out);
}

void VulkanBackend::dispatch_combine(uint64_t ys, uint64_t slot_rows, uint64_t weights, size_t width, size_t n, size_t k,
                                     Tensor shared, Tensor out) {
  if (k > 64) throw Error("the Vulkan backend combines at most 64 experts a token (this layer's: " + std::to_string(k) + ")");
  const CombinePush push{ys,      address(out.slice(0, n * width)), shared.empty() ? 0 : address(shared.slice(0, n * width)),
                         slot_rows, weights, static_cast<uint32_t>(width), static_cast<uint32_t>(k), shared.empty() ? 0u : 1u};
  record_held_back_combine();  // (one held back already: none is recorded in between, but never two)
  held_back_combine_ = HeldBackCombine{push, n};
  if (stream_->independent()) record_held_back_combine();  // in its place, inside the run
}

void VulkanBackend::record_held_back_combine() {
  if (!held_back_combine_) return;
  const HeldBackCombine c = *held_back_combine_;
  held_back_combine_.reset();
  stream_->dispatch("combine", c.push, (c.push.hidden + 255) / 256, static_cast<uint32_t>(c.n));
}

}  // namespace strata::vk
