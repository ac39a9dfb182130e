// The Vulkan backend's attention ops (GqaAttend, MlaAttend, KdaAttend in
// backend.h) and its caches.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "util/error.h"
#include "vulkan/vk_backend_impl.h"
#include "vulkan/vk_kv_cache.h"

namespace strata::vk {

namespace {

// attention.glsl's RowRef.
struct RowRef {
  uint64_t keys = 0, values = 0;
  uint32_t pos = 0, ring = 0, first = 0, count = 0;
};
static_assert(sizeof(RowRef) == 32);

// The first position a row at `pos` attends to (a sliding window's start, else 0).
int64_t first_attended(int64_t pos, int64_t window) { return window ? std::max<int64_t>(0, pos - window + 1) : 0; }

VulkanKvCache& device_cache(KvCache* cache) {
  auto* c = dynamic_cast<VulkanKvCache*>(cache);
  if (!c) throw Error("internal: a row whose cache the Vulkan backend did not make");
  return *c;
}

}  // namespace

std::unique_ptr<KvCache> VulkanBackend::new_cache(const CacheShape& shape) {
  return std::make_unique<VulkanKvCache>(static_cast<CacheIo&>(*this), shape);
}
uint64_t VulkanBackend::cache_bytes(const CacheShape& shape) const { return CacheBook::bytes_at(shape); }
uint64_t VulkanBackend::cache_snapshot_bytes(const CacheShape& shape) const { return CacheBook::snapshot_bytes_at(shape); }

void VulkanBackend::check_positions(std::span<const Row> rows) const {
  check_step(rows.size());
  for (const Row& r : rows)
    if (r.pos < 0 || r.pos >= limits_.context)
      throw Error("internal: a row at position " + std::to_string(r.pos) + " on a backend planned for a context of " +
                  std::to_string(limits_.context));
}

uint64_t VulkanBackend::row_refs(std::span<const Row> rows, int64_t layer, int64_t window) {
  std::vector<RowRef> refs(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const VulkanKvCache& c = device_cache(rows[i].cache);
    const int64_t pos = rows[i].pos, first = first_attended(pos, window);
    refs[i] = RowRef{c.keys(layer), c.values(layer), static_cast<uint32_t>(pos),
                     static_cast<uint32_t>(c.book().ring(layer)), static_cast<uint32_t>(first),
                     static_cast<uint32_t>(pos + 1 - first)};
  }
  return stage(refs.data(), refs.size() * sizeof(RowRef)).address;
}

uint64_t VulkanBackend::rotations(std::span<const Row> rows, const Rope* rope) {
  if (!rope || rope->dim() == 0) return stage(4).address;
  // (Rope::rotation's factors depend on its frequencies and factor alone.)
  StagedRotations& last = rotations_;
  const bool same = last.epoch == epoch_ && last.inv_freq == rope->inv_freq() &&
                    last.attention_factor == rope->attention_factor() && last.positions.size() == rows.size() &&
                    std::equal(rows.begin(), rows.end(), last.positions.begin(),
                               [](const Row& r, int64_t pos) { return r.pos == pos; });
  if (same) return last.address;
  const size_t half = static_cast<size_t>(rope->dim() / 2);
  std::vector<float> table(rows.size() * 2 * half);
  for (size_t i = 0; i < rows.size(); ++i) rope->rotation(rows[i].pos, &table[i * 2 * half], &table[i * 2 * half + half]);
  const uint64_t address = stage(table.data(), table.size() * sizeof(float)).address;
  last.epoch = epoch_;
  last.inv_freq = rope->inv_freq();
  last.attention_factor = rope->attention_factor();
  last.positions.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) last.positions[i] = rows[i].pos;
  last.address = address;
  return address;
}

