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

// One layer's attention, as the CPU backend runs it: a task for each head
// and block of `rows` rows (a prompt's; a decode token is one row), `runs`
// blocks a head, shared by the pool; each scores its rows' queries against
// the cached rows and sums their values.
class LayerTimer {
 public:
  LayerTimer(const AttentionWork& a, int64_t kv_heads, size_t rows, size_t runs)
      : a_(a), kv_heads_(std::max<int64_t>(1, kv_heads)), rows_(std::max<size_t>(rows, 1)), runs_(std::max<size_t>(runs, 1)) {
    // Several layers' worth of rows cycled through (as much as the product
    // timer takes: large_matrix_mib()), so that a layer's rows are not in
    // the CPU's caches from the last run, as a real token's are not.
    const uint64_t row = static_cast<uint64_t>(a.key_stride + a.value_stride);
    const uint64_t layer = row * static_cast<uint64_t>(a.positions) * sizeof(float);
    copies_ = static_cast<size_t>(std::clamp<uint64_t>((large_matrix_mib() << 20) / std::max<uint64_t>(layer, 1), 1,
                                                       static_cast<uint64_t>(std::max<int64_t>(a.layers, 1))));
    // Small values: no overflow in the scores, no denormals.
    cached_.assign(copies_ * row * static_cast<size_t>(a.positions), 0.01f);
    query_.assign(static_cast<size_t>(a.heads * a.key_floats) * rows_, 0.01f);
  }

  size_t rows_timed() const { return rows_ * runs_; }

  void run(ThreadPool& pool) {
    const size_t n = static_cast<size_t>(a_.positions), m = rows_;
    const size_t row = static_cast<size_t>(a_.key_stride + a_.value_stride);
    const size_t kf = static_cast<size_t>(a_.key_floats), vf = static_cast<size_t>(a_.value_floats);
    const float* base = cached_.data() + next_ * row * n;
    next_ = (next_ + 1) % copies_;
    const size_t heads = static_cast<size_t>(a_.heads);
    const int64_t group = std::max<int64_t>(1, a_.heads / kv_heads_);
    scratch_.resize(static_cast<size_t>(pool.size()));
    pool.parallel_for_indexed(heads * runs_, [&](int worker, size_t t0, size_t t1) {
      Scratch& s = scratch_[static_cast<size_t>(worker)];
      s.scores.resize(m * n);
      s.keys.resize(n);
      s.values.resize(n);
      s.out.resize(m * vf);
      s.from.resize(m);
      s.to.resize(m);
      for (size_t t = t0; t < t1; ++t) {
        const size_t h = t % heads;
        // GQA: the head's key-value slice of each row; MLA: the whole latent.
        const int64_t kv = static_cast<int64_t>(h) / group;
        const size_t key_at = a_.value_stride ? static_cast<size_t>(kv * a_.key_floats) : 0;
        const size_t value_at = a_.value_stride ? static_cast<size_t>(a_.key_stride + kv * a_.value_floats) : 0;
        for (size_t j = 0; j < n; ++j) {
          s.keys[j] = base + j * row + key_at;
          s.values[j] = base + j * row + value_at;
        }
        // As the backend walks them: kKeysPerChunk keys a call, the block's
        // rows together, scores then sums.
        for (size_t r = 0; r < m; ++r) s.from[r] = &query_[(h * m + r) * kf];
        for (size_t j = 0; j < n; j += kChunk)
          kernels::dots_rows(s.from.data(), m, s.keys.data() + j, std::min(kChunk, n - j), kf, s.scores.data() + j, n);
        for (size_t r = 0; r < m; ++r) kernels::softmax(&s.scores[r * n], n);
        std::fill(s.out.begin(), s.out.end(), 0.0f);
        for (size_t j = 0; j < n; j += kChunk) {
          for (size_t r = 0; r < m; ++r) {
            s.from[r] = &s.scores[r * n + j];
            s.to[r] = &s.out[r * vf];
          }
          kernels::axpys_rows(s.from.data(), m, s.values.data() + j, std::min(kChunk, n - j), s.to.data(), vf);
        }
      }
    });
  }

 private:
  struct Scratch {
    std::vector<float> scores, out;
    std::vector<const float*> keys, values, from;
    std::vector<float*> to;
  };
  AttentionWork a_;
  int64_t kv_heads_;
  size_t rows_, runs_;
  size_t copies_ = 1, next_ = 0;
  std::vector<float> cached_, query_;
  std::vector<Scratch> scratch_;
};

// Seconds of `rows`-row blocks' attention (`runs` a head) over `positions`,
// every layer, divided by the rows timed.
double row_seconds(const ModelConfig& c, int64_t positions, size_t rows, size_t runs, ThreadPool& pool,
                   double seconds) {
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
    LayerTimer layer(timed, c.num_kv_heads, rows, runs);
    const double one = median_run_seconds([&] { layer.run(pool); }, seconds / static_cast<double>(work.size())) /
                       static_cast<double>(layer.rows_timed());
    total += one * static_cast<double>(a.layers) * static_cast<double>(a.positions) / static_cast<double>(timed.positions);
  }
  return total;
}

}  // namespace

double attention_seconds(const ModelConfig& c, int64_t positions, ThreadPool& pool, double seconds) {
  return row_seconds(c, positions, 1, 1, pool, seconds);
}

double prompt_attention_seconds(const ModelConfig& c, int64_t positions, int64_t step, ThreadPool& pool,
                                double seconds) {
  const size_t rows_in_step = static_cast<size_t>(std::max<int64_t>(step, 1));
  const size_t rows = std::min(rows_in_step, kRowsPerBlock);
  // The step's blocks, a task each and head (a small step of few heads
  // leaves threads idle, as it does in the backend); more than four tasks a
  // thread time no differently.
  const size_t heads = static_cast<size_t>(std::max<int64_t>(1, c.num_heads));
  const size_t blocks = (rows_in_step + rows - 1) / rows;
  const size_t runs = std::min(blocks, (4 * static_cast<size_t>(pool.size()) + heads - 1) / heads);
  return row_seconds(c, positions, rows, runs, pool, seconds);
}

}  // namespace strata
