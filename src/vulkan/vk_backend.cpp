// The Vulkan backend's memory and its ops on plain tensors (vulkan_backend.h).
#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "util/error.h"
#include "util/mapped_file.h"
#include "vulkan/vk_backend_impl.h"
#include "vulkan/vulkan_backend.h"

namespace strata {

std::unique_ptr<Backend> make_vulkan_backend(int index, int64_t vram_bytes) {
  return std::make_unique<vk::VulkanBackend>(index, vram_bytes);
}

std::vector<std::string> describe_vulkan_devices(std::string* error) {
  std::vector<std::string> lines;
  for (const vk::DeviceInfo& d : vk::list_devices(error)) {
    const char* type = d.type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU     ? "discrete GPU"
                       : d.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? "integrated GPU"
                       : d.type == VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU    ? "virtual GPU"
                       : d.type == VK_PHYSICAL_DEVICE_TYPE_CPU            ? "CPU implementation"
                                                                          : "other";
    std::string line = "vulkan:" + std::to_string(d.index) + "  " + d.name + " (" + type + ", " +
                       std::to_string(d.device_local_bytes >> 20) + " MiB)";
    if (!d.unusable.empty()) line += ": unusable, " + d.unusable;
    lines.push_back(line);
  }
  return lines;
}

int best_vulkan_gpu(std::string* error) {
  auto rank = [](VkPhysicalDeviceType t) {
    return t == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU     ? 3
           : t == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? 2
           : t == VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU    ? 1
                                                         : 0;
  };
  int best = -1, best_rank = 0;
  std::string why;
  for (const vk::DeviceInfo& d : vk::list_devices(error)) {
    if (!d.unusable.empty()) {
      if (rank(d.type) > 0) why = d.name + ": " + d.unusable;
      continue;
    }
    if (rank(d.type) > best_rank) best = static_cast<int>(d.index), best_rank = rank(d.type);
  }
  if (best < 0 && error && error->empty()) *error = why.empty() ? "no GPU among the Vulkan devices" : why;
  return best;
}

namespace vk {

namespace {
// Without limit_staging(): the host staging a submission may use before the
// recorded work is run to free it (staged weights; uploads), and the op
// arguments of one submission (in the device's own host-visible memory where
// it has some: Buffer::Where::Args), in buffers of kChunk.
constexpr uint64_t kStagingCap = 256ull << 20;
constexpr uint64_t kArgsCap = 64ull << 20;
constexpr uint64_t kChunk = 64ull << 20;
}  // namespace

VulkanBackend::VulkanBackend(int index, int64_t vram_bytes) : ctx_(std::make_unique<Context>(index)) {
  const uint64_t budget = vram_bytes >= 0        ? static_cast<uint64_t>(vram_bytes)
                          : ctx_->unified_memory() ? 0
                                                   : ctx_->info().device_local_bytes / 2;
  experts_ = std::make_unique<ExpertCache>(*ctx_, budget);
  stream_ = std::make_unique<Stream>(*ctx_);
  stream_->set_before_recording([this] { record_held_back_combine(); });
  tensors_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Device, 64ull << 20);
  staging_cap_ = kStagingCap;
  upload_cap_ = kStagingCap;
  args_cap_ = kArgsCap;
  staging_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Host, kChunk);
  args_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Args, 4ull << 20);
  uploads_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Host, kChunk);
  weights_ = std::make_unique<WeightStore>(*ctx_, [this](const Arena::Piece& dst, const void* src, uint64_t bytes) {
    copy_in(dst.buffer, dst.offset, dst.mapped, src, bytes, true);
  });
  // Slot 0 is never handed out, so a default Tensor is never a real one.
  slots_.emplace_back();
}

VulkanBackend::~VulkanBackend() {
  try {
    stream_->finish();
  } catch (...) {
  }
}

const VulkanBackend::Slot& VulkanBackend::slot(Tensor t) const {
  if (t.buffer == 0 || t.buffer >= slots_.size() || t.offset + t.size > slots_[t.buffer].size)
    throw Error("internal: a tensor that is not one of the Vulkan backend's");
  return slots_[t.buffer];
}