bool VulkanBackend::preps_in_scores(std::span<const Row> rows, int64_t window, int64_t widest) {
  if (widest > kPrepInScoresChannels || most_positions(rows, window) > kPrepInScoresPositions) return false;
  // No two rows of one sequence: then no row attends to another's new cache row.
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (rows[j].cache == rows[i].cache) return false;
  return true;
}

size_t VulkanBackend::score_rows(size_t heads) const {
  const size_t per_row = heads * static_cast<size_t>(limits_.context + 1);
  return std::max<size_t>(1, std::min<size_t>(scores_.size / std::max<size_t>(per_row, 1), limits_.rows));
}

void VulkanBackend::gqa_attention(const GqaAttend& op) {
  const size_t n = op.rows.size();
  check_positions(op.rows);
  const int64_t H = op.heads, KV = op.kv_heads, d = op.head_dim;
  if (static_cast<size_t>(H) > limits_.heads || KV < 1 || H % KV != 0 || !op.rope || op.rope->dim() > d)
    throw Error("internal: an attention layer with more heads than planned");
  if (d > 1024) throw Error("the Vulkan backend takes attention heads of at most 1024 channels (this model's: " +
                            std::to_string(d) + ")");
  const uint64_t q_norm = weights_->address(op.q_norm, op.q_norm ? d * sizeof(float) : 0),
                 k_norm = weights_->address(op.k_norm, op.k_norm ? d * sizeof(float) : 0),
                 sinks = weights_->address(op.sinks, op.sinks ? H * sizeof(float) : 0);
  make_room();
  const uint64_t rows = row_refs(op.rows, op.layer, op.window);
  struct {
    uint64_t q, k, v, rows, rot, q_norm, k_norm;
    uint32_t heads, kv_heads, head_dim, rot_dim;
    float eps;
    uint32_t interleaved, has_q_norm, has_k_norm;
  } prep{address(op.q.slice(0, n * H * d)), address(op.k.slice(0, n * KV * d)), address(op.v.slice(0, n * KV * d)),
         rows, rotations(op.rows, op.rope), q_norm, k_norm, static_cast<uint32_t>(H), static_cast<uint32_t>(KV), static_cast<uint32_t>(d),
         static_cast<uint32_t>(op.rope->dim()), op.eps, op.rope->interleaved() ? 1u : 0u, op.q_norm ? 1u : 0u,
         op.k_norm ? 1u : 0u};
  const size_t chunk = score_rows(static_cast<size_t>(H));
  const bool tiled = tiled_attention(op.rows, op.layer, op.window);
  // Decode steps: the scores' dispatch preps the heads itself
  // (gqa_row_scores.comp's PREP build).
  const bool prep_in_scores = !tiled && preps_in_scores(op.rows, op.window, d);
  if (!prep_in_scores) stream_->dispatch("gqa_prep", prep, static_cast<uint32_t>(H + KV), static_cast<uint32_t>(n));
  if (tiled) {
    for (size_t r0 = 0; r0 < n; r0 += chunk) {
      const size_t m = std::min(chunk, n - r0);
      gqa_tiled(prep.q, address(op.out.slice(0, n * H * d)), rows, sinks, op, r0, m,
                static_cast<uint32_t>(most_positions(op.rows.subspan(r0, m), 0)));
    }
    return;
  }
  // Otherwise 16 invocations a position for the scores, then the softmax
  // and a value channel an invocation for the output: the GPU's width,
  // whatever the rows' sequences, rings and windows.
  const uint32_t H32 = static_cast<uint32_t>(H), KV32 = static_cast<uint32_t>(KV), d32 = static_cast<uint32_t>(d),
                 stride = static_cast<uint32_t>(limits_.context + 1);
  for (size_t r0 = 0; r0 < n; r0 += chunk) {
    const size_t m = std::min(chunk, n - r0);
    const int64_t positions = most_positions(op.rows.subspan(r0, m), op.window);
    const uint32_t row0 = static_cast<uint32_t>(r0), rows_m = static_cast<uint32_t>(m);
    struct {
      uint64_t q, rows, scores;
      uint32_t heads, kv_heads, head_dim, score_stride;
      float scale;
      uint32_t row0;
    } scores{prep.q, rows, scores_.piece.address, H32, KV32, d32, stride, op.scale, row0};
    const uint32_t blocks = static_cast<uint32_t>((positions + 15) / 16);
    if (prep_in_scores) {
      struct {
        decltype(scores) row_scores;
        uint64_t k, v, rot, q_norm, k_norm;
        uint32_t rot_dim;
        float eps;
        uint32_t interleaved, has_q_norm, has_k_norm;
      } fused{scores, prep.k, prep.v, prep.rot, prep.q_norm, prep.k_norm, prep.rot_dim, prep.eps,
              prep.interleaved, prep.has_q_norm, prep.has_k_norm};
      stream_->dispatch("gqa_row_scores_prep", fused, blocks, H32, rows_m);
    } else {
      stream_->dispatch("gqa_row_scores", scores, blocks, H32, rows_m);
    }
    attend_rows(rows, sinks, op.sinks != nullptr, address(op.out.slice(0, n * H * d)), H32, KV32, d32, KV32 * d32, false,
                row0, rows_m);
  }
}

