#include "runtime/attention_timer.h"

#include <algorithm>
#include <map>

#include "backend/cpu_attention.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/attention.h"
#include "runtime/product_timer.h"
#include "util/thread_pool.h"

namespace strata {

namespace {

// Timed up to this many positions; more scale linearly.
constexpr int64_t kTimedPositions = 16384;
constexpr size_t kChunk = static_cast<size_t>(kKeysPerChunk);

}  // namespace

std::vector<AttentionWork> attention_work(const ModelConfig& c, int64_t positions) {
  std::vector<AttentionWork> out;
  if (positions <= 0) return out;
  const CacheWidths w = cache_widths(c);
  const bool latent = w.value == 0;  // MLA: every head reads the one latent row
  std::map<int64_t, int64_t> by_seen;   // visible positions -> layers
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.layer_is_kda(l)) continue;
    const int64_t window = c.layer_window(l).value_or(0);
    ++by_seen[window > 0 ? std::min(window, positions) : positions];
  }
  for (const auto& [seen, layers] : by_seen) {
    AttentionWork a;
    a.layers = layers;
    a.heads = c.num_heads;
    a.positions = seen;
    a.key_stride = w.key;
    if (latent) {
      a.key_floats = w.key;
      a.value_floats = c.kv_lora_rank;
      a.value_stride = 0;
    } else {
      const int64_t d = w.key / std::max<int64_t>(1, c.num_kv_heads);
      a.key_floats = a.value_floats = d;
      a.value_stride = w.value;
    }
    out.push_back(a);
  }
  return out;
}

namespace {

// One layer's attention, as the CPU backend runs it for one row: heads
// shared by the pool, each scoring its query against the rows and summing
// their values.
class LayerTimer {
 public:
  LayerTimer(const AttentionWork& a, int64_t kv_heads) : a_(a), kv_heads_(std::max<int64_t>(1, kv_heads)) {
    // Several layers' worth of rows cycled through (as much as the product
    // timer takes: large_matrix_mib()), so that a layer's rows are not in
    // the CPU's caches from the last run, as a real token's are not.
    const uint64_t row = static_cast<uint64_t>(a.key_stride + a.value_stride);
    const uint64_t layer = row * static_cast<uint64_t>(a.positions) * sizeof(float);
    copies_ = static_cast<size_t>(std::clamp<uint64_t>((large_matrix_mib() << 20) / std::max<uint64_t>(layer, 1), 1,
                                                       static_cast<uint64_t>(std::max<int64_t>(a.layers, 1))));
    // Small values: no overflow in the scores, no denormals.
    rows_.assign(copies_ * row * static_cast<size_t>(a.positions), 0.01f);
    query_.assign(static_cast<size_t>(a.heads * a.key_floats), 0.01f);
    out_.assign(static_cast<size_t>(a.heads * a.value_floats), 0.0f);
  }

  void run(ThreadPool& pool) {
    const size_t n = static_cast<size_t>(a_.positions);
    const size_t row = static_cast<size_t>(a_.key_stride + a_.value_stride);
    const float* base = rows_.data() + next_ * row * n;
    next_ = (next_ + 1) % copies_;
    const int64_t group = std::max<int64_t>(1, a_.heads / kv_heads_);
    scratch_.resize(static_cast<size_t>(pool.size()));
    pool.parallel_for_indexed(static_cast<size_t>(a_.heads), [&](int worker, size_t h0, size_t h1) {
      Scratch& s = scratch_[static_cast<size_t>(worker)];
      s.scores.resize(n);
      s.keys.resize(n);
      s.values.resize(n);
      for (size_t h = h0; h < h1; ++h) {
        // GQA: the head's key-value slice of each row; MLA: the whole latent.
        const int64_t kv = static_cast<int64_t>(h) / group;
        const size_t key_at = a_.value_stride ? static_cast<size_t>(kv * a_.key_floats) : 0;
        const size_t value_at = a_.value_stride ? static_cast<size_t>(a_.key_stride + kv * a_.value_floats) : 0;
        for (size_t j = 0; j < n; ++j) {
          s.keys[j] = base + j * row + key_at;
          s.values[j] = base + j * row + value_at;
        }
        // As the backend walks them: kKeysPerChunk keys a call, scores then sums.
        const float* q = &query_[h * static_cast<size_t>(a_.key_floats)];
        for (size_t j = 0; j < n; j += kChunk)
          kernels::dots(q, s.keys.data() + j, std::min(kChunk, n - j), static_cast<size_t>(a_.key_floats),
                        s.scores.data() + j);
        kernels::softmax(s.scores.data(), n);
        float* o = &out_[h * static_cast<size_t>(a_.value_floats)];
        std::fill_n(o, a_.value_floats, 0.0f);
        for (size_t j = 0; j < n; j += kChunk)
          kernels::axpys(s.scores.data() + j, s.values.data() + j, std::min(kChunk, n - j), o,
                         static_cast<size_t>(a_.value_floats));
      }
    });
  }

 private:
  struct Scratch {
    std::vector<float> scores;
    std::vector<const float*> keys, values;
  };
  AttentionWork a_;
  int64_t kv_heads_;
  size_t copies_ = 1, next_ = 0;
  std::vector<float> rows_, query_, out_;
  std::vector<Scratch> scratch_;
};

}  // namespace

double attention_seconds(const ModelConfig& c, int64_t positions, ThreadPool& pool, double seconds) {
  const std::vector<AttentionWork> work = attention_work(c, positions);
  double total = 0;
  for (const AttentionWork& a : work) {
    // One layer's rows at most as large as the product timer's weights:
    // fewer positions timed, scaled up linearly.
    const int64_t row_bytes = (a.key_stride + a.value_stride) * static_cast<int64_t>(sizeof(float));
    const int64_t fit = std::max<int64_t>(
        kKeysPerChunk, static_cast<int64_t>(large_matrix_mib() << 20) / std::max<int64_t>(row_bytes, 1));
    AttentionWork timed = a;
    timed.positions = std::min({a.positions, kTimedPositions, fit});
    LayerTimer layer(timed, c.num_kv_heads);
    const double one = median_run_seconds([&] { layer.run(pool); }, seconds / static_cast<double>(work.size()));
    total += one * static_cast<double>(a.layers) * static_cast<double>(a.positions) / static_cast<double>(timed.positions);
  }
  return total;
}

}  // namespace strata