uint64_t VulkanBackend::address(Tensor t) const { return slot(t).piece.address + t.offset * sizeof(float); }

Tensor VulkanBackend::allocate(uint64_t size) {
  slots_.push_back(Slot{tensors_->take(size * sizeof(float)), size});
  tensor_bytes_ += size * sizeof(float);
  return Tensor{static_cast<uint32_t>(slots_.size() - 1), 0, size};
}

void VulkanBackend::release_tensors() {
  // The step state route_held() wrote to is being replaced (a step that
  // threw left its copies pending): nothing is copied into it any more.
  held_copies_.clear();
  finish();
  slots_.resize(1);
  tensors_->clear();
  weights_->clear();
  tensor_bytes_ = 0;
  // The planned scratch lives with the tensors: plan again after this.
  expert_act_ = scores_ = mla_ = route_ = held_jobs_ = Slot{};
  scratch_floats_ = 0;
}

namespace {
uint64_t expert_act_floats(const StepLimits& l) {
  return static_cast<uint64_t>(l.rows) * l.experts_per_token * (l.fused_gate_up ? 4 : 2) * l.expert_width;
}

// Attention scores: rows × heads × (context + 1), but no more than this many
// at once (a long prefill attends in chunks of rows).
constexpr uint64_t kScoreFloats = 16ull << 20;
uint64_t score_floats(const StepLimits& l) {
  const uint64_t per_row = static_cast<uint64_t>(l.heads) * static_cast<uint64_t>(l.context + 1);
  return std::min<uint64_t>(l.rows * per_row, std::max(per_row, kScoreFloats));
}
uint64_t mla_floats(const StepLimits& l) {
  return static_cast<uint64_t>(l.rows) * l.heads * (2 * l.latent + l.latent_rope);
}
// route.comp's output: a step's ids, then its weights.
uint64_t route_floats(const StepLimits& l) { return std::max<uint64_t>(2 * l.rows * l.experts_per_token, 1); }
}  // namespace

uint64_t VulkanBackend::held_job_floats(const StepLimits& l) {
  // route_held (route.comp): 3 jobs, a combine row and weight a slot of up to
  // kHeldRows rows; held_groups.comp: 3 jobs and a count an expert, then a
  // combine row, weight, gather row and place a slot of any step, then the
  // two grids of its products (kHeldGridWords).
  const uint64_t few = std::min<uint64_t>(l.rows, kHeldRows) * l.experts_per_token;
  const uint64_t many = l.rows * l.experts_per_token;
  return std::max(3 * few * kJobBytes + 2 * few * sizeof(float),
                  3 * l.experts * kJobBytes + (4 * many + l.experts + kHeldGridWords) * sizeof(uint32_t)) /
         sizeof(float);
}

uint64_t VulkanBackend::scratch_bytes(const StepLimits& l) const {
  return (expert_act_floats(l) + score_floats(l) + mla_floats(l) + route_floats(l) + held_job_floats(l)) *
         sizeof(float);
}

void VulkanBackend::plan(const StepLimits& l) {
  limits_ = l;
  auto take = [&](uint64_t floats) { return Slot{tensors_->take(floats * sizeof(float)), floats}; };
  expert_act_ = take(expert_act_floats(l));
  scores_ = take(score_floats(l));
  mla_ = take(mla_floats(l));
  route_ = take(route_floats(l));
  held_jobs_ = take(held_job_floats(l));
  scratch_floats_ = expert_act_.size + scores_.size + mla_.size + route_.size + held_jobs_.size;
}

uint64_t VulkanBackend::allocated_bytes() const { return tensor_bytes_ + scratch_floats_ * sizeof(float); }

void VulkanBackend::check_step(size_t rows) const {
  if (rows > limits_.rows)
    throw Error("internal: a step of " + std::to_string(rows) + " rows on a backend planned for " +
                std::to_string(limits_.rows));
}

Arena::Piece VulkanBackend::stage(uint64_t bytes) { return args_->take(bytes); }

namespace {
// `bytes` from `src` into a new piece of the (mapped) arena `a`.
Arena::Piece copy_into(Arena& a, const void* src, uint64_t bytes) {
  Arena::Piece p = a.take(bytes);
  if (bytes) std::memcpy(p.mapped, src, bytes);
  return p;
}
}  // namespace