void VulkanBackend::attend_rows(uint64_t rows, uint64_t sinks, bool has_sinks, uint64_t out, uint32_t heads,
                                uint32_t kv_heads, uint32_t d, uint32_t width, bool from_keys, uint32_t row0, uint32_t n) {
  if (d > kRowAttendWideChannels) {
    attend_softmax(rows, sinks, heads, has_sinks, row0, n);
    attend_row_values(rows, out, heads, kv_heads, d, width, from_keys, row0, n);
    return;
  }
  // The softmax and the values in one dispatch (attend_row.comp).
  struct {
    uint64_t rows, scores, sinks, out;
    uint32_t heads, kv_heads, head_dim, score_stride, has_sinks, row0, width, from_keys;
  } attend{rows, scores_.piece.address, sinks, out, heads, kv_heads, d, static_cast<uint32_t>(limits_.context + 1),
           has_sinks ? 1u : 0u, row0, width, from_keys ? 1u : 0u};
  stream_->dispatch(d <= kRowAttendChannels ? "attend_row" : "attend_row_wide", attend, heads, n);
}

void VulkanBackend::attend_softmax(uint64_t rows, uint64_t sinks, uint32_t heads, bool has_sinks, uint32_t row0,
                                   uint32_t n) {
  struct {
    uint64_t rows, scores, sinks;
    uint32_t heads, score_stride, has_sinks, row0;
  } softmax{rows, scores_.piece.address, sinks, heads, static_cast<uint32_t>(limits_.context + 1), has_sinks ? 1u : 0u,
            row0};
  stream_->dispatch("attend_softmax", softmax, heads, n);
}

void VulkanBackend::attend_row_values(uint64_t rows, uint64_t out, uint32_t heads, uint32_t kv_heads, uint32_t d,
                                      uint32_t width, bool from_keys, uint32_t row0, uint32_t n) {
  struct {
    uint64_t rows, scores, out;
    uint32_t heads, kv_heads, head_dim, score_stride, row0, width, from_keys;
  } values{rows,  scores_.piece.address, out, heads, kv_heads, d, static_cast<uint32_t>(limits_.context + 1),
           row0, width, from_keys ? 1u : 0u};
  stream_->dispatch("attend_row_values", values, (d + 63) / 64, heads, n);
}

int64_t VulkanBackend::most_positions(std::span<const Row> rows, int64_t window) {
  int64_t positions = 0;
  for (const Row& r : rows) positions = std::max(positions, r.pos + 1 - first_attended(r.pos, window));
  return positions;
}

