#include "model/model.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

#include "model/arch.h"
#include "model/checkpoint.h"
#include "model/tensor_names.h"
#include "kernels/ops.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/timeline.h"

namespace strata {

Model::Model(Checkpoint checkpoint, const ModelSetup& setup)
    : dir_(std::move(checkpoint.path)),
      identity_(std::move(checkpoint.identity)),
      config_(std::move(checkpoint.config)),
      source_(std::move(checkpoint.source)),
      binder_(*source_, config_),
      kind_(checkpoint.kind),
      trunk_path_(std::move(checkpoint.trunk_path)),
      context_(setup.context),
      max_batch_(setup.max_batch),
      max_pass_(std::max(std::min(setup.max_pass, setup.context), setup.max_batch)) {
  backend_ = open_backend(setup.device, setup.threads, &device_notice_);
  binder_.set_interleave(backend_->wants_interleaved());
  const ModelConfig& c = config_;
  if (context_ < 1 || max_batch_ < 1)
    throw Error("internal: a model needs a context and a step of at least one position");
  embed_ = binder_.table(tn(Naming::Hf, TensorKind::TokenEmbd, "weight"), c.vocab_size, c.hidden_size);
  final_norm_ = binder_.vector(tn(Naming::Hf, TensorKind::OutputNorm, "weight"), c.hidden_size);
  if (c.attn_res_block_size > 0)  // AttnRes: the last depth mix's query
    output_res_query_ = depth_query(binder_, c, TensorKind::OutputResNorm, TensorKind::OutputResProj, -1);
  // Tied embeddings reuse the token table as the output head.
  lm_head_ = c.tie_word_embeddings
                 ? embed_
                 : binder_.resident(binder_.linear(hf_name(TensorKind::Output), c.vocab_size, c.hidden_size));
}

Model::~Model() {
  // The backend (a member declared before the provider, so destroyed after
  // it) gives back the provider's memory it reads in place first.
  try {
    if (backend_) backend_->adopt_host_memory({});
  } catch (...) {  // a device lost: nothing it recorded runs any more
  }
}

std::vector<float> depth_query(WeightBinder& w, const ModelConfig& c, TensorKind norm, TensorKind proj, int64_t layer) {
  const float* n = w.vector(tn(Naming::Hf, norm, "weight", layer), c.hidden_size);
  const float* p = w.values(tn(Naming::Hf, proj, "weight", layer), c.hidden_size);  // [1, hidden]
  std::vector<float> q(static_cast<size_t>(c.hidden_size));
  for (size_t i = 0; i < q.size(); ++i) q[i] = n[i] * p[i];
  return q;
}

namespace {

// A step guesses the next layer's experts from at most this many of its rows
// (a longer prefill step from rows spread evenly over it): enough to keep
// the drive busy between two layers, at a small share of the router's cost.
constexpr size_t kGuessRows = 256;
// Rows whose logits one output product computes (a bigger step's run in turn).
constexpr size_t kLogitRows = 32;
// Rows embedded at a time when the token table is read by rows (streaming).
constexpr size_t kEmbedRows = 64;

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
  // Until everything below has worked the model cannot run (forward() says
  // so): the old layers refer to the provider being replaced, and the old
  // step state to tensors about to be released.
  layers_.clear();
  mtp_.clear();
  step_ = StepState();
  backend_->release_tensors();
  backend_->adopt_host_memory({});  // the old provider's cache: done with before it goes
  experts_ = std::move(experts);
  // A device backend may copy experts from the RAM cache in place, as long
  // as it finishes with a slot before a read overwrites it.
  if (const std::span<const uint8_t> cache = experts_->cache_memory();
      !cache.empty() && backend_->adopt_host_memory(cache)) {
    Backend* b = backend_.get();
    experts_->before_cache_write([b](const void* p, size_t n) { b->host_memory_written(p, n); });
  }
  std::vector<Layer> layers;
  layers.reserve(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) layers.push_back(arch_spec(c.arch).bind_layer(binder_, c, l, *experts_));
  // The MTP layers' experts stream with the others when the provider serves
  // them; otherwise (in RAM, or a pack that keeps them in its trunk) they
  // are bound here, from the checkpoint's tensors.
  std::vector<MtpLayer> mtp;
  std::unique_ptr<ExpertProvider> mtp_experts;
  if (c.num_nextn_predict_layers > 0) {
    const int64_t end = c.expert_layers();
    if (!experts_->serves_layer(c.num_layers))
      mtp_experts = std::make_unique<InMemoryExpertProvider>(c, expert_binder(c, *source_, binder_), c.num_layers, end);
    ExpertProvider& from = mtp_experts ? *mtp_experts : *experts_;
    for (int64_t l = c.num_layers; l < end; ++l)
      mtp.push_back({arch_spec(c.arch).bind_layer(binder_, c, l, from), bind_mtp_head(binder_, c, l)});
  }
  // The plan comes from the config alone (the loader counted it before the
  // layers were bound): a bound weight wider than it is a bug, not a reason
  // to allocate more than was counted.
  const StepSizes sizes = step_sizes(static_cast<size_t>(max_batch_), static_cast<size_t>(max_pass_));
  const StepLimits limits = step_limits(sizes);
  if (static_cast<size_t>(binder_.widest_in()) > limits.widest_in)
    throw Error("internal: a weight with " + std::to_string(binder_.widest_in()) +
                " inputs is wider than the step was planned for (" + std::to_string(limits.widest_in) + ")");
  StepState step(*backend_, sizes);
  backend_->plan(limits);
  layers_ = std::move(layers);
  mtp_experts_ = std::move(mtp_experts);
  mtp_ = std::move(mtp);
  step_ = std::move(step);
  prefetch_ = prefetch && experts_->wants_prefetch();
  plan_ = plan;
  held_layers_ = 0;
  hold_experts_on_device();
}

void Model::preload_head_and_table() {
  backend_->preload(lm_head_);
  backend_->preload(embed_);
  if (embed_rows_only_) {  // read whole for a device's copy: its pages go again
    const size_t bytes = static_cast<size_t>(embed_.out) * embed_.row_bytes();
    release_mapped_pages_touched(embed_.data, bytes, std::span<const uint8_t>(embed_.data, bytes));
  }
}

namespace {

// The provider of layers bound only to be checked: they never run.
class NoExperts : public ExpertProvider {
 public:
  ExpertFetch& fetch(int64_t, std::span<const int32_t>) override {
    throw Error("internal: a layer bound for checking ran");
  }
};

}  // namespace

void Model::check_tensors() {
  const ModelConfig& c = config_;
  const ArchSpec& spec = arch_spec(c.arch);
  NoExperts none;
  for (int64_t l = 0; l < c.num_layers + c.num_nextn_predict_layers; ++l) {
    // A binder per layer: what it converts is let go with it.
    WeightBinder w(*source_, c);
    if (l >= c.num_layers) {
      InMemoryExpertProvider mtp_experts(c, expert_binder(c, *source_, w), l, l + 1);
      spec.bind_layer(w, c, l, mtp_experts);
      bind_mtp_head(w, c, l);
      continue;
    }
    spec.bind_layer(w, c, l, none);
    if (!c.layer_is_moe(l)) continue;
    const ExpertBindFn bind = expert_binder(c, *source_, w);
    for (int64_t e = 0; e < c.n_routed_experts; ++e) bind(l, e);
  }
}

StepSizes plan_step_sizes(const ModelConfig& c, size_t rows, bool held, size_t span) {
  StepSizes z;
  z.rows = rows;
  z.span = std::max(span, rows);
  z.logit_rows = std::min<size_t>(rows, kLogitRows);
  z.hidden = static_cast<size_t>(c.hidden_size);
  z.vocab = static_cast<size_t>(c.vocab_size);
  z.attention = arch_spec(c.arch).attention_widths(c);
  bool moe = false, dense = false;
  for (int64_t l = 0; l < c.num_layers; ++l) (c.layer_is_moe(l) ? moe : dense) = true;
  if (dense) z.dense_width = static_cast<size_t>(c.intermediate_size);
  if (moe) {
    z.shared_width = static_cast<size_t>(c.moe_intermediate_size * c.n_shared_experts);
    z.experts = static_cast<size_t>(c.n_routed_experts);
    z.experts_per_token = static_cast<size_t>(c.num_experts_per_tok);
    z.guess_rows = std::min(rows, kGuessRows);
    for (int64_t l = 0; l < c.num_layers; ++l) z.moe_layers += c.layer_is_moe(l) ? 1 : 0;
    z.held_rows = held ? rows : 0;  // a backend that may hold layers routes any step of them
    if (c.latent_width > 0) z.latent_width = static_cast<size_t>(c.latent_width);
  }
  if (c.attn_res_block_size > 0)
    z.depth_blocks = static_cast<size_t>((c.num_layers - 1) / c.attn_res_block_size + 1);
  if (c.num_nextn_predict_layers > 0) z.mtp_in = 2 * z.hidden;
  return z;
}

StepLimits plan_step_limits(const ModelConfig& c, const StepSizes& z, int64_t context) {
  StepLimits l;
  l.rows = z.rows;
  l.context = context;
  l.hidden = z.hidden;
  l.experts = z.experts;
  l.experts_per_token = z.experts_per_token;
  l.expert_width = z.experts ? static_cast<size_t>(c.moe_intermediate_size) : 0;
  l.fused_gate_up = z.experts && arch_spec(c.arch).fused_gate_up;
  if (c.kv_lora_rank > 0) {
    l.latent = static_cast<size_t>(c.kv_lora_rank);
    l.latent_rope = static_cast<size_t>(c.qk_rope_head_dim);
  }
  l.kda_head_dim = static_cast<size_t>(c.kda_head_dim);
  l.heads = static_cast<size_t>(std::max(c.num_heads, c.kda_heads));
  l.depth_values = z.depth_blocks ? z.depth_blocks + 1 : 0;
  const AttentionWidths& a = z.attention;
  l.widest_in = std::max({z.hidden, a.out, a.q_latent, a.kv, z.dense_width, z.shared_width, l.expert_width,
                          z.latent_width});
  // An MTP layer's eh_proj takes [embedding ; hidden state] (model/mtp_layer.h).
  if (c.num_nextn_predict_layers > 0) l.widest_in = std::max(l.widest_in, 2 * z.hidden);
  return l;
}

void Model::set_max_batch_rows(int64_t rows, int64_t pass) {
  if (rows < 1) throw Error("internal: a step of fewer than one row");
  if (!layers_.empty()) throw Error("internal: set_max_batch_rows() after attach_experts()");
  max_batch_ = rows;
  max_pass_ = std::max(rows, std::min(pass, context_));  // a pass past the context holds nothing more
}

uint64_t Model::step_bytes(size_t rows, size_t span) const {
  const StepSizes sizes = rows ? step_sizes(rows, span)
                               : step_sizes(static_cast<size_t>(max_batch_), static_cast<size_t>(max_pass_));
  return StepState::bytes(sizes) + backend_->scratch_bytes(step_limits(sizes));
}

bool Model::prefetch_for(size_t next, Tensor h, size_t n, bool pass) {
  while (next < layers_.size() && !layers_[next].moe) ++next;  // dense layers read nothing
  if (!prefetch_ || next >= layers_.size()) return true;
  // Prefill steps guess too: the drive would otherwise idle from this
  // layer's last read to the next layer's routing (the tail of this layer's
  // products and the next attention). The provider caps the guesses (a
  // quarter of its cache, three quarters for a pass of several parts, and
  // while a pass is in a layer no more than leaves it room for all its
  // experts; none of the slots this layer's experts hold, none while a
  // request waits for a slot), so a prompt whose layer fills the cache still
  // reads each expert once a step.
  // (A pass wider than a step asks for the next layer a step at a time.)
  if (layers_[next].moe->held_by(*backend_, std::min(n, step_.sizes.rows))) return true;  // nothing to read: the device holds them
  if (experts_->holds_layer(static_cast<int64_t>(next))) return true;  // nor when the RAM cache does
  // The next layer's router on this layer's residual: the residual changes
  // little from one layer to the next, so its picks are a good guess.
  const timeline::Scope span("step", "guess");
  const ModelConfig& c = config_;
  const size_t hidden = static_cast<size_t>(c.hidden_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const size_t g = std::min(n, step_.sizes.guess_rows);
  const Tensor normed = step_.guess_normed.rows(0, g, hidden);
  if (g == n) {
    backend_->rms_norm(h.rows(0, n, hidden), layers_[next].mlp_norm, n, hidden, eps, normed);
  } else {
    for (size_t i = 0; i < g; ++i) step_.guess_sample[i] = static_cast<uint32_t>(i * n / g);
    backend_->gather_rows(h.rows(0, n, hidden), hidden, std::span<const uint32_t>(step_.guess_sample).first(g), normed);
    backend_->rms_norm(normed, layers_[next].mlp_norm, g, hidden, eps, normed);
  }
  const std::span<const int32_t> guess = layers_[next].moe->predict(normed, g, *backend_, step_);
  // Experts the backend holds (a GPU's VRAM) will not be fetched: no read ahead.
  step_.guess_reads.clear();
  for (int32_t e : guess)
    if (!backend_->has_expert(static_cast<int64_t>(next), e)) step_.guess_reads.push_back(e);
  using GuessOf = ExpertProvider::GuessOf;
  return experts_->prefetch(static_cast<int64_t>(next), step_.guess_reads,
                            pass ? GuessOf::Pass : n == 1 ? GuessOf::Token : GuessOf::Step);
}

void Model::collect_held_routing(std::span<const Row> rows) {
  if (step_.held_routing.empty()) return;
  backend_->collect_routing();
  const size_t k = static_cast<size_t>(config_.num_experts_per_tok);
  std::vector<int32_t> distinct;
  for (const StepState::HeldRouting& h : step_.held_routing) {
    const std::span<const int32_t> ids(step_.held_ids.data() + h.at, h.n * k);
    // Counted as the experts a fetch would have found in memory.
    distinct.assign(ids.begin(), ids.end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    experts_->note_held(h.layer, distinct);
    if (route_observer_) route_observer_->routed(h.layer, 0, rows, ids, k);
  }
  step_.held_routing.clear();
}

void Model::hold_experts_on_device() {
  // Only where every routed expert of every layer fits the backend's budget
  // (a GPU's --vram): then its decode steps route and run the experts without
  // the host waiting. Streamed experts are read from their drives here (each
  // layer's first twice where the RAM cache is small: it is read first to
  // size them all), and the provider keeps no copy of a layer taken; but not
  // where a fetch may download (it would download every expert at load).
  const ModelConfig& c = config_;
  if (c.n_routed_experts <= 0 || backend_->hold_budget() == 0 || experts_->downloads()) return;
  const size_t E = static_cast<size_t>(c.n_routed_experts);
  Backend::ExpertBatch got;
  // What they all take, from each layer's first expert (a layer is held
  // whole only where its experts share one shape).
  uint64_t total = 0;
  const std::vector<int32_t> first{0};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!layers_[l].moe) continue;
    ExpertFetch& f = experts_->fetch_whole(l, first);
    const EndsFetch end(f);
    if (f.next_batch(got, 1) != 1) return;
    total += backend_->held_expert_bytes(*got[0].second) * E;
    if (total > backend_->hold_budget()) return;
  }
  std::vector<int32_t> all(E);
  std::iota(all.begin(), all.end(), 0);  // positions in the fetch are expert ids
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!layers_[l].moe) continue;
    std::optional<ExpertWeights> shapes;  // the layer's first handed out, for its shapes only
    {
      ExpertFetch& f = experts_->fetch_whole(l, all);
      const EndsFetch end(f);
      const bool held = backend_->hold_layer(l, E, [&](Backend::ExpertBatch& out) {
        const size_t n = f.next_batch(out, E);
        if (n > 0 && !shapes) shapes = *out[0].second;
        return n;
      });
      if (!held) return;
      // A layer the backend held already (a model attached again) took none.
      if (!shapes && f.next_batch(got, 1) == 1) shapes = *got[0].second;
      if (!shapes) return;
    }
    // Its provider's copy is no longer read: the GPU's is the only one.
    layers_[l].moe->held_whole(*shapes);
    experts_->release_layer(l);
    ++held_layers_;
  }
}