Arena::Piece VulkanBackend::stage_bulk(const void* src, uint64_t bytes) { return copy_into(*staging_, src, bytes); }

DeviceExpertStats VulkanBackend::expert_cache_stats() const {
  DeviceExpertStats s = expert_stats_;
  s.capacity_bytes = experts_->budget();  // lowered where the device had less memory
  s.host_staging_bytes = staging_->reserved() + uploads_->reserved() + args_->reserved();
  s.dispatches = stream_->dispatches();
  s.barriers = stream_->barriers();
  return s;
}

// A quarter of each cap is left for the op about to be recorded (its
// arguments, a pick's or a held route's results): past three quarters, what
// is recorded runs first. (An op stages far less than that: a few words a row.)
bool VulkanBackend::staging_full() const {
  return staging_->used() > staging_cap_ / 4 * 3 || args_->used() > args_cap_ / 4 * 3;
}

void VulkanBackend::limit_staging(uint64_t bytes) {
  finish();  // nothing recorded reads the buffers given back below
  // Half for weights staged for a submission, a quarter each for uploads and
  // op arguments; each arena one buffer of its cap, which what is staged
  // between two finishes never passes (make_room(), run_experts(), copy_in()).
  // Whole MiB (pieces are taken 256-aligned: a cap that is not would leave
  // a last piece no room the check before it saw).
  auto cap = [](uint64_t b) { return std::max<uint64_t>(b >> 20, 1) << 20; };
  staging_cap_ = cap(bytes / 2);
  upload_cap_ = cap(bytes / 4);
  args_cap_ = cap(bytes / 4);
  staging_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Host, staging_cap_);
  args_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Args, args_cap_);
  uploads_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Host, upload_cap_);
}

uint64_t VulkanBackend::staging_bytes() const { return staging_cap_ + upload_cap_ + args_cap_; }

void VulkanBackend::make_room() {
  if (staging_full()) finish();
}

Arena::Piece VulkanBackend::stage(const void* src, uint64_t bytes) { return copy_into(*args_, src, bytes); }

void VulkanBackend::finish() {
  stream_->finish();
  host_reads_.clear();
  collect_held_routes();
  ++epoch_;
  staging_->rewind();
  args_->rewind();
  uploads_->rewind();
}

void VulkanBackend::profile_phase(std::string_view label) {
  finish();
  stream_->profile_phase(label);
}

bool VulkanBackend::adopt_host_memory(std::span<const uint8_t> memory) {
  if (host_memory_) {
    // What reads it runs before it goes; the import goes however that ends
    // (a device lost runs nothing more), before the memory can be freed.
    struct Release {
      VulkanBackend& b;
      ~Release() {
        b.host_reads_.clear();
        b.host_memory_.reset();
      }
    } release{*this};
    if (!host_reads_.empty()) stream_->finish();
  }
  const uint64_t align = ctx_->host_import_alignment();
  if (memory.empty() || align == 0 || reinterpret_cast<uintptr_t>(memory.data()) % align != 0 ||
      memory.size() % align != 0)
    return false;
  try {
    host_memory_ = std::make_unique<Buffer>(*ctx_, const_cast<uint8_t*>(memory.data()), memory.size());
  } catch (const Error&) {
    return false;  // the driver would not take it: experts go through the staging, as without
  }
  return true;
}

void VulkanBackend::host_memory_written(const void* p, size_t bytes) {
  if (host_reads_.empty()) return;
  const auto* b = static_cast<const uint8_t*>(p);
  // The first recorded read that ends after b: it overlaps when it starts before b + bytes.
  auto it = host_reads_.upper_bound(b);
  if (it != host_reads_.begin() && std::prev(it)->second > b) --it;
  if (it == host_reads_.end() || it->first >= b + bytes) return;
  stream_->finish();  // the staging stays as it is: an op may be between its stage() calls
  host_reads_.clear();
}

