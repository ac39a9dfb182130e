// The Vulkan backend's layers held whole (backend.h hold_layer, route_held):
// the routing, the experts and the combine of a decode step recorded without
// a round trip to the host.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "util/error.h"
#include "vulkan/vk_backend_impl.h"

namespace strata::vk {

bool VulkanBackend::hold_layer(int64_t layer, size_t experts, const ExpertSource& next) {
  if (layer < 0 || experts == 0 || experts_->budget() == 0 || held_.count(layer)) return held_.count(layer) != 0;
  // Every expert into the cache as it comes, then all kept there for good;
  // where the budget runs out, the layer is not held (what was copied stays
  // as plain cache). The first expert's shapes stand for all (one grouped
  // dispatch needs one format and shape); its data is not read after.
  constexpr size_t kWords = 4 * sizeof(WeightRef) / sizeof(uint32_t);  // an expert's row of the table
  std::optional<ExpertWeights> first;
  std::vector<uint32_t> table(experts * kWords);
  std::vector<bool> got(experts);
  ExpertBatch batch;
  while (next(batch) > 0)
    for (const auto& [e, w] : batch) {
      if (e < 0 || static_cast<size_t>(e) >= experts || got[static_cast<size_t>(e)])
        throw Error("internal: expert " + std::to_string(e) + " handed to hold_layer twice or out of range");
      if (!first) {
        first = *w;
        if (!holdable(*first)) return false;
      } else {
        const auto a = first->matrices();
        const auto b = w->matrices();
        for (size_t i = 0; i < a.size(); ++i)
          if (!kernels::same_layout(*a[i], *b[i])) return false;
      }
      const ExpertJob job{w, 0, 0, layer, e};
      const uint64_t key = ExpertCache::key(layer, e);
      const uint64_t staged_before = expert_stats_.staged;
      make_room();
      const ExpertCache::Entry entry = expert_weights(job);
      if (expert_stats_.staged != staged_before || !experts_->contains(key)) {
        finish();  // the staged copy may be read by nothing: drop it
        return false;
      }
      const WeightRef refs[4] = {entry.gate, entry.up, entry.down, entry.gate_up};
      std::memcpy(table.data() + static_cast<size_t>(e) * kWords, refs, sizeof(refs));
      got[static_cast<size_t>(e)] = true;
    }
  if (std::find(got.begin(), got.end(), false) != got.end()) return false;
  // An expert copied early may have been evicted by a later one (a budget
  // lowered when the device ran out): then none is pinned.
  for (size_t e = 0; e < experts; ++e)
    if (!experts_->contains(ExpertCache::key(layer, static_cast<int32_t>(e)))) return false;
  for (size_t e = 0; e < experts; ++e) experts_->pin(ExpertCache::key(layer, static_cast<int32_t>(e)));
  const bool fused = first->gate_up.valid();
  HeldLayer h;
  h.table = Buffer(*ctx_, table.size() * sizeof(uint32_t), Buffer::Where::Device);
  write(h.table, table.data(), table.size() * sizeof(uint32_t));
  h.fused = fused;
  h.first = weight_format(fused ? first->gate_up : first->gate);
  h.down = weight_format(first->down);
  h.first_rows = static_cast<uint32_t>(fused ? first->gate_up.out : first->gate.out);
  h.down_rows = static_cast<uint32_t>(first->down.out);
  h.width = static_cast<size_t>(fused ? first->gate_up.out / 2 : first->gate.out);
  h.experts = experts;
  held_.emplace(layer, std::move(h));
  finish();
  return true;
}

bool VulkanBackend::holdable(const ExpertWeights& first) const {
  const bool fused = first.gate_up.valid();
  if (fused ? !first.down.valid() : !(first.gate.valid() && first.up.valid() && first.down.valid())) return false;
  // Gate and up go through one grouped dispatch: one format and shape; and
  // the planned scratch must hold their rows.
  if (!fused && !kernels::same_layout(first.gate, first.up)) return false;
  const size_t width = static_cast<size_t>(fused ? first.gate_up.out / 2 : first.gate.out);
  return width <= limits_.expert_width && (!fused || limits_.fused_gate_up);
}

bool VulkanBackend::routes_held(int64_t layer, size_t n, const RouteSpec& spec) const {
  if (n == 0 || n > limits_.rows || !routes_on_gpu(spec) || held_.count(layer) == 0) return false;
  if (n <= kHeldRows) return true;
  // held_groups.comp's offsets are 32-bit (bytes into each scratch part and
  // the gathered rows), and gather_rows.comp takes a workgroup row a slot.
  const auto it = held_.find(layer);
  const uint64_t slots = n * static_cast<uint64_t>(spec.k);
  const uint64_t widest = std::max<uint64_t>(2 * it->second.width, limits_.hidden);
  return 4 * slots * widest * sizeof(float) < (uint64_t{1} << 32) &&
         slots <= ctx_->properties().limits.maxComputeWorkGroupCount[1];
}

uint32_t VulkanBackend::gate_up_mode(const HeldLayer& h, const ProductKernel& k_down) {
  // held.glsl's GATE_UP_APART, GATE_UP_FUSED, GATE_UP_PAIRS.
  if (!h.fused) return 0;
  return activates_on_load(k_down) ? 2 : 1;
}

void VulkanBackend::route_held(const HeldRoute& op) {
  const auto it = held_.find(op.layer);
  if (it == held_.end() || !routes_held(op.layer, op.n, op.spec))
    throw Error("internal: route_held() on a layer not held");
  const HeldLayer& h = it->second;
  const RouteSpec& spec = op.spec;
  const size_t n = op.n, K = static_cast<size_t>(spec.k), slots = n * K, width = op.width;
  if (static_cast<size_t>(spec.experts) != h.experts || K < 1 || K > limits_.experts_per_token ||
      h.width > limits_.expert_width || op.x.size < n * width || op.ys.size < slots * width ||
      op.out.size < n * width || h.down_rows != width)
    throw Error("internal: route_held() with sizes other than planned");
  make_room();
  ++expert_stats_.held_routes;
  // The choice, on the device (as route()); for a few rows, with the jobs.
  const uint64_t ids = route_.piece.address, weights = ids + slots * sizeof(int32_t);
  if (n > kHeldRows) {
    dispatch_route(spec, op.logits, n, ids, weights);
    return route_held_groups(op, h, ids, weights);
  }
  // The jobs, the combine's order and the host's copy of the choice, made
  // by each row's routing workgroup (route.comp's HELD build: held.glsl's
  // HeldArgs, in its layout).
  const uint64_t first = held_jobs_.piece.address, second = first + 2 * slots * kJobBytes,
                 slot_rows = second + slots * kJobBytes, sorted = slot_rows + slots * sizeof(uint32_t);
  const Arena::Piece host = staging_->take(slots * 8);
  held_copies_.push_back(HeldCopy{host.mapped, op.ids, op.weights, slots});
  const uint64_t scratch = expert_act_.piece.address, ys = address(op.ys.slice(0, slots * width));
  struct {
    uint64_t table, first, second, slot_rows, sorted, x, scratch, ys, host;
    uint32_t n, width, row_width, fused;
  } args{h.table.address(), first, second, slot_rows, sorted, address(op.x.slice(0, n * width)), scratch, ys,
         host.address, static_cast<uint32_t>(n), static_cast<uint32_t>(h.width), static_cast<uint32_t>(width),
         gate_up_mode(h, product_kernel(h.down, 1, true))};
  static_assert(sizeof(args) == 88);
  dispatch_route(spec, op.logits, n, ids, weights, stage(&args, sizeof(args)).address);
  // A job per row and slot: one row each.
  held_experts(op, h, first, second, 1, slots, ys, slot_rows, sorted);
}

void VulkanBackend::held_experts(const HeldRoute& op, const HeldLayer& h, uint64_t first, uint64_t second,
                                 uint64_t rows, uint64_t jobs, uint64_t ys, uint64_t slot_rows, uint64_t sorted,
                                 const Arena::Piece* grids) {
  // The products, the activation and the combine, as expert_group() and
  // combine_experts() record them for the host's jobs.
  const uint64_t scratch = expert_act_.piece.address, total = op.n * op.spec.k * h.width;
  const uint64_t g0 = scratch, u0 = scratch + total * sizeof(float);
  const ProductKernel k_first = product_kernel(h.first, rows, true), k_down = product_kernel(h.down, rows, true);
  if (grids)
    dispatch_grouped_indirect(k_first, first, *grids, 0);
  else
    dispatch_grouped(k_first, first, k_first.groups_x(h.first_rows), k_first.groups_y(rows), h.fused ? jobs : 2 * jobs);
  // A down product of few rows activates its input as it loads it, a fused
  // gate_up's pairs unsplit (its jobs read them: gate_up_mode()).
  const bool on_load = activates_on_load(k_down);
  if (h.fused && !on_load) split_gate_up(g0, u0, u0 + total * sizeof(float), total);
  if (!on_load) activation(op.act, g0, u0, total);
  const LoadActivation load = on_load ? load_activation(op.act, h.fused ? 0 : total) : LoadActivation{};
  if (grids)
    dispatch_grouped_indirect(k_down, second, *grids, 3 * sizeof(uint32_t), load);
  else
    dispatch_grouped(k_down, second, k_down.groups_x(h.down_rows), k_down.groups_y(rows), jobs, load);
  dispatch_combine(ys, slot_rows, sorted, op.width, op.n, static_cast<size_t>(op.spec.k), op.shared, op.out);
}

void VulkanBackend::route_held_groups(const HeldRoute& op, const HeldLayer& h, uint64_t ids, uint64_t weights) {
  const size_t n = op.n, K = static_cast<size_t>(op.spec.k), slots = n * K, width = op.width, E = h.experts;
  // The jobs (3 an expert), then the combine's order and its weights, then
  // held_groups.comp's lists: the gather list, each slot's place, each
  // expert's count (held_job_floats).
  const uint64_t first = held_jobs_.piece.address, second = first + 2 * E * kJobBytes,
                 slot_rows = first + 3 * E * kJobBytes, sorted = slot_rows + slots * sizeof(uint32_t),
                 gather = sorted + slots * sizeof(float);
  const Arena::Piece host = staging_->take(slots * 8);
  held_copies_.push_back(HeldCopy{host.mapped, op.ids, op.weights, slots});
  const uint64_t scratch = expert_act_.piece.address, xs = address(op.ys.slice(0, slots * width));
  // The products' grids, sized by the most rows any expert got (written by
  // held_groups.comp after the lists): as many workgroups as a job's rows
  // need, not n's worth a job, most of which would find nothing to do.
  const ProductKernel k_first = product_kernel(h.first, n, true), k_down = product_kernel(h.down, n, true);
  const uint64_t gx_first = k_first.groups_x(h.first_rows), gx_down = k_down.groups_x(h.down_rows);
  if (gx_first > 0xFFFF || gx_down > 0xFFFF || k_first.rows > 0xFFFF || k_down.rows > 0xFFFF)
    throw Error("the Vulkan backend cannot run experts of " + std::to_string(h.width) + " columns in held layers");
  const uint64_t grid_at = gather + (2 * slots + E) * sizeof(uint32_t);
  const Arena::Piece grids{held_jobs_.piece.buffer, held_jobs_.piece.offset + (grid_at - held_jobs_.piece.address),
                           grid_at, nullptr};
  struct {
    uint64_t ids, weights, table, first, second, slot_rows, sorted, lists, xs, scratch, host;
    uint32_t n, k, experts, width, x_width, fused, step;
    uint32_t groups;  // the products' workgroups across their outputs: first | down << 16
    uint32_t tiles;   // and the rows a workgroup takes: first | down << 16
  } push{ids, weights, h.table.address(), first, second, slot_rows, sorted, gather, xs, scratch,
         host.address, static_cast<uint32_t>(n), static_cast<uint32_t>(K), static_cast<uint32_t>(E),
         static_cast<uint32_t>(h.width), static_cast<uint32_t>(width), gate_up_mode(h, k_down), 0,
         static_cast<uint32_t>(gx_first | gx_down << 16), k_first.rows | k_down.rows << 16};
  static_assert(sizeof(push) <= Stream::kPushBytes);
  // Count, place (a workgroup an expert), then the combine's order (an invocation a slot).
  for (uint32_t step = 0; step < 3; ++step) {
    push.step = step;
    stream_->dispatch("held_groups", push, step < 2 ? static_cast<uint32_t>(E) : static_cast<uint32_t>((slots + 255) / 256));
  }
  dispatch_gather(address(op.x.slice(0, n * width)), xs, gather, width, slots);
  // A job an expert, its rows in the grid's rows at most (workgroups past a
  // job's rows do nothing).
  held_experts(op, h, first, second, n, E, xs, slot_rows, sorted, &grids);
}

void VulkanBackend::collect_held_routes() {
  std::vector<int32_t> distinct;
  for (const HeldCopy& c : held_copies_) {
    std::memcpy(c.ids, c.from, c.count * sizeof(int32_t));
    std::memcpy(c.weights, c.from + c.count * sizeof(int32_t), c.count * sizeof(float));
    // Counted as the host's jobs count them: one hit per distinct expert.
    distinct.assign(c.ids, c.ids + c.count);
    std::sort(distinct.begin(), distinct.end());
    expert_stats_.hits += static_cast<uint64_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  }
  held_copies_.clear();
}

}  // namespace strata::vk
