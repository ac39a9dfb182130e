// The Vulkan backend's layers held whole (backend.h hold_layer, route_held):
// the routing, the experts and the combine of a decode step recorded without
// a round trip to the host.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "util/error.h"
#include "vulkan/vk_backend_impl.h"

namespace strata::vk {

namespace {
bool same_shape(const kernels::WeightMatrix& a, const kernels::WeightMatrix& b) {
  return a.valid() == b.valid() && a.dtype == b.dtype && a.packing == b.packing && a.out == b.out && a.in == b.in;
}
}  // namespace

bool VulkanBackend::hold_layer(int64_t layer, std::span<const ExpertWeights* const> experts) {
  if (layer < 0 || experts.empty() || experts_->budget() == 0 || held_.count(layer)) return held_.count(layer) != 0;
  const ExpertWeights& first = *experts[0];
  for (const ExpertWeights* e : experts) {
    const auto a = first.matrices();
    const auto b = e->matrices();
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_shape(*a[i], *b[i])) return false;  // one grouped dispatch needs one format and shape
  }
  const bool fused = first.gate_up.valid();
  if (fused ? !first.down.valid() : !(first.gate.valid() && first.up.valid() && first.down.valid())) return false;
  // Gate and up go through one grouped dispatch: one format and shape; and
  // the planned scratch must hold their rows.
  if (!fused && !same_shape(first.gate, first.up)) return false;
  const size_t width = static_cast<size_t>(fused ? first.gate_up.out / 2 : first.gate.out);
  if (width > limits_.expert_width || (fused && !limits_.fused_gate_up)) return false;
  // Every expert into the cache, then kept there for good; where the budget
  // runs out, the layer is not held (what was copied stays as plain cache).
  std::vector<uint32_t> table(experts.size() * 4 * (sizeof(WeightRef) / sizeof(uint32_t)));
  for (size_t e = 0; e < experts.size(); ++e) {
    const ExpertJob job{experts[e], 0, 0, layer, static_cast<int32_t>(e)};
    const uint64_t key = ExpertCache::key(layer, static_cast<int32_t>(e));
    const uint64_t staged_before = expert_stats_.staged;
    make_room();
    const ExpertCache::Entry entry = expert_weights(job);
    if (expert_stats_.staged != staged_before || !experts_->contains(key)) {
      finish();  // the staged copy may be read by nothing: drop it
      return false;
    }
    const WeightRef refs[4] = {entry.gate, entry.up, entry.down, entry.gate_up};
    std::memcpy(table.data() + e * 4 * (sizeof(WeightRef) / sizeof(uint32_t)), refs, sizeof(refs));
  }
  // An expert copied early may have been evicted by a later one (a budget
  // lowered when the device ran out): then none is pinned.
  for (size_t e = 0; e < experts.size(); ++e)
    if (!experts_->contains(ExpertCache::key(layer, static_cast<int32_t>(e)))) return false;
  for (size_t e = 0; e < experts.size(); ++e) experts_->pin(ExpertCache::key(layer, static_cast<int32_t>(e)));
  HeldLayer h;
  h.table = Buffer(*ctx_, table.size() * sizeof(uint32_t), Buffer::Where::Device);
  write(h.table, table.data(), table.size() * sizeof(uint32_t));
  h.fused = fused;
  h.first = weight_format(fused ? first.gate_up : first.gate);
  h.down = weight_format(first.down);
  h.first_rows = static_cast<uint32_t>(fused ? first.gate_up.out : first.gate.out);
  h.down_rows = static_cast<uint32_t>(first.down.out);
  h.width = width;
  h.experts = experts.size();
  held_.emplace(layer, std::move(h));
  finish();
  return true;
}