bool VulkanBackend::tiled_attention(std::span<const Row> rows, int64_t layer, int64_t window) const {
  if (rows.size() < kTiledRows) return false;
  for (const Row& r : rows)
    if (r.cache != rows[0].cache || (window && r.pos >= window)) return false;
  return device_cache(rows[0].cache).book().ring(layer) == 0;
}

void VulkanBackend::gqa_tiled(uint64_t q, uint64_t out, uint64_t rows, uint64_t sinks, const GqaAttend& op, size_t r0,
                              size_t m, uint32_t positions) {
  const uint32_t H = static_cast<uint32_t>(op.heads), KV = static_cast<uint32_t>(op.kv_heads),
                 d = static_cast<uint32_t>(op.head_dim), stride = static_cast<uint32_t>(limits_.context + 1);
  const uint32_t pairs = static_cast<uint32_t>(m) * (H / KV), row0 = static_cast<uint32_t>(r0), n = static_cast<uint32_t>(m);
  struct {
    uint64_t q, rows, scores;
    uint32_t heads, kv_heads, head_dim, score_stride;
    float scale;
    uint32_t row0, n, positions;
  } scores{q, rows, scores_.piece.address, H, KV, d, stride, op.scale, row0, n, positions};
  stream_->dispatch("gqa_scores", scores, (positions + 31) / 32, (pairs + 31) / 32, KV);
  attend_softmax(rows, sinks, H, op.sinks != nullptr, row0, n);
  attend_values(rows, out, H, KV, d, KV * d, false, row0, n, positions);
}

void VulkanBackend::attend_values(uint64_t rows, uint64_t out, uint32_t heads, uint32_t kv_heads, uint32_t d,
                                  uint32_t width, bool from_keys, uint32_t row0, uint32_t n, uint32_t positions) {
  struct {
    uint64_t rows, scores, out;
    uint32_t heads, kv_heads, head_dim, score_stride, row0, n, positions, width, from_keys;
  } values{rows, scores_.piece.address, out, heads, kv_heads, d, static_cast<uint32_t>(limits_.context + 1),
           row0, n, positions, width, from_keys ? 1u : 0u};
  const uint32_t pairs = n * (heads / kv_heads);
  stream_->dispatch("attend_values", values, (d + 63) / 64, (pairs + 63) / 64, kv_heads);
}

namespace {
// The per-head matrices as one of H·rows rows when they lie one after another
// in memory (a 3-D checkpoint tensor sliced per head), else nothing.
std::optional<kernels::WeightMatrix> one_matrix(std::span<const kernels::WeightMatrix> per_head) {
  const kernels::WeightMatrix& m0 = per_head[0];
  const size_t bytes = static_cast<size_t>(m0.out) * m0.row_bytes();
  for (size_t h = 0; h < per_head.size(); ++h) {
    const kernels::WeightMatrix& m = per_head[h];
    if (m.data != m0.data + h * bytes || m.dtype != m0.dtype || m.packing != m0.packing || m.out != m0.out ||
        m.in != m0.in || m.bias || m.block_scale || m.scales)
      return std::nullopt;
  }
  kernels::WeightMatrix all = m0;
  all.out = m0.out * static_cast<int64_t>(per_head.size());
  return all;
}
}  // namespace