bool Model::prefill(std::span<const int32_t> tokens, size_t from, KvCache& cache, float* logits,
                    const std::function<bool()>& cancelled) {
  const size_t chunk = static_cast<size_t>(max_pass_);
  std::vector<Row>& rows = step_.chunk;  // planned: max_pass_ rows
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

CacheShape Model::cache_shape() const { return cache_shape_of(config_, context_, max_batch_); }

CacheShape cache_shape_of(const ModelConfig& c, int64_t context, int64_t max_batch) {
  const CacheWidths w = cache_widths(c);
  std::vector<int64_t> windows(static_cast<size_t>(c.num_layers), 0);
  for (int64_t l = 0; l < c.num_layers; ++l) windows[l] = c.layer_window(l).value_or(0);
  CacheShape s{c.num_layers, w.key, w.value, context, std::move(windows), max_batch, {}};
  // Kimi Delta Attention layers keep a recurrent state instead of rows.
  if (!c.kda_layers.empty()) {
    s.state_floats.assign(static_cast<size_t>(c.num_layers), 0);
    for (int64_t l = 0; l < c.num_layers; ++l)
      if (c.layer_is_kda(l)) s.state_floats[l] = kda_state_floats(c.kda_heads, c.kda_head_dim, c.kda_conv_kernel);
  }
  return s;
}

std::unique_ptr<KvCache> Model::new_cache() const { return backend_->new_cache(cache_shape()); }

CacheShape Model::mtp_cache_shape() const {
  const CacheWidths w = cache_widths(config_);
  return CacheShape{1, w.key, w.value, context_, {0}, max_batch_, {}};
}

std::unique_ptr<KvCache> Model::new_mtp_cache() const { return backend_->new_cache(mtp_cache_shape()); }

uint64_t Model::mtp_cache_bytes_at_context() const {
  return config_.num_nextn_predict_layers > 0 ? backend_->cache_bytes(mtp_cache_shape()) : 0;
}

uint64_t Model::cache_bytes_at_context() const { return backend_->cache_bytes(cache_shape()); }

uint64_t Model::cache_snapshot_bytes() const { return backend_->cache_snapshot_bytes(cache_shape()); }

void Model::check_rows(std::span<const Row> rows) const {
  const ModelConfig& c = config_;
  if (!experts_ || layers_.empty() || step_.sizes.rows == 0) throw Error("internal: forward() before attach_experts()");
  for (const Row& r : rows) {
    if (r.token < 0 || r.token >= c.vocab_size)
      throw Error("token id " + std::to_string(r.token) + " is out of range for this model (vocabulary of " +
                  std::to_string(c.vocab_size) + ")");
    if (!r.cache) throw Error("internal: row without a cache");
    if (r.pos < 0 || r.pos >= r.cache->max_positions())
      throw Error("the sequence needs " + std::to_string(r.pos + 1) + " positions but the context is " +
                  std::to_string(r.cache->max_positions()) + " (raise --ctx)");
  }
}

void Model::forward(std::span<const Row> rows, float* logits, float* hidden, LogitPick* picks) {
  const ModelConfig& c = config_;
  // Every row is checked before any runs: a bad one changes no cache.
  check_rows(rows);
  if (!hidden && std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.want_hidden; }))
    throw Error("internal: rows want their hidden states but forward() was given nowhere to put them");
  // A recurrent state (Kimi K3's KDA layers) takes each sequence's rows once,
  // together, continuing where it stopped.
  if (!c.kda_layers.empty())
    for (size_t i = 0; i < rows.size(); ++i) {
      const bool continues = i > 0 && rows[i].cache == rows[i - 1].cache;
      if (continues ? rows[i].pos != rows[i - 1].pos + 1 : rows[i].pos != rows[i].cache->length())
        throw Error("internal: a sequence's rows must continue its recurrent state in order");
      if (!continues)
        for (size_t j = 0; j < i; ++j)
          if (rows[j].cache == rows[i].cache) throw Error("internal: a sequence's rows are not together in the step");
    }
  const size_t cap = step_.sizes.span, vocab = static_cast<size_t>(c.vocab_size),
               width = static_cast<size_t>(c.hidden_size);
  size_t written = 0, states = 0;
  for (size_t begin = 0; begin < rows.size(); begin += cap) {
    const std::span<const Row> part = rows.subspan(begin, std::min(cap, rows.size() - begin));
    forward_pass(part, logits ? logits + written * vocab : nullptr, hidden ? hidden + states * width : nullptr,
                 picks ? picks + written : nullptr);
    for (const Row& r : part) {
      written += r.want_logits ? 1 : 0;
      states += r.want_hidden ? 1 : 0;
    }
  }
}

