#include "model/model.h"

#include <algorithm>
#include <map>

#include "model/arch.h"
#include "model/checkpoint.h"
#include "model/tensor_names.h"
#include "kernels/ops.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace strata {

Model::Model(Checkpoint checkpoint, const ModelSetup& setup)
    : dir_(std::move(checkpoint.path)),
      config_(std::move(checkpoint.config)),
      source_(std::move(checkpoint.source)),
      binder_(*source_, config_),
      pool_(setup.threads > 0 ? setup.threads : default_thread_count()),
      kind_(checkpoint.kind),
      trunk_path_(std::move(checkpoint.trunk_path)),
      context_(setup.context),
      max_batch_(setup.max_batch) {
  const ModelConfig& c = config_;
  if (context_ < 1 || max_batch_ < 1)
    throw Error("internal: a model needs a context and a step of at least one position");
  windows_.assign(c.num_layers, 0);
  for (int64_t l = 0; l < c.num_layers; ++l) windows_[l] = c.layer_window(l).value_or(0);
  embed_ = binder_.table(tn(Naming::Hf, TensorKind::TokenEmbd, "weight"), c.vocab_size, c.hidden_size);
  final_norm_ = binder_.vector(tn(Naming::Hf, TensorKind::OutputNorm, "weight"), c.hidden_size);
  // Tied embeddings reuse the token table as the output head.
  lm_head_ = c.tie_word_embeddings
                 ? embed_
                 : binder_.resident(binder_.linear(hf_name(TensorKind::Output), c.vocab_size, c.hidden_size));
}

Model::~Model() = default;

namespace {

// Steps of up to this many rows (decode, a few streams decoded together)
// start next-layer prefetch.
constexpr size_t kPrefetchRows = 8;

}  // namespace

bool Model::read_token_table_by_rows() {
  if (config_.tie_word_embeddings || !locate_mapped(embed_.data)) return false;
  embed_rows_only_ = true;
  // Each step faults in one row: a page or two from the drive, not a
  // read-around of read_ahead_kb (up to 8 MiB) that holds up the expert
  // reads meanwhile.
  advise_random(embed_.data, static_cast<uint64_t>(embed_.out) * embed_.row_bytes());
  return true;
}

void Model::attach_experts(std::unique_ptr<ExpertProvider> experts, bool prefetch, const MemoryPlan& plan) {
  const ModelConfig& c = config_;
  if (!experts) throw Error("internal: attach_experts() without a provider");
  layers_.clear();  // they refer to the provider being replaced
  experts_ = std::move(experts);
  prefetch_ = prefetch && experts_->wants_prefetch();
  plan_ = plan;
  layers_.reserve(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) layers_.push_back(arch_spec(c.arch).bind_layer(binder_, c, l, *experts_));
}

void Model::prefetch_for(size_t next, const float* h, size_t n) {
  while (next < layers_.size() && !layers_[next].moe) ++next;  // dense layers read nothing
  if (!prefetch_ || next >= layers_.size()) return;
  // Only decode-sized steps guess: a prefill step needs most of the next
  // layer's experts anyway, keeps the drives busy, and reads each one once.
  if (n > kPrefetchRows) return;
  // The next layer's router on this layer's residual: the residual changes
  // little from one layer to the next, so its picks are a good guess.
  const ModelConfig& c = config_;
  const size_t hidden = static_cast<size_t>(c.hidden_size);
  std::vector<float> normed(n * hidden);
  for (size_t i = 0; i < n; ++i)
    kernels::rms_norm(h + i * hidden, layers_[next].mlp_norm, hidden, static_cast<float>(c.rms_norm_eps),
                      &normed[i * hidden]);
  auto guess = layers_[next].moe->predict(normed.data(), n, pool_);
  experts_->prefetch(static_cast<int64_t>(next), guess);
}