void VulkanBackend::head_products(std::span<const kernels::WeightMatrix> per_head, const kernels::WeightMatrix* fused,
                                  int64_t row0, int64_t rows_per_head, int64_t head_rows, uint64_t x,
                                  uint32_t x_stride, uint32_t x_head, size_t n, uint64_t y, uint32_t y_stride,
                                  uint32_t y_head, int64_t heads) {
  ProductShape s{n, x_stride, y_stride, 1, 0, x_head, y_head};
  if (fused) {
    // Rows [h·head_rows + row0, + rows_per_head) of the fused matrix for head h.
    const kernels::WeightMatrix span = fused->row_slice(row0, heads * head_rows - row0);
    WeightRef ref = weights_->resident(span);
    ref.out_rows = static_cast<uint32_t>(rows_per_head);
    s.heads = static_cast<uint32_t>(heads);
    s.head_rows = static_cast<uint32_t>(head_rows);
    return product(ref, weight_format(span), x, y, s);
  }
  if (auto all = one_matrix(per_head)) {
    WeightRef ref = weights_->resident(*all);
    ref.out_rows = static_cast<uint32_t>(per_head[0].out);
    s.heads = static_cast<uint32_t>(heads);
    s.head_rows = static_cast<uint32_t>(per_head[0].out);
    return product(ref, weight_format(*all), x, y, s);
  }
  for (int64_t h = 0; h < heads; ++h) {
    const kernels::WeightMatrix& m = per_head[static_cast<size_t>(h)];
    product(weights_->resident(m), weight_format(m), x + h * x_head * sizeof(float), y + h * y_head * sizeof(float),
            ProductShape{n, x_stride, y_stride, 1, 0, 0, 0});
  }
}