bool VulkanBackend::in_host_memory(const void* p, uint64_t bytes) const {
  if (!host_memory_) return false;
  const auto* b = static_cast<const uint8_t*>(p);
  const uint8_t* base = host_memory_->mapped();
  return b >= base && bytes <= host_memory_->bytes() && static_cast<uint64_t>(b - base) <= host_memory_->bytes() - bytes;
}

uint64_t VulkanBackend::host_memory_read(const void* p, uint64_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  auto [it, fresh] = host_reads_.emplace(b, b + bytes);
  if (!fresh) it->second = std::max(it->second, b + bytes);
  expert_stats_.bytes_in_place += bytes;
  return host_memory_->address() + static_cast<uint64_t>(b - host_memory_->mapped());
}

void VulkanBackend::copy_in(VkBuffer buffer, uint64_t offset, uint8_t* mapped, const void* src, uint64_t bytes,
                            bool fresh) {
  if (mapped) {
    if (!fresh) finish();  // ops recorded before may still read or write it
    std::memcpy(mapped, src, bytes);
    return;
  }
  if (in_host_memory(src, bytes)) {  // straight from the RAM cache, no copy on the host
    const uint64_t from = host_memory_read(src, bytes) - host_memory_->address();
    stream_->copy(host_memory_->handle(), from, buffer, offset, bytes);
    return;
  }
  // Through the upload staging, whose pieces no op's arguments share: when
  // it fills, the copies recorded so far are run and it is reused, while the
  // arguments of an op being put together stay where they are.
  const auto* s = static_cast<const uint8_t*>(src);
  for (uint64_t at = 0; at < bytes;) {
    const uint64_t part = std::min(bytes - at, upload_cap_ / 4);
    if (uploads_->used() + Arena::taken(part) > upload_cap_) {
      stream_->finish();
      host_reads_.clear();
      uploads_->rewind();
    }
    const Arena::Piece st = uploads_->take(part);
    std::memcpy(st.mapped, s + at, part);
    stream_->copy(st.buffer, st.offset, buffer, offset + at, part);
    at += part;
  }
}

void VulkanBackend::copy_out(VkBuffer buffer, uint64_t offset, const uint8_t* mapped, void* dst, uint64_t bytes) {
  if (mapped) {
    finish();
    std::memcpy(dst, mapped, bytes);
    return;
  }
  if (!readback_ || readback_->bytes() < bytes)
    readback_ = std::make_unique<Buffer>(*ctx_, std::max<uint64_t>(bytes, 1 << 20), Buffer::Where::Host);
  stream_->copy(buffer, offset, readback_->handle(), 0, bytes);
  finish();
  std::memcpy(dst, readback_->mapped(), bytes);
}

void VulkanBackend::upload(Tensor dst, const float* src) {
  const Slot& s = slot(dst);
  const uint64_t at = dst.offset * sizeof(float);
  copy_in(s.piece.buffer, s.piece.offset + at, s.piece.mapped ? s.piece.mapped + at : nullptr, src,
          dst.size * sizeof(float), false);
}

void VulkanBackend::download(Tensor src, float* dst) {
  const Slot& s = slot(src);
  const uint64_t at = src.offset * sizeof(float);
  copy_out(s.piece.buffer, s.piece.offset + at, s.piece.mapped ? s.piece.mapped + at : nullptr, dst,
           src.size * sizeof(float));
}

void VulkanBackend::copy_on_device(const Buffer& src, const Buffer& dst, uint64_t bytes) {
  stream_->copy(src.handle(), 0, dst.handle(), 0, bytes);
}

void VulkanBackend::zero(const Buffer& b) { stream_->zero(b.handle(), 0, b.bytes()); }

void VulkanBackend::read(const Buffer& src, void* dst, uint64_t bytes) {
  copy_out(src.handle(), 0, src.mapped(), dst, bytes);
}

void VulkanBackend::write(const Buffer& dst, const void* src, uint64_t bytes) {
  copy_in(dst.handle(), 0, dst.mapped(), src, bytes, false);
}

void VulkanBackend::preload(const kernels::WeightMatrix& w) {
  // Read ahead whole first: a token table read by rows is advised random,
  // and its upload would otherwise fault it in a page at a time.
  const WeightSpans s = weight_spans(w);
  advise_willneed(w.data, s.data);
  weights_->resident(w);
}

