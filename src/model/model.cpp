#include "model/model.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "model/arch.h"
#include "model/checkpoint.h"
#include "pack/manifest.h"
#include "kernels/ops.h"
#include "runtime/streaming_experts.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace strata {

Model::Model(std::filesystem::path dir, ModelConfig config, std::unique_ptr<TensorSource> source, int threads)
    : dir_(std::move(dir)),
      config_(std::move(config)),
      source_(std::move(source)),
      binder_(*source_, config_),
      pool_(threads > 0 ? threads : default_thread_count()) {}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::filesystem::path& path, const LoadOptions& options) {
  Checkpoint ck = open_checkpoint(path);
  std::unique_ptr<Model> m(new Model(path, std::move(ck.config), std::move(ck.source), options.threads));
  m->kind_ = ck.kind;
  m->trunk_path_ = ck.trunk_path;
  m->set_limits(options);
  m->bind_weights(options);
  return m;
}

namespace {

// Steps of up to this many rows (decode, a few streams decoded together)
// start next-layer prefetch.
constexpr size_t kPrefetchRows = 8;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string gib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return b;
}

}  // namespace

std::unique_ptr<ExpertProvider> Model::make_streaming(const ExpertBindFn& bind, const LoadOptions& options) {
  const ModelConfig& c = config_;
  StorageOptions so;
  so.backend = options.io_backend;
  auto storage = make_storage(so);
  ExpertCatalog catalog;
  if (kind_ == Checkpoint::Kind::Pack) {
    const Manifest manifest = Manifest::load(dir_);
    if (static_cast<int64_t>(manifest.experts.size()) != c.num_layers)
      throw Error((dir_ / "manifest.json").string() + ": lists " + std::to_string(manifest.experts.size()) +
                  " layers, the trunk's config " + std::to_string(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const size_t want = c.layer_is_moe(l) ? static_cast<size_t>(c.n_routed_experts) : 0;
      if (manifest.experts[l].size() != want)
        throw Error((dir_ / "manifest.json").string() + ": layer " + std::to_string(l) + " lists " +
                    std::to_string(manifest.experts[l].size()) + " experts, the config wants " + std::to_string(want));
    }
    catalog = catalog_from_manifest(manifest, dir_, *storage);
  } else {
    catalog = catalog_from_bound_experts(c, bind, *storage);
    // The experts sit between trunk tensors in the same files: fault in only
    // the trunk, so the page cache holds no expert bytes (they are read with
    // O_DIRECT into the cache, within the budget).
    advise_random_all_mapped();
    for (const auto& name : source_->names())
      if (!is_routed_expert_tensor(name)) {
        const TensorView& t = source_->get(name);
        // An untied token table is read a row per step (below), not ahead.
        if (!c.tie_word_embeddings && t.data == embed_.data) continue;
        advise_willneed(t.data, t.nbytes);
      }
  }

  uint64_t streamed = 0, total = 0;
  int64_t experts = 0;
  for (const auto& layer : catalog.layers)
    for (const auto& e : layer) {
      streamed += e.payload_bytes;
      ++experts;
    }
  streamed -= catalog.resident_bytes;
  for (const auto& name : source_->names()) total += source_->get(name).nbytes;
  if (kind_ == Checkpoint::Kind::Pack) streamed = 0;  // the trunk holds no experts

  // The budget: what stays resident, the KV cache for the context, working
  // buffers, and whatever is left for the expert cache.
  const CacheWidths w = cache_widths(c);
  plan_.budget = options.ram_bytes;
  plan_.trunk = total > streamed ? total - streamed : 0;
  // An untied token table is read a few rows per step, straight from the
  // mapped file, and those pages are let go again (forward()): it is not
  // held, so it is not in the budget.
  const uint64_t table = static_cast<uint64_t>(embed_.out) * embed_.row_bytes();
  if (!c.tie_word_embeddings && locate_mapped(embed_.data) && plan_.trunk >= table) {
    embed_rows_only_ = true;
    plan_.trunk -= table;
    // Each step faults in one row: a page or two from the drive, not a
    // read-around of read_ahead_kb (up to 8 MiB) that holds up the expert
    // reads meanwhile. (A checkpoint streamed in place is advised so whole,
    // above; a pack's trunk file is not.)
    advise_random(embed_.data, table);
  }
  plan_.kv = KvCache::bytes_at(c.num_layers, w.key, w.value, context_, windows_, max_batch_);
  plan_.overhead = 192 * kMiB + static_cast<uint64_t>(c.vocab_size) * sizeof(float) * 16;
  size_t slots = options.cache_slots;
  const uint64_t slot_bytes = std::max<uint64_t>(catalog.max_slot_bytes, kIoAlign);
  if (slots == 0 && options.ram_bytes > 0) {
    const uint64_t fixed = plan_.trunk + plan_.kv + plan_.overhead;
    const uint64_t min_cache = slot_bytes * static_cast<uint64_t>(2 * c.num_experts_per_tok);
    if (options.ram_bytes < fixed + min_cache)
      throw Error("--ram " + gib(options.ram_bytes) + " is too small for " + dir_.string() + ": the trunk takes " +
                  gib(plan_.trunk) + ", the KV cache for " + std::to_string(options.context) + " positions " +
                  gib(plan_.kv) + ", buffers " + gib(plan_.overhead) + ", and the expert cache needs at least " +
                  gib(min_cache) + " (two tokens' worth of experts); the least that works is " +
                  gib(fixed + min_cache));
    slots = static_cast<size_t>((options.ram_bytes - fixed) / slot_bytes);
  }
  if (slots == 0) {
    // No budget: every expert may stay once read, but never more than most
    // of the machine's memory (a terabyte model streamed without --ram).
    const uint64_t phys = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t fixed = plan_.trunk + plan_.kv + plan_.overhead;
    const uint64_t room = phys * 17 / 20 > fixed ? phys * 17 / 20 - fixed : slot_bytes * 2 * c.num_experts_per_tok;
    slots = static_cast<size_t>(std::max<uint64_t>(room / slot_bytes, 2 * c.num_experts_per_tok));
  }
  slots = std::min<size_t>(slots, static_cast<size_t>(std::max<int64_t>(experts, 1)));
  plan_.cache = slots * slot_bytes;

  StreamingOptions opt;
  opt.slots = slots;
  opt.verify = options.verify;
  if (options.heat != "none") {
    heat_path_ = options.heat.empty() ? default_heat_path(dir_) : std::filesystem::path(options.heat);
    opt.prior = ExpertHeat::load(heat_path_, std::filesystem::weakly_canonical(dir_).string(), c.num_layers,
                                 c.n_routed_experts);
  }
  return std::make_unique<StreamingExpertProvider>(c, std::move(catalog), std::move(storage), std::move(opt));
}

void Model::save_heat() const {
  if (!streaming_ || heat_path_.empty()) return;
  const auto* p = dynamic_cast<const StreamingExpertProvider*>(experts_.get());
  if (p) p->heat().save(heat_path_, std::filesystem::weakly_canonical(dir_).string());
}

void Model::bind_weights(const LoadOptions& options) {
  const ModelConfig& c = config_;
  embed_ = binder_.table("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
  final_norm_ = binder_.vector("model.norm.weight", c.hidden_size);
  // Tied embeddings reuse the token table as the output head.
  lm_head_ = c.tie_word_embeddings ? embed_ : binder_.resident(binder_.linear("lm_head", c.vocab_size, c.hidden_size));
  // A pack's experts are not in its trunk: they are only ever streamed.
  streaming_ = kind_ == Checkpoint::Kind::Pack || options.stream || options.ram_bytes > 0 || options.cache_slots > 0;
  ExpertBindFn bind;
  if (kind_ != Checkpoint::Kind::Pack)
    bind = arch_spec(c.arch).bind_experts(*source_, binder_, c);
  if (streaming_) {
    experts_ = make_streaming(bind, options);
    // Auto is on: guesses are background reads that only use an idle drive
    // and are cancelled when their layer does not ask for them; measured
    // (docs/PERFORMANCE.md, issue 4) they shorten a cold decode step.
    prefetch_ = options.prefetch != LoadOptions::Prefetch::Off && experts_->wants_prefetch();
  } else {
    experts_ = std::make_unique<InMemoryExpertProvider>(c, bind);
  }
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

void Model::set_limits(const LoadOptions& options) {
  const ModelConfig& c = config_;
  if (options.context < 1) throw Error("the context (--ctx) must be at least 1");
  context_ = options.context;
  windows_.assign(c.num_layers, 0);
  for (int64_t l = 0; l < c.num_layers; ++l) windows_[l] = c.layer_window(l).value_or(0);
  // Rows one step may carry for a sequence: a prompt longer than this is
  // prefilled in chunks. Under a budget the activations of a chunk (residual,
  // norms, per-slot expert outputs, attention rows) get 128 MiB of the
  // buffers' share; without one, chunks are large.
  max_batch_ = 4096;
  if (options.ram_bytes > 0) {
    const int64_t per_row = (c.hidden_size * (4 + c.num_experts_per_tok) + c.num_heads * 256) * 4;
    max_batch_ = std::clamp<int64_t>((int64_t{128} << 20) / per_row, 16, 4096);
  }
  if (options.max_batch > 0) max_batch_ = options.max_batch;
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

void Model::forward(std::span<const Row> rows, float* logits) {
  const ModelConfig& c = config_;
  const size_t n = rows.size(), hidden = static_cast<size_t>(c.hidden_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (n == 0) return;
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