void VulkanBackend::mla_attention(const MlaAttend& op) {
  const size_t n = op.rows.size();
  check_positions(op.rows);
  const int64_t H = op.heads, nope = op.nope, rope = op.rope_dim, qk = nope + rope, lora = op.latent, vdim = op.v_dim;
  if (static_cast<size_t>(lora) > limits_.latent || static_cast<size_t>(rope) > limits_.latent_rope ||
      static_cast<size_t>(H) > limits_.heads)
    throw Error("internal: latent attention wider than planned");
  if (lora > 1024 || rope > 1024)
    throw Error("the Vulkan backend takes latent attention of at most 1024 latent and 1024 rotated channels (this "
                "model's: " + std::to_string(lora) + " and " + std::to_string(rope) + ")");
  // Every weight resident before anything is staged (see stage()).
  const uint64_t kv_norm = weights_->address(op.kv_norm, lora * sizeof(float));
  if (op.kv_b) {
    weights_->resident(op.kv_b->row_slice(0, H * (nope + vdim)));
    weights_->resident(op.kv_b->row_slice(nope, H * (nope + vdim) - nope));
  } else {
    for (auto per_head : {op.k_b, op.v_b}) {
      if (auto all = one_matrix(per_head))
        weights_->resident(*all);
      else
        for (const auto& m : per_head) weights_->resident(m);
    }
  }
  make_room();
  const uint64_t rows = row_refs(op.rows, op.layer, 0);
  const uint64_t q = address(op.q.slice(0, n * H * qk));
  const uint64_t q_abs = mla_.piece.address, q_rot = q_abs + limits_.rows * limits_.heads * limits_.latent * 4,
                 latent = q_rot + limits_.rows * limits_.heads * limits_.latent_rope * 4;
  struct {
    uint64_t q, kv, q_rot, rows, rot, kv_norm;
    uint32_t heads, qk, nope, latent, rope_dim;
    float eps;
    uint32_t has_rope, interleaved;
  } prep{q, address(op.kv.slice(0, n * (lora + rope))), q_rot, rows, rotations(op.rows, op.rope),
         kv_norm, static_cast<uint32_t>(H), static_cast<uint32_t>(qk),
         static_cast<uint32_t>(nope), static_cast<uint32_t>(lora), static_cast<uint32_t>(rope), op.eps,
         op.rope ? 1u : 0u, op.rope && op.rope->interleaved() ? 1u : 0u};
  const bool tiled = tiled_attention(op.rows, op.layer, 0);
  // Decode steps: the scores' dispatch preps the rows itself
  // (mla_row_scores.comp's PREP build).
  const bool prep_in_scores = !tiled && preps_in_scores(op.rows, 0, std::max(lora, rope));
  if (!prep_in_scores) stream_->dispatch("mla_prep", prep, static_cast<uint32_t>(H + 1), static_cast<uint32_t>(n));

  // The absorbed query: q_nope · W_UK[h].
  if (op.kv_b) {
    const kernels::WeightMatrix span = op.kv_b->row_slice(0, H * (nope + vdim));
    if (is_interleaved(weight_format(span))) throw Error("internal: MLA's kv_b in the CPU kernels' interleaved layout");
    struct {
      WeightRef w;
      uint64_t x, y;
      uint32_t n, count, x_stride, y_stride, head_rows, x_head, y_head;
    } push{weights_->resident(span), q, q_abs, static_cast<uint32_t>(n), static_cast<uint32_t>(nope),
           static_cast<uint32_t>(H * qk), static_cast<uint32_t>(H * lora), static_cast<uint32_t>(nope + vdim),
           static_cast<uint32_t>(qk), static_cast<uint32_t>(lora)};
    stream_->dispatch(std::string("linear_t_") + format_name(weight_format(span)), push,
                      static_cast<uint32_t>((lora + 63) / 64), static_cast<uint32_t>(n), static_cast<uint32_t>(H));
  } else {
    head_products(op.k_b, nullptr, 0, lora, lora, q, static_cast<uint32_t>(H * qk), static_cast<uint32_t>(qk), n, q_abs,
                  static_cast<uint32_t>(H * lora), static_cast<uint32_t>(lora), H);
  }

  // The scores, the softmax, then the latents' sums (the cached latents are
  // the values): for a prompt's rows as tiled products (mla_scores.comp,
  // attend_values.comp), else a position and a channel an invocation.
  const size_t chunk = score_rows(static_cast<size_t>(H));
  const uint32_t H32 = static_cast<uint32_t>(H), lora32 = static_cast<uint32_t>(lora),
                 rope32 = static_cast<uint32_t>(rope), stride = static_cast<uint32_t>(limits_.context + 1);
  for (size_t r0 = 0; r0 < n; r0 += chunk) {
    const size_t m = std::min(chunk, n - r0);
    const uint32_t positions = static_cast<uint32_t>(most_positions(op.rows.subspan(r0, m), 0));
    const uint32_t row0 = static_cast<uint32_t>(r0), rows_m = static_cast<uint32_t>(m);
    // mla_row_scores.comp reads the fields up to row0; mla_scores.comp all.
    struct {
      uint64_t q_abs, q_rot, rows, scores;
      uint32_t heads, latent_w, rope_dim, score_stride;
      float scale;
      uint32_t row0, n, positions;
    } scores{q_abs, q_rot, rows, scores_.piece.address, H32, lora32, rope32, stride, op.scale, row0, rows_m, positions};
    if (tiled) {
      stream_->dispatch("mla_scores", scores, (positions + 31) / 32, (rows_m * H32 + 31) / 32, 1);
    } else if (prep_in_scores) {
      struct {
        uint64_t q_abs, q_rot, rows, scores;
        uint32_t heads, latent_w, rope_dim, score_stride;
        float scale;
        uint32_t row0;
        uint64_t q, kv, rot, kv_norm;
        uint32_t qk, nope;
        float eps;
        uint32_t has_rope, interleaved;
      } fused{q_abs, q_rot, rows, scores_.piece.address, H32, lora32, rope32, stride, op.scale, row0,
              prep.q, prep.kv, prep.rot, prep.kv_norm, prep.qk, prep.nope, prep.eps, prep.has_rope, prep.interleaved};
      stream_->dispatch("mla_row_scores_prep", fused, (positions + 15) / 16, H32, rows_m);
    } else {
      stream_->dispatch("mla_row_scores", scores, (positions + 15) / 16, H32, rows_m);
    }
    if (tiled) {
      attend_softmax(rows, 0, H32, false, row0, rows_m);
      attend_values(rows, latent, H32, 1, lora32, lora32 + rope32, true, row0, rows_m, positions);
    } else {
      attend_rows(rows, 0, false, latent, H32, 1, lora32, lora32 + rope32, true, row0, rows_m);
    }
  }
  // Expanded through W_UV[h].
  head_products(op.v_b, op.kv_b, nope, vdim, nope + vdim, latent, static_cast<uint32_t>(H * lora),
                static_cast<uint32_t>(lora), n, address(op.out.slice(0, n * H * vdim)), static_cast<uint32_t>(H * vdim),
                static_cast<uint32_t>(vdim), H);
}