bool Model::prefill(std::span<const int32_t> tokens, size_t from, KvCache& cache, float* logits,
                    const std::function<bool()>& cancelled) {
  const size_t chunk = static_cast<size_t>(max_batch_);
  std::vector<Row> rows;
  for (size_t begin = from; begin < tokens.size(); begin += chunk) {
    if (cancelled && cancelled()) return false;
    const size_t end = std::min(tokens.size(), begin + chunk);
    rows.clear();
    for (size_t i = begin; i < end; ++i)
      rows.push_back(Row{tokens[i], static_cast<int64_t>(i), &cache, i + 1 == tokens.size()});
    forward(rows, logits);
  }
  return true;
}

std::unique_ptr<KvCache> Model::new_cache() const {
  CacheWidths w = cache_widths(config_);
  return std::make_unique<KvCache>(config_.num_layers, w.key, w.value, context_, windows_, max_batch_);
}

uint64_t Model::cache_bytes_at_context() const {
  CacheWidths w = cache_widths(config_);
  return KvCache::bytes_at(config_.num_layers, w.key, w.value, context_, windows_, max_batch_);
}

void Model::forward(std::span<const Row> rows, float* logits) {
  const ModelConfig& c = config_;
  const size_t n = rows.size(), hidden = static_cast<size_t>(c.hidden_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (n == 0) return;
  if (!experts_) throw Error("internal: forward() before attach_experts()");
  {
    // A sequence's rows in one step must fit a sliding-window ring (see kv_cache.h).
    std::map<const KvCache*, int64_t> per_cache;
    for (const Row& r : rows)
      if (++per_cache[r.cache] > max_batch_)
        throw Error("internal: more than " + std::to_string(max_batch_) + " rows of one sequence in a step");
  }
  for (const Row& r : rows) {
    if (r.token < 0 || r.token >= c.vocab_size)
      throw Error("token id " + std::to_string(r.token) + " is out of range for this model (vocabulary of " +
                  std::to_string(c.vocab_size) + ")");
    if (!r.cache) throw Error("internal: row without a cache");
    r.cache->ensure(r.pos + 1);
  }

  std::vector<float> h(n * hidden), normed(n * hidden), delta(n * hidden);
  for (size_t i = 0; i < n; ++i) {
    kernels::dequantize_row(embed_, rows[i].token, &h[i * hidden]);
    if (embed_rows_only_)
      release_mapped_pages_touched(embed_.data + static_cast<size_t>(rows[i].token) * embed_.row_bytes(), embed_.row_bytes());
  }

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& layer = layers_[l];
    for (size_t i = 0; i < n; ++i) kernels::rms_norm(&h[i * hidden], layer.attn_norm, hidden, eps, &normed[i * hidden]);
    layer.attention->forward(l, normed.data(), rows, delta.data(), pool_);
    for (size_t i = 0; i < n * hidden; ++i) h[i] += delta[i];

    for (size_t i = 0; i < n; ++i) kernels::rms_norm(&h[i * hidden], layer.mlp_norm, hidden, eps, &normed[i * hidden]);
    if (layer.moe) {
      layer.moe->forward(normed.data(), n, delta.data(), pool_,
                         [&] { prefetch_for(static_cast<size_t>(l) + 1, h.data(), n); });
    } else {
      // A dense layer right before a MoE layer guesses for it too, so the
      // drive works through this MLP and the next attention instead of
      // idling until that MoE layer's own reads (DeepSeek-V3's first layers).
      if (l + 1 < c.num_layers && layers_[l + 1].moe) prefetch_for(static_cast<size_t>(l) + 1, h.data(), n);
      layer.dense->forward(normed.data(), n, delta.data(), pool_);
    }
    for (size_t i = 0; i < n * hidden; ++i) h[i] += delta[i];
  }

  std::vector<float> selected;
  for (size_t i = 0; i < n; ++i) {
    if (!rows[i].want_logits) continue;
    size_t at = selected.size();
    selected.resize(at + hidden);
    kernels::rms_norm(&h[i * hidden], final_norm_, hidden, eps, &selected[at]);
  }
  if (!selected.empty()) kernels::linear(lm_head_, selected.data(), selected.size() / hidden, logits, &pool_);

  for (const Row& r : rows) r.cache->set_length(std::max(r.cache->length(), r.pos + 1));
}

}  // namespace strata