void Model::take_rows(std::span<const Row> rows) {
  // Each run of a cache's rows grows it once, to the run's furthest position
  // (a prompt's rows one at a time would grow it 64, 128, 256 ..., each
  // growth a copy of the rows so far and, on a GPU, new buffers with the
  // device idle meanwhile).
  const size_t n = rows.size();
  int64_t furthest = 0;  // of the current run of rows of one cache
  for (size_t i = 0; i < n; ++i) {  // checked by forward()
    furthest = i > 0 && rows[i - 1].cache == rows[i].cache ? std::max(furthest, rows[i].pos) : rows[i].pos;
    if (i + 1 == n || rows[i + 1].cache != rows[i].cache) rows[i].cache->ensure(furthest + 1);
    step_.tokens[i] = rows[i].token;
  }
}

void Model::forward_pass(std::span<const Row> rows, float* logits, float* out_hidden, LogitPick* picks) {
  const ModelConfig& c = config_;
  const size_t n = rows.size(), hidden = static_cast<size_t>(c.hidden_size), vocab = static_cast<size_t>(c.vocab_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (n == 0) return;
  take_rows(rows);

  // The pass's parts: rows [first(p), first(p) + size(p)), each at most a
  // step's. Every layer takes its parts in order before the next layer
  // starts; the residual stream (h, and the delta owed to it) and the
  // banked blocks of the whole pass stay in place between layers, while the
  // rest of the step state serves one part at a time.
  const size_t cap = step_.sizes.rows, parts = (n + cap - 1) / cap;
  auto first = [cap](size_t p) { return p * cap; };
  auto size = [cap, n](size_t p) { return std::min(cap, n - p * cap); };

  Backend& b = *backend_;
  const Tensor h = step_.h.rows(0, n, hidden), delta = step_.delta.rows(0, n, hidden);
  // Streaming, the token table's pages a row touched (and the kernel's
  // fault-around) are let go a few rows at a time, so a long pass holds no
  // more of the table than that.
  const size_t embed_rows = embed_rows_only_ ? kEmbedRows : cap;
  const std::span<const uint8_t> table(embed_.data, static_cast<size_t>(embed_.out) * embed_.row_bytes());
  {
    const timeline::Scope embed_span("step", "embed");
    for (size_t at = 0, m = 0; at < n; at += m) {
      m = std::min({embed_rows, cap - at % cap, n - at});  // within one part
      b.embed(embed_, std::span<const int32_t>(step_.tokens).subspan(at, m), h.rows(at, m, hidden));
      if (embed_rows_only_) {
        // One release from the lowest row to the highest, not one a row: only
        // the rows' pages are mapped in that span, and each call flushes
        // every core's TLB (docs/PERFORMANCE.md has what a call a row cost).
        int32_t lo = rows[at].token, hi = lo;
        for (const Row& r : rows.subspan(at, m)) {
          lo = std::min(lo, r.token);
          hi = std::max(hi, r.token);
        }
        release_mapped_pages_touched(embed_.data + static_cast<size_t>(lo) * embed_.row_bytes(),
                                     static_cast<size_t>(hi - lo + 1) * embed_.row_bytes(), table);
      }
    }
  }

  // The guess at the next layer's experts, run while this layer's reads are
  // in flight: from the whole pass's residual stream (its attention deltas
  // joined, below). In a pass of several parts it runs while the first part
  // does, so that the next layer's reads go out behind this layer's own and
  // the drive works through the later parts instead of idling from this
  // layer's last read to the next layer's first part; and again at the last
  // part where the provider cut the first guess short (it leaves room for
  // the layer's later parts). One pointer captured, so the std::function
  // holds it in place.
  struct Guess {
    Model* model;
    size_t next;
    Tensor h;
    size_t n;
    bool pass;
    bool whole = true;  // the last guess went out whole
  } guess{this, 0, h, n, parts > 1};
  const std::function<void()> guess_next = [g = &guess] {
    g->whole = g->model->prefetch_for(g->next, g->h, g->n, g->pass);
  };
  const std::function<void()> no_guess;

  // A backend that holds a layer's experts routes a one-part pass of it
  // itself (MoeBlock::forward): room for every layer's choice, which comes
  // back at the pass's end. (The parts of a wider pass are routed on the
  // host, each with its own wait for the device: a long prompt's cost.)
  const bool defer_routing = parts == 1 && n <= step_.sizes.held_rows;
  step_.held_routing.clear();
  // A pass of several parts asks for each streamed layer's experts once a
  // part: the provider keeps that layer's over others until its last part
  // (and keeps none once the pass is over, an error's way out too).
  const bool keep_layers = parts > 1 && streaming();
  struct KeepsNone {
    ExpertProvider* experts;
    ~KeepsNone() {
      if (experts) experts->keep_layer(-1);
    }
  } keeps_none{keep_layers ? experts_.get() : nullptr};

  // AttnRes (Kimi K3): `h` holds the sum within the current block, the bank
  // the earlier blocks' inputs, and each sublayer reads their mix over depth
  // instead of the residual stream (KimiDecoderLayer._forward_attn_residual).
  const int64_t block = c.attn_res_block_size;
  size_t banked = 0;
  auto bank = [&](size_t p) {  // the banked blocks' rows of part p
    step_.bank_part.clear();
    for (size_t i = 0; i < banked; ++i) step_.bank_part.push_back(step_.bank[i].rows(first(p), size(p), hidden));
    return std::span<const Tensor>(step_.bank_part);
  };
  // Without AttnRes, a sublayer's delta joins the stream in the next norm's
  // op (add_rms_norm: one op instead of two, the same bits); a layer's last
  // delta waits for the next layer's first norm.
  bool delta_owed = false;
  // Part p's input to a sublayer, normalised with `norm` into `normed` (after
  // the delta owed, or from the depth mix with `query`).
  auto sublayer_input = [&](size_t p, const float* query, const float* norm, Tensor normed) {
    const size_t m = size(p);
    const Tensor hp = h.rows(first(p), m, hidden);
    if (delta_owed) {
      b.add_rms_norm(hp, delta.rows(first(p), m, hidden), norm, m, hidden, eps, normed);
    } else if (query) {
      const Tensor mixed = step_.mixed.rows(0, m, hidden);
      b.depth_mix(bank(p), hp, query, m, hidden, eps, mixed);
      b.rms_norm(mixed, norm, m, hidden, eps, normed);
    } else {
      b.rms_norm(hp, norm, m, hidden, eps, normed);
    }
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (l > 0 && parts > 1 && pass_stop_ && pass_stop_()) {
      b.collect_routing();  // nothing recorded may run into the caches later
      throw PassStopped();
    }
    const Layer& layer = layers_[l];
    const bool restart = block && l % block == 0;  // a block starts: its input is banked, the sum restarts
    for (size_t p = 0; p < parts; ++p) {
      const size_t at = first(p), m = size(p);
      const Tensor hp = h.rows(at, m, hidden), dp = delta.rows(at, m, hidden), normed = step_.normed.rows(0, m, hidden);
      sublayer_input(p, banked > 0 ? layer.attn_res_query.data() : nullptr, layer.attn_norm, normed);
      if (restart) b.copy(step_.bank[banked].rows(at, m, hidden), hp);
      const timeline::Scope span("step", "attention", l);
      layer.attention->forward(l, normed, rows.subspan(at, m), dp, b, step_);
      if (restart)
        b.copy(hp, dp);
      else if (block)
        b.add(hp, dp);
    }
    if (restart) ++banked;
    delta_owed = !block;
    // The first part's guess reads every part's rows: their attention deltas
    // join the stream first (then each part's norm alone: add_rms_norm's bits).
    if (parts > 1 && delta_owed) {
      b.add(h, delta);
      delta_owed = false;
    }

    guess.next = static_cast<size_t>(l) + 1;
    for (size_t p = 0; p < parts; ++p) {
      const size_t at = first(p), m = size(p);
      const Tensor hp = h.rows(at, m, hidden), dp = delta.rows(at, m, hidden), normed = step_.normed.rows(0, m, hidden);
      sublayer_input(p, block ? layer.mlp_res_query.data() : nullptr, layer.mlp_norm, normed);
      const timeline::Scope span("step", layer.moe ? "experts" : "mlp", l);
      const bool last = p + 1 == parts;
      const bool guess_here = p == 0 || (last && !guess.whole);
      if (layer.moe) {
        if (keep_layers) experts_->keep_layer(last ? -1 : l);
        const size_t held_before = step_.held_routing.size();
        layer.moe->forward(normed, m, dp, b, step_, guess_here ? guess_next : no_guess, defer_routing);
        if (route_observer_ && step_.held_routing.size() == held_before) {
          const size_t k = static_cast<size_t>(c.num_experts_per_tok);
          route_observer_->routed(l, at, rows.subspan(at, m), std::span<const int32_t>(step_.ids).first(m * k), k);
        }
      } else {
        // A dense layer right before a MoE layer guesses for it too, so the
        // drive works through this MLP and the next attention instead of
        // idling until that MoE layer's own reads (DeepSeek-V3's first layers).
        if (guess_here && l + 1 < c.num_layers && layers_[l + 1].moe) guess_next();
        layer.dense->forward(normed, m, dp, b, step_.dense_gate, step_.dense_up);
      }
      if (block) b.add(hp, dp);
    }
    delta_owed = !block;
  }
  // Per part: the stream's last delta, then the final hidden states asked
  // for, each normalised on its own (the output head does the same for its
  // rows: the same bits), and the logits.
  size_t written = 0, states = 0;
  for (size_t p = 0; p < parts; ++p) {
    const timeline::Scope head_span("step", "output head");
    const size_t at = first(p), m = size(p);
    const std::span<const Row> part = rows.subspan(at, m);
    const Tensor hp = h.rows(at, m, hidden);
    if (delta_owed) b.add(hp, delta.rows(at, m, hidden));
    Tensor last = hp;
    if (block) {
      last = step_.mixed.rows(0, m, hidden);
      b.depth_mix(bank(p), hp, output_res_query_.data(), m, hidden, eps, last);
    }
    for (size_t i = 0; i < m; ++i)
      if (part[i].want_hidden) {
        const Tensor one = step_.normed.rows(0, 1, hidden);
        b.rms_norm(last.rows(i, 1, hidden), final_norm_, 1, hidden, eps, one);
        b.download(one, out_hidden + states++ * hidden);
      }
    output_head(last, part, final_norm_, lm_head_, logits ? logits + written * vocab : nullptr,
                picks ? picks + written : nullptr);
    for (const Row& r : part) written += r.want_logits ? 1 : 0;
  }
  {
    const timeline::Scope wait_span("step", "collect routing");
    collect_held_routing(rows);
  }

  for (const Row& r : rows) r.cache->set_length(std::max(r.cache->length(), r.pos + 1));
  if (route_observer_) route_observer_->step_done(rows);
}

void Model::output_head(Tensor last, std::span<const Row> rows, const float* norm, const kernels::WeightMatrix& head,
                        float* logits, LogitPick* picks) {
  const size_t hidden = static_cast<size_t>(config_.hidden_size), vocab = static_cast<size_t>(config_.vocab_size);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Backend& b = *backend_;
  const Tensor normed = step_.normed.rows(0, std::min(rows.size(), step_.sizes.logit_rows), hidden);
  step_.selected.clear();
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].want_logits) step_.selected.push_back(static_cast<uint32_t>(i));
  const size_t per = step_.sizes.logit_rows;
  for (size_t s0 = 0; s0 < step_.selected.size(); s0 += per) {
    const size_t m = std::min(per, step_.selected.size() - s0);
    for (size_t j = 0; j < m; ++j)
      b.rms_norm(last.rows(step_.selected[s0 + j], 1, hidden), norm, 1, hidden, eps, normed.rows(j, 1, hidden));
    const Tensor out = step_.logits.rows(0, m, vocab);
    b.linear(head, normed, m, out);
    bool picks_only = picks != nullptr;
    for (size_t j = 0; j < m; ++j) picks_only = picks_only && rows[step_.selected[s0 + j]].pick_only;
    if (picks_only) {
      b.pick_largest(out, m, vocab, picks + s0);
      continue;
    }
    b.download(out, logits + s0 * vocab);
    if (picks)
      for (size_t j = 0; j < m; ++j)
        if (rows[step_.selected[s0 + j]].pick_only)
          picks[s0 + j] = largest_logit(std::span<const float>(logits + (s0 + j) * vocab, vocab));
  }
}

}  // namespace strata
