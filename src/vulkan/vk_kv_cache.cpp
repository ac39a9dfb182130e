#include "vulkan/vk_kv_cache.h"

#include <string>
#include <utility>

#include "util/error.h"

namespace strata::vk {

VulkanKvCache::VulkanKvCache(CacheIo& io, const CacheShape& shape)
    : io_(io), book_(shape), keys_(shape.layers), values_(shape.layers), state_(shape.layers) {
  // Every buffer first, then the zeroing: an allocation that fails leaves no
  // recorded fill of a buffer the unwinding frees. Ring layers are zeroed
  // too, so that save() of a short sequence writes the same bytes every time.
  for (int64_t l = 0; l < book_.layers(); ++l) {
    if (book_.state_floats(l)) {
      state_[l] = Buffer(io_.context(), static_cast<uint64_t>(book_.state_floats(l)) * sizeof(float), Buffer::Where::Device);
    } else if (book_.ring(l)) {
      keys_[l] = rows_buffer(book_.ring(l), book_.key_width());
      values_[l] = rows_buffer(book_.ring(l), book_.value_width());
    }
  }
  for (const auto* buffers : {&state_, &keys_, &values_})
    for (const Buffer& b : *buffers)
      if (b) io_.zero(b);
}

VulkanKvCache::~VulkanKvCache() {
  try {
    io_.finish();
  } catch (...) {
    // A device lost: nothing to free the memory for.
  }
}

Buffer VulkanKvCache::rows_buffer(int64_t rows, int64_t width) const {
  return Buffer(io_.context(), static_cast<uint64_t>(rows * width) * sizeof(float), Buffer::Where::Device);
}

void VulkanKvCache::ensure(int64_t n) {
  const int64_t cap = book_.capacity_for(n);
  if (cap == book_.capacity()) return;
  // All grown buffers are allocated before any copy is recorded, so that a
  // failed allocation leaves the cache as it was. They take the rows held so
  // far; the old ones are freed once the ops that use them are done.
  std::vector<Buffer> grown_keys(keys_.size()), grown_values(values_.size());
  for (int64_t l = 0; l < book_.layers(); ++l) {
    if (book_.ring(l) || book_.state_floats(l)) continue;
    grown_keys[l] = rows_buffer(cap, book_.key_width());
    grown_values[l] = rows_buffer(cap, book_.value_width());
  }
  std::vector<Buffer> old;
  try {
    for (auto [rows, grown] : {std::pair{&keys_, &grown_keys}, std::pair{&values_, &grown_values}})
      for (size_t l = 0; l < rows->size(); ++l) {
        if (!(*grown)[l]) continue;
        if ((*rows)[l]) {
          io_.copy_on_device((*rows)[l], (*grown)[l], (*rows)[l].bytes());
          old.push_back(std::move((*rows)[l]));
        }
        (*rows)[l] = std::move((*grown)[l]);
      }
  } catch (...) {
    io_.finish();  // the copies recorded so far read `old`: run them before it is freed
    throw;
  }
  if (!old.empty()) io_.finish();
  book_.set_capacity(cap);
}

void VulkanKvCache::set_length(int64_t n) {
  if (book_.set_length(n))
    for (const Buffer& s : state_)
      if (s) io_.zero(s);
}

namespace {
// A layer's saved rows read back (none where it keeps none).
std::vector<float> read_rows(CacheIo& io, const Buffer& b, int64_t floats) {
  std::vector<float> v(static_cast<size_t>(floats));
  if (floats > 0) io.read(b, v.data(), v.size() * sizeof(float));
  return v;
}
}  // namespace

void VulkanKvCache::save(std::ostream& out) const {
  book_.save_header(out);
  for (int64_t l = 0; l < book_.layers(); ++l) {
    const int64_t rows = book_.saved_rows(l, book_.length());
    const auto k = read_rows(io_, keys_[l], rows * book_.key_width());
    const auto v = read_rows(io_, values_[l], rows * book_.value_width());
    const auto s = read_rows(io_, state_[l], book_.state_floats(l));
    book_.save_layer(out, l, k.data(), v.data(), s.data());
  }
}

void VulkanKvCache::load(std::istream& in) {
  const int64_t length = book_.load_header(in);
  ensure(length);
  for (int64_t l = 0; l < book_.layers(); ++l) {
    const int64_t rows = book_.saved_rows(l, length);
    std::vector<float> k(static_cast<size_t>(rows * book_.key_width())), v(static_cast<size_t>(rows * book_.value_width())),
        s(static_cast<size_t>(book_.state_floats(l)));
    book_.load_layer(in, l, length, k.data(), v.data(), s.data());
    if (!k.empty()) io_.write(keys_[l], k.data(), k.size() * sizeof(float));
    if (!v.empty()) io_.write(values_[l], v.data(), v.size() * sizeof(float));
    if (!s.empty()) io_.write(state_[l], s.data(), s.size() * sizeof(float));
  }
  book_.restored(length);
}

uint64_t VulkanKvCache::bytes() const {
  uint64_t b = 0;
  for (int64_t l = 0; l < book_.layers(); ++l) b += keys_[l].bytes() + values_[l].bytes() + state_[l].bytes();
  return b;
}

std::unique_ptr<CacheSnapshot> VulkanKvCache::snapshot() const {
  std::vector<std::vector<float>> states(state_.size());
  for (size_t l = 0; l < state_.size(); ++l)
    states[l] = read_rows(io_, state_[l], book_.state_floats(static_cast<int64_t>(l)));
  return book_.snapshot(this, std::move(states));
}

void VulkanKvCache::restore(const CacheSnapshot& s) {
  bool foreign = false;
  const auto* states = book_.restorable(this, s, &foreign);
  if (foreign) throw Error("internal: a cache snapshot restored into another cache");
  if (!states)
    throw Error("the cache no longer holds what the snapshot at position " + std::to_string(s.length()) + " needs");
  for (size_t l = 0; l < state_.size(); ++l)
    if (!(*states)[l].empty()) io_.write(state_[l], (*states)[l].data(), (*states)[l].size() * sizeof(float));
  book_.restored(s.length());
}

}  // namespace strata::vk