void VulkanBackend::kda_attention(const KdaAttend& op) {
  const std::span<const Row> rows = op.rows;
  const size_t n = rows.size();
  check_positions(rows);
  const int64_t H = op.heads, K = op.head_dim, D = H * K, W = op.conv_kernel;
  if (K > 512 || W < 1 || static_cast<size_t>(H) > limits_.heads)
    throw Error("internal: a KDA layer the Vulkan backend does not plan for");
  struct Run {
    uint64_t state;
    uint32_t first, count;
  };
  std::vector<Run> runs;
  std::vector<KvCache*> seen;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && rows[j].cache == rows[i].cache) ++j;
    if (std::find(seen.begin(), seen.end(), rows[i].cache) != seen.end())
      throw Error("internal: a sequence's KDA rows are not consecutive in the step");
    seen.push_back(rows[i].cache);
    for (size_t r = i; r < j; ++r)
      if (rows[r].pos != rows[i].pos + static_cast<int64_t>(r - i))
        throw Error("internal: a sequence's KDA rows are not in position order in the step");
    device_cache(rows[i].cache).check_state_rows(op.layer, rows[i].pos);
    runs.push_back(Run{device_cache(rows[i].cache).state(op.layer), static_cast<uint32_t>(i), static_cast<uint32_t>(j - i)});
    i = j;
  }
  // Every run checked first, so a refused step moves no state.
  for (const Run& r : runs)
    device_cache(rows[r.first].cache).take_state_rows(op.layer, rows[r.first].pos, static_cast<int64_t>(r.count));
  const uint64_t conv_bytes = static_cast<uint64_t>(D * W) * sizeof(float);
  const uint64_t conv_q = weights_->address(op.conv[0], conv_bytes), conv_k = weights_->address(op.conv[1], conv_bytes),
                 conv_v = weights_->address(op.conv[2], conv_bytes),
                 dt_bias = weights_->address(op.dt_bias, D * sizeof(float)),
                 o_norm = weights_->address(op.o_norm, K * sizeof(float));
  make_room();
  // e^A_log per head on the host, as the CPU computes it.
  std::vector<float> a(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) a[h] = std::exp(op.a_log[h]);
  struct {
    uint64_t q, k, v, decay, beta, gate, out, conv_q, conv_k, conv_v, a, dt_bias, o_norm;
    uint32_t heads, head_dim, kernel;
    float lower_bound, eps, scale;
  } params{address(op.q.slice(0, n * D)), address(op.k.slice(0, n * D)), address(op.v.slice(0, n * D)),
           address(op.decay.slice(0, n * D)), address(op.beta.slice(0, n * H)), address(op.gate.slice(0, n * D)),
           address(op.out.slice(0, n * D)), conv_q, conv_k, conv_v, stage(a.data(), a.size() * sizeof(float)).address,
           dt_bias, o_norm, static_cast<uint32_t>(H), static_cast<uint32_t>(K),
           static_cast<uint32_t>(W), op.lower_bound, op.eps, 1.0f / std::sqrt(static_cast<float>(K))};
  static_assert(sizeof(params) == 128);
  struct {
    uint64_t params, runs;
  } push{stage(&params, sizeof(params)).address, stage(runs.data(), runs.size() * sizeof(Run)).address};
  stream_->dispatch("kda", push, static_cast<uint32_t>(runs.size()), static_cast<uint32_t>(H));
}

}  // namespace strata::vk