void VulkanBackend::embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, Tensor out) {
  const WeightFormat f = weight_format(table);
  if (is_interleaved(f)) throw Error("internal: a token table in the CPU kernels' interleaved layout");
  for (int32_t t : tokens)
    if (t < 0 || t >= table.out) throw Error("internal: token " + std::to_string(t) + " outside the token table");
  const WeightRef ref = weights_->resident(table);
  make_room();
  struct {
    WeightRef w;
    uint64_t tokens, out;
    uint32_t count;
  } push{ref, stage(tokens.data(), tokens.size_bytes()).address,
         address(out.rows(0, tokens.size(), static_cast<uint64_t>(table.in))), static_cast<uint32_t>(tokens.size())};
  stream_->dispatch(std::string("embed_") + format_name(f), push, static_cast<uint32_t>((table.in + 255) / 256),
                    static_cast<uint32_t>(tokens.size()));
}

void VulkanBackend::product(const WeightRef& ref, WeightFormat f, uint64_t x, uint64_t y, const ProductShape& s) {
  struct {
    WeightRef w;
    uint64_t x, y;
    uint32_t n, x_stride, y_stride, head_rows, x_head, y_head;
  } push{ref, x, y, static_cast<uint32_t>(s.n), s.x_stride, s.y_stride, s.head_rows, s.x_head, s.y_head};
  static_assert(sizeof(push) <= Stream::kPushBytes);
  // The interleaved layouts hold a whole matrix's rows in groups; a head's
  // share of them is not one contiguous run (linear_il.comp reads no heads).
  if (is_interleaved(f) && s.heads > 1) throw Error("internal: a per-head product of an interleaved matrix");
  // linear_row.comp reads the matrix a word at a time: a matrix that does
  // not start 4-byte aligned (a row slice of an upload) takes linear.comp.
  const ProductKernel k = product_kernel(f, s.n, false, ref.data % 4 == 0 ? ref.out_rows : UINT64_MAX);
  const uint64_t groups_x = k.groups_x(ref.out_rows), groups_y = k.groups_y(s.n);
  const auto& limit = ctx_->properties().limits.maxComputeWorkGroupCount;
  if (groups_x > limit[0] || groups_y > limit[1] || s.heads > limit[2])
    throw Error("the Vulkan backend cannot multiply " + std::to_string(s.n) + " rows by a matrix of " +
                std::to_string(ref.out_rows) + " outputs on " + ctx_->info().name + " (too many workgroups)");
  stream_->dispatch(k.name, push, static_cast<uint32_t>(groups_x), static_cast<uint32_t>(groups_y), s.heads);
}

VulkanBackend::ProductKernel VulkanBackend::product_kernel(WeightFormat f, uint64_t rows, bool grouped,
                                                          uint64_t outputs) {
  // The shaders' names, made once (a product is recorded many times a step).
  enum Kind { Tiled, TiledGrouped, Rows, RowsGrouped, One, Staged, Spread, kKinds };
  static constexpr size_t kFormats = static_cast<size_t>(WeightFormat::IL_Q4_K) + 1;
  static const auto names = [] {
    std::array<std::array<std::string, kFormats>, kKinds> n;
    for (size_t i = 0; i < kFormats; ++i) {
      const std::string format = format_name(static_cast<WeightFormat>(i));
      n[Tiled][i] = "linear_mm_" + format;
      n[TiledGrouped][i] = "linear_mm_grouped_" + format;
      n[Rows][i] = "linear_" + format;
      n[RowsGrouped][i] = "linear_grouped_" + format;
      n[One][i] = "linear1_" + format;
      if (i < static_cast<size_t>(WeightFormat::IL_Q8_0)) {
        n[Staged][i] = "linear_row_" + format;
        n[Spread][i] = "linear_row_spread_" + format;
      }
    }
    return n;
  }();
  const size_t i = static_cast<size_t>(f);
  if (rows >= kTiledRows)
    return {names[grouped ? TiledGrouped : Tiled][i], is_interleaved(f) ? 64u : 32u, is_interleaved(f) ? 64u : 32u};
  if (is_interleaved(f)) return {names[grouped ? RowsGrouped : Rows][i], 16, 4};
  // One row (the same bits): linear_row.comp, whose workgroups load whole
  // windows of their rows at once (built SPREAD for the fewest outputs,
  // whose workgroups are too few to fill the GPU), or for the tallest
  // matrices (an output head) linear.comp built for one, faster where the
  // workgroups are many times what the GPU runs at once (docs/PERFORMANCE.md).
  if (rows == 1 && !grouped) {
    if (outputs <= kSpreadOutputs) return {names[Spread][i], 4, 1};
    return outputs <= kStagedOutputs ? ProductKernel{names[Staged][i], 8, 1} : ProductKernel{names[One][i], 4, 4};
  }
  return {names[grouped ? RowsGrouped : Rows][i], 4, 4};
}

