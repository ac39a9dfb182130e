#include "model/model.h"

#include <algorithm>

#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "model/gguf_model.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace strata {

Model::Model(std::filesystem::path dir, ModelConfig config, std::unique_ptr<TensorSource> source, int threads)
    : dir_(std::move(dir)),
      config_(std::move(config)),
      source_(std::move(source)),
      binder_(*source_, config_),
      pool_(threads > 0 ? threads : default_thread_count()) {}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::filesystem::path& path, const LoadOptions& options) {
  std::unique_ptr<Model> m;
  if (std::filesystem::is_regular_file(path)) {
    // A GGUF file: its metadata is the config, and a view renames its
    // tensors to the Hugging Face names the architectures bind.
    auto file = std::make_unique<GgufFile>(path);
    ModelConfig config = config_from_gguf(*file);
    auto view = hf_view_of_gguf(std::move(file), config);
    m.reset(new Model(path, std::move(config), std::move(view), options.threads));
  } else if (std::filesystem::is_directory(path)) {
    ModelConfig config = ModelConfig::from_file((path / "config.json").string());
    auto source = std::make_unique<HfCheckpoint>(path);
    m.reset(new Model(path, std::move(config), std::move(source), options.threads));
  } else {
    throw Error(path.string() + ": no such model directory or GGUF file");
  }
  m->bind_weights();
  return m;
}

void Model::bind_weights() {
  const ModelConfig& c = config_;
  embed_ = binder_.table("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
  final_norm_ = binder_.vector("model.norm.weight", c.hidden_size);
  // Tied embeddings reuse the token table as the output head.
  lm_head_ = c.tie_word_embeddings ? embed_ : binder_.linear("lm_head", c.vocab_size, c.hidden_size);
  experts_ = std::make_unique<InMemoryExpertProvider>(
      c, c.arch == Arch::GptOss ? gpt_oss_experts(*source_, c) : per_expert_tensors(binder_, c));
  layers_.reserve(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    switch (c.arch) {
      case Arch::DeepseekV3: layers_.push_back(bind_deepseek_v3_layer(binder_, c, l, *experts_)); break;
      case Arch::Qwen3Moe: layers_.push_back(bind_qwen3_moe_layer(binder_, c, l, *experts_)); break;
      case Arch::GptOss: layers_.push_back(bind_gpt_oss_layer(binder_, c, l, *experts_)); break;
    }
  }
}

std::unique_ptr<KvCache> Model::new_cache() const {
  CacheWidths w = cache_widths(config_);
  return std::make_unique<KvCache>(config_.num_layers, w.key, w.value);
}

void Model::forward(std::span<const Row> rows, float* logits) {
  const ModelConfig& c = config_;
  const size_t n = rows.size(), hidden = static_cast<size_t>(c.hidden_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (n == 0) return;
  for (const Row& r : rows) {
    if (r.token < 0 || r.token >= c.vocab_size)
      throw Error("token id " + std::to_string(r.token) + " is out of range for this model (vocabulary of " +
                  std::to_string(c.vocab_size) + ")");
    if (!r.cache) throw Error("internal: row without a cache");
    r.cache->ensure(r.pos + 1);
  }

  std::vector<float> h(n * hidden), normed(n * hidden), delta(n * hidden);
  for (size_t i = 0; i < n; ++i) kernels::dequantize_row(embed_, rows[i].token, &h[i * hidden]);

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& layer = layers_[l];
    for (size_t i = 0; i < n; ++i) kernels::rms_norm(&h[i * hidden], layer.attn_norm, hidden, eps, &normed[i * hidden]);
    layer.attention->forward(l, normed.data(), rows, delta.data(), pool_);
    for (size_t i = 0; i < n * hidden; ++i) h[i] += delta[i];

    for (size_t i = 0; i < n; ++i) kernels::rms_norm(&h[i * hidden], layer.mlp_norm, hidden, eps, &normed[i * hidden]);
    if (layer.moe)
      layer.moe->forward(normed.data(), n, delta.data(), pool_);
    else
      layer.dense->forward(normed.data(), n, delta.data(), pool_);
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