bool VulkanBackend::routes_held(int64_t layer, size_t n, const RouteSpec& spec) const {
  return n > 0 && n <= kHeldRows && n <= limits_.rows && routes_on_gpu(spec) && held_.count(layer) != 0;
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
  // The choice, on the device (as route()).
  const bool grouped = spec.kind == RouteSpec::Kind::SigmoidGroup;
  const uint64_t ids = route_.piece.address, weights = ids + slots * sizeof(int32_t);
  {
    struct {
      uint64_t logits, bias, ids, weights;
      uint32_t experts, k, groups, topk_groups, kind, normalize;
      float scale;
    } push{address(op.logits.slice(0, n * h.experts)),
           grouped ? weights_->address(spec.bias, h.experts * sizeof(float)) : 0, ids, weights,
           static_cast<uint32_t>(h.experts), static_cast<uint32_t>(K), static_cast<uint32_t>(spec.groups),
           static_cast<uint32_t>(spec.topk_groups), static_cast<uint32_t>(spec.kind), spec.normalize ? 1u : 0u,
           spec.scale};
    stream_->dispatch("route", push, static_cast<uint32_t>(n));
  }
  // The jobs, the combine's order and the host's copy of the choice.
  const uint64_t first = held_jobs_.piece.address, second = first + 2 * slots * kJobBytes,
                 slot_rows = second + slots * kJobBytes, sorted = slot_rows + slots * sizeof(uint32_t);
  const Arena::Piece host = staging_->take(slots * 8);
  held_copies_.push_back(HeldCopy{host.mapped, op.ids, op.weights, slots});
  const uint64_t scratch = expert_act_.piece.address, ys = address(op.ys.slice(0, slots * width));
  {
    struct {
      uint64_t ids, weights, table, first, second, slot_rows, sorted, x, scratch, ys, host;
      uint32_t n, k, width, x_width, hidden, fused;
    } push{ids, weights, h.table.address(), first, second, slot_rows, sorted, address(op.x.slice(0, n * width)),
           scratch, ys, host.address, static_cast<uint32_t>(n), static_cast<uint32_t>(K),
           static_cast<uint32_t>(h.width), static_cast<uint32_t>(width), static_cast<uint32_t>(width),
           h.fused ? 1u : 0u};
    static_assert(sizeof(push) == 112);
    stream_->dispatch("held_jobs", push, 1);
  }
  // The products, the activation and the combine, as expert_group() and
  // combine_experts() record them for the host's jobs.
  const auto& limit = ctx_->properties().limits.maxComputeWorkGroupCount;
  auto products = [&](WeightFormat f, uint64_t jobs, uint32_t count, uint32_t out_rows) {
    const uint32_t groups = (out_rows + outputs_per_group(f) - 1) / outputs_per_group(f);
    if (groups > limit[0] || count > limit[2]) throw Error("internal: held experts past the device's workgroups");
    const struct {
      uint64_t jobs;
    } push{jobs};
    stream_->dispatch(std::string("linear_grouped_") + format_name(f), push, groups, 1, count);
  };
  const uint64_t total = slots * h.width, g0 = scratch, u0 = scratch + total * sizeof(float);
  products(h.first, first, static_cast<uint32_t>(h.fused ? slots : 2 * slots), h.first_rows);
  if (h.fused) {
    struct {
      uint64_t y, x, z;
      uint32_t count, mode;
      float a, b;
    } push{g0, u0, u0 + total * sizeof(float), static_cast<uint32_t>(total),
           static_cast<uint32_t>(Elementwise::SplitGateUp), 0, 0};
    stream_->dispatch("elementwise", push, static_cast<uint32_t>(std::min<uint64_t>((total + 255) / 256, 65535)));
  }
  activation(op.act, g0, u0, total);
  products(h.down, second, static_cast<uint32_t>(slots), h.down_rows);
  struct {
    uint64_t ys, out, shared, rows, weights;
    uint32_t hidden, k, has_shared;
  } push{ys, address(op.out.slice(0, n * width)), op.shared.empty() ? 0 : address(op.shared.slice(0, n * width)),
         slot_rows, sorted, static_cast<uint32_t>(width), static_cast<uint32_t>(K), op.shared.empty() ? 0u : 1u};
  stream_->dispatch("combine", push, static_cast<uint32_t>((width + 255) / 256), static_cast<uint32_t>(n));
}

void VulkanBackend::collect_held_routes() {
  for (const HeldCopy& c : held_copies_) {
    std::memcpy(c.ids, c.from, c.count * sizeof(int32_t));
    std::memcpy(c.weights, c.from + c.count * sizeof(int32_t), c.count * sizeof(float));
    // Counted as the host's jobs count them: one hit per distinct expert.
    std::vector<int32_t> distinct(c.ids, c.ids + c.count);
    std::sort(distinct.begin(), distinct.end());
    expert_stats_.hits += static_cast<uint64_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  }
  held_copies_.clear();
}

}  // namespace strata::vk