void VulkanBackend::linear(const kernels::WeightMatrix& w, Tensor x, size_t n, Tensor y) {
  check_step(n);
  const WeightFormat f = weight_format(w);
  product(weights_->resident(w), f, address(x.slice(0, n * static_cast<uint64_t>(w.in))), n,
          address(y.slice(0, n * static_cast<uint64_t>(w.out))));
}

void VulkanBackend::linear_stacked(std::span<const kernels::WeightMatrix* const> ws, Tensor x, size_t n, Tensor y) {
  if (!WeightStore::stackable(ws)) return Backend::linear_stacked(ws, x, n, y);
  check_step(n);
  const kernels::WeightMatrix& first = *ws[0];
  const WeightFormat f = weight_format(first);
  // One copy of the matrices one after another: each is a run of its rows.
  const uint64_t data = weights_->stacked(ws), in = address(x.slice(0, n * static_cast<uint64_t>(first.in)));
  uint64_t outs = 0;
  for (const kernels::WeightMatrix* w : ws) outs += static_cast<uint64_t>(w->out);
  if (n == 1) {
    // One row: the stack's outputs are the matrices' one after another, as
    // y holds them, so one product (one dispatch, not one a matrix; each
    // output's sum is its own: the same bits).
    WeightRef ref = weight_ref(first, data, 0, 0, 0);
    ref.out_rows = static_cast<uint32_t>(outs);
    product(ref, f, in, 1, address(y.slice(0, outs)));
    return;
  }
  uint64_t row = 0, at = 0;
  for (const kernels::WeightMatrix* w : ws) {
    const uint64_t count = n * static_cast<uint64_t>(w->out);
    product(weight_ref(*w, data + row * first.row_bytes(), 0, 0, 0), f, in, n, address(y.slice(at, count)));
    row += static_cast<uint64_t>(w->out);
    at += count;
  }
}

void VulkanBackend::rms_norm(Tensor x, const float* weight, size_t rows, size_t width, float eps, Tensor y) {
  norm_rows(address(x.slice(0, rows * width)), 0, weight, rows, width, eps, address(y.slice(0, rows * width)));
}

void VulkanBackend::add_rms_norm(Tensor h, Tensor delta, const float* weight, size_t rows, size_t width, float eps,
                                 Tensor y) {
  if (h.size != rows * width) throw Error("internal: add_rms_norm() over a stream of another size");
  norm_rows(address(h), address(delta.slice(0, h.size)), weight, rows, width, eps, address(y.slice(0, rows * width)));
}

void VulkanBackend::pick_largest(Tensor logits, size_t rows, size_t vocab, LogitPick* picks) {
  if (rows == 0) return;
  if (logits.size < rows * vocab || rows * static_cast<uint64_t>(vocab) >= (uint64_t{1} << 32))
    throw Error("internal: pick_largest() over rows a tensor does not hold");
  make_room();
  // Where the shader writes and the host reads after the finish (the
  // staging is rewound by it, not overwritten).
  const Arena::Piece out = staging_->take(rows * 2 * sizeof(uint32_t));
  struct {
    uint64_t logits, out;
    uint32_t vocab;
  } push{address(logits.slice(0, rows * vocab)), out.address, static_cast<uint32_t>(vocab)};
  stream_->dispatch("pick_largest", push, static_cast<uint32_t>(rows));
  finish();
  for (size_t i = 0; i < rows; ++i) {
    uint32_t pair[2];
    std::memcpy(pair, out.mapped + i * sizeof(pair), sizeof(pair));
    picks[i] = LogitPick{static_cast<int32_t>(pair[0]), pair[1]};
  }
}

