// The Vulkan backend's memory and its ops on plain tensors (vulkan_backend.h).
#include <algorithm>
#include <cstring>
#include <string>

#include "util/error.h"
#include "vulkan/vk_backend_impl.h"
#include "vulkan/vulkan_backend.h"

namespace strata {

std::unique_ptr<Backend> make_vulkan_backend(int index) { return std::make_unique<vk::VulkanBackend>(index); }

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

namespace vk {

namespace {
// Host staging a submission may use before the recorded work is run to free it.
constexpr uint64_t kStagingCap = 256ull << 20;
}  // namespace

VulkanBackend::VulkanBackend(int index) : ctx_(std::make_unique<Context>(index)) {
  stream_ = std::make_unique<Stream>(*ctx_);
  tensors_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Device, 64ull << 20);
  staging_ = std::make_unique<Arena>(*ctx_, Buffer::Where::Host, 64ull << 20);
  weights_ = std::make_unique<WeightStore>(*ctx_, [this](const Arena::Piece& dst, const void* src, uint64_t bytes) {
    if (dst.mapped) {
      std::memcpy(dst.mapped, src, bytes);
      return;
    }
    // In pieces no larger than the staging cap.
    const auto* s = static_cast<const uint8_t*>(src);
    for (uint64_t at = 0; at < bytes;) {
      const uint64_t part = std::min(bytes - at, kStagingCap / 2);
      const Arena::Piece st = stage(s + at, part);
      stream_->copy(st.buffer, st.offset, dst.buffer, dst.offset + at, part);
      at += part;
    }
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
  finish();
  slots_.resize(1);
  tensors_->clear();
  tensor_bytes_ = 0;
  // The planned scratch lives with the tensors: plan again after this.
  expert_act_ = Slot{};
  scratch_floats_ = 0;
}

namespace {
uint64_t expert_act_floats(const StepLimits& l) {
  return static_cast<uint64_t>(l.rows) * l.experts_per_token * (l.fused_gate_up ? 4 : 2) * l.expert_width;
}
}  // namespace

uint64_t VulkanBackend::scratch_bytes(const StepLimits& l) const { return expert_act_floats(l) * sizeof(float); }

void VulkanBackend::plan(const StepLimits& l) {
  limits_ = l;
  scratch_floats_ = expert_act_floats(l);
  expert_act_ = Slot{tensors_->take(scratch_floats_ * sizeof(float)), scratch_floats_};
}

uint64_t VulkanBackend::allocated_bytes() const { return tensor_bytes_ + scratch_floats_ * sizeof(float); }

void VulkanBackend::check_step(size_t rows) const {
  if (rows > limits_.rows)
    throw Error("internal: a step of " + std::to_string(rows) + " rows on a backend planned for " +
                std::to_string(limits_.rows));
}

Arena::Piece VulkanBackend::stage(uint64_t bytes) {
  if (staging_->used() + bytes > kStagingCap && !stream_->idle()) finish();
  return staging_->take(bytes);
}

Arena::Piece VulkanBackend::stage(const void* src, uint64_t bytes) {
  Arena::Piece p = stage(bytes);
  if (bytes) std::memcpy(p.mapped, src, bytes);
  return p;
}

void VulkanBackend::finish() {
  stream_->finish();
  staging_->rewind();
}

void VulkanBackend::upload(Tensor dst, const float* src) {
  const Slot& s = slot(dst);
  const uint64_t bytes = dst.size * sizeof(float);
  if (s.piece.mapped) {
    finish();  // ops recorded before may still read or write it
    std::memcpy(s.piece.mapped + dst.offset * sizeof(float), src, bytes);
    return;
  }
  const Arena::Piece st = stage(src, bytes);
  stream_->copy(st.buffer, st.offset, s.piece.buffer, s.piece.offset + dst.offset * sizeof(float), bytes);
}

void VulkanBackend::download(Tensor src, float* dst) {
  const Slot& s = slot(src);
  const uint64_t bytes = src.size * sizeof(float);
  if (s.piece.mapped) {
    finish();
    std::memcpy(dst, s.piece.mapped + src.offset * sizeof(float), bytes);
    return;
  }
  if (!readback_ || readback_->bytes() < bytes)
    readback_ = std::make_unique<Buffer>(*ctx_, std::max<uint64_t>(bytes, 1 << 20), Buffer::Where::Host);
  stream_->copy(s.piece.buffer, s.piece.offset + src.offset * sizeof(float), readback_->handle(), 0, bytes);
  finish();
  std::memcpy(dst, readback_->mapped(), bytes);
}

void VulkanBackend::embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, Tensor out) {
  const WeightFormat f = weight_format(table);
  for (int32_t t : tokens)
    if (t < 0 || t >= table.out) throw Error("internal: token " + std::to_string(t) + " outside the token table");
  struct {
    WeightRef w;
    uint64_t tokens, out;
    uint32_t count;
  } push{weights_->resident(table), stage(tokens.data(), tokens.size_bytes()).address,
         address(out.rows(0, tokens.size(), static_cast<uint64_t>(table.in))), static_cast<uint32_t>(tokens.size())};
  stream_->dispatch(std::string("embed_") + format_name(f), push, static_cast<uint32_t>((table.in + 255) / 256),
                    static_cast<uint32_t>(tokens.size()));
}

void VulkanBackend::product(const WeightRef& ref, WeightFormat f, uint64_t x, size_t n, uint64_t y) {
  struct {
    WeightRef w;
    uint64_t x, y;
    uint32_t n;
  } push{ref, x, y, static_cast<uint32_t>(n)};
  constexpr uint32_t kOutputsPerGroup = 4, kRowsPerGroup = 4;  // linear.comp's workgroup
  const uint64_t groups_x = (ref.out_rows + kOutputsPerGroup - 1) / kOutputsPerGroup;
  const uint64_t groups_y = (n + kRowsPerGroup - 1) / kRowsPerGroup;
  const uint32_t limit = ctx_->properties().limits.maxComputeWorkGroupCount[0];
  if (groups_x > limit || groups_y > ctx_->properties().limits.maxComputeWorkGroupCount[1])
    throw Error("the Vulkan backend cannot multiply " + std::to_string(n) + " rows by a matrix of " +
                std::to_string(ref.out_rows) + " outputs on " + ctx_->info().name + " (too many workgroups)");
  stream_->dispatch(std::string("linear_") + format_name(f), push, static_cast<uint32_t>(groups_x),
                    static_cast<uint32_t>(groups_y));
}

void VulkanBackend::linear(const kernels::WeightMatrix& w, Tensor x, size_t n, Tensor y) {
  check_step(n);
  const WeightFormat f = weight_format(w);
  product(weights_->resident(w), f, address(x.slice(0, n * static_cast<uint64_t>(w.in))), n,
          address(y.slice(0, n * static_cast<uint64_t>(w.out))));
}

void VulkanBackend::rms_norm(Tensor x, const float* weight, size_t rows, size_t width, float eps, Tensor y) {
  struct {
    uint64_t x, weight, y;
    uint32_t width;
    float eps;
  } push{address(x.slice(0, rows * width)), weights_->address(weight, width * sizeof(float)),
         address(y.slice(0, rows * width)), static_cast<uint32_t>(width), eps};
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
  const uint64_t g = address(gate), u = address(up.slice(0, gate.size));
  switch (act.kind) {
    case ExpertActivation::Kind::SiluGlu: return elementwise(Elementwise::SiluGlu, g, u, gate.size);
    case ExpertActivation::Kind::ClampedSwiGlu: return elementwise(Elementwise::ClampedSwiGlu, g, u, gate.size, act.limit, act.alpha);
    case ExpertActivation::Kind::Situ: return elementwise(Elementwise::Situ, g, u, gate.size, act.beta, act.linear_beta);
  }
}

void VulkanBackend::depth_mix(std::span<const Tensor> blocks, Tensor partial, const float* query, size_t rows,
                              size_t width, float eps, Tensor out) {
  const size_t count = blocks.size() + 1;
  if (count > 64) throw Error("internal: a depth mix over more than 64 values");
  std::vector<uint64_t> values;
  for (const Tensor& b : blocks) values.push_back(address(b.slice(0, rows * width)));
  values.push_back(address(partial.slice(0, rows * width)));
  struct {
    uint64_t values, query, out;
    uint32_t width, count;
    float eps;
  } push{stage(values.data(), values.size() * sizeof(uint64_t)).address,
         weights_->address(query, width * sizeof(float)), address(out.slice(0, rows * width)),
         static_cast<uint32_t>(width), static_cast<uint32_t>(count), eps};
  stream_->dispatch("depth_mix", push, static_cast<uint32_t>(rows));
}

}  // namespace vk
}  // namespace strata