void VulkanBackend::norm_rows(uint64_t x, uint64_t delta, const float* weight, size_t rows, size_t width, float eps,
                              uint64_t y) {
  // (First: an upload of the weights records a held-back combine alone.)
  const uint64_t norm_weight = weights_->address(weight, width * sizeof(float));
  if (delta != 0 && held_back_combine_ && held_back_combine_->push.out == delta && held_back_combine_->n == rows &&
      held_back_combine_->push.hidden == width && !stream_->independent()) {
    // The combine that wrote the delta and this norm, as one dispatch. (The
    // stream and the norm's rows are not the experts' rows it reads: the
    // model's h and normed against the step's expert rows.)
    const CombinePush c = held_back_combine_->push;
    held_back_combine_.reset();
    // (rms_norm.comp's COMBINE build: its push, then the combine's.)
    struct {
      uint64_t x, weight, y, delta;
      uint32_t width;
      float eps;
      uint32_t add, k;
      uint64_t ys, shared, rows, weights;
      uint32_t has_shared, pad;
    } push{x, norm_weight, y, delta, c.hidden, eps, 1u, c.k, c.ys, c.shared, c.rows, c.weights, c.has_shared, 0};
    static_assert(sizeof(push) == 88);
    stream_->dispatch("combine_norm", push, static_cast<uint32_t>(rows));
    return;
  }
  struct {
    uint64_t x, weight, y, delta;
    uint32_t width;
    float eps;
    uint32_t add;
  } push{x, norm_weight, y, delta, static_cast<uint32_t>(width), eps, delta != 0 ? 1u : 0u};
  stream_->dispatch("rms_norm", push, static_cast<uint32_t>(rows));
}

void VulkanBackend::elementwise(Elementwise mode, uint64_t y, uint64_t x, uint64_t count, float a, float b) {
  struct {
    uint64_t y, x, z;
    uint32_t count, mode;
    float a, b;
  } push{y, x, 0, static_cast<uint32_t>(count), static_cast<uint32_t>(mode), a, b};
  const uint64_t groups = std::min<uint64_t>((count + 255) / 256, 65535);
  stream_->dispatch("elementwise", push, static_cast<uint32_t>(groups));
}

void VulkanBackend::add(Tensor y, Tensor x) { elementwise(Elementwise::Add, address(y), address(x.slice(0, y.size)), y.size); }

void VulkanBackend::copy(Tensor dst, Tensor src) {
  if (dst.size != src.size) throw Error("internal: copy() between tensors of different sizes");
  elementwise(Elementwise::Copy, address(dst), address(src), dst.size);
}

void VulkanBackend::sigmoid_mul(Tensor y, Tensor gate) {
  elementwise(Elementwise::SigmoidMul, address(y), address(gate.slice(0, y.size)), y.size);
}

void VulkanBackend::glu(const ExpertActivation& act, Tensor gate, Tensor up) {
  activation(act, address(gate), address(up.slice(0, gate.size)), gate.size);
}

void VulkanBackend::depth_mix(std::span<const Tensor> blocks, Tensor partial, const float* query, size_t rows,
                              size_t width, float eps, Tensor out) {
  const size_t count = blocks.size() + 1;
  if (count > 64) throw Error("internal: a depth mix over more than 64 values");
  const uint64_t q = weights_->address(query, width * sizeof(float));
  make_room();
  std::vector<uint64_t> values;
  for (const Tensor& b : blocks) values.push_back(address(b.slice(0, rows * width)));
  values.push_back(address(partial.slice(0, rows * width)));
  struct {
    uint64_t values, query, out;
    uint32_t width, count;
    float eps;
  } push{stage(values.data(), values.size() * sizeof(uint64_t)).address, q, address(out.slice(0, rows * width)),
         static_cast<uint32_t>(width), static_cast<uint32_t>(count), eps};
  stream_->dispatch("depth_mix", push, static_cast<uint32_t>(rows));
}

}  // namespace vk
}  // namespace strata
