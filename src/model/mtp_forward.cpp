// The next-token-prediction layer's forward pass (Model::mtp_forward(),
// model/mtp_layer.h), top to bottom: the two inputs normalised and joined,
// eh_proj, one decoder layer over the MTP cache, the shared head.
#include <algorithm>

#include "model/model.h"
#include "util/error.h"

namespace strata {

void Model::mtp_forward(size_t k, std::span<const Row> rows, const float* hidden, float* logits, float* out_hidden) {
  if (k >= mtp_.size()) throw Error("internal: mtp_forward() of MTP layer " + std::to_string(k) + " of " +
                                    std::to_string(mtp_.size()));
  check_rows(rows);
  const size_t cap = step_.sizes.rows, vocab = static_cast<size_t>(config_.vocab_size),
               width = static_cast<size_t>(config_.hidden_size);
  size_t written = 0;
  for (size_t begin = 0; begin < rows.size(); begin += cap) {
    const std::span<const Row> part = rows.subspan(begin, std::min(cap, rows.size() - begin));
    mtp_step(mtp_[k], part, hidden + begin * width, logits ? logits + written * vocab : nullptr,
             out_hidden ? out_hidden + written * width : nullptr);
    for (const Row& r : part) written += r.want_logits ? 1 : 0;
  }
}

void Model::mtp_step(const MtpLayer& mtp, std::span<const Row> rows, const float* hidden, float* logits,
                     float* out_hidden) {
  const ModelConfig& c = config_;
  const size_t n = rows.size(), width = static_cast<size_t>(c.hidden_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (n == 0) return;
  take_rows(rows);
  Backend& b = *backend_;
  const MtpHead& head = mtp.head;
  const Tensor h = step_.h.rows(0, n, width), normed = step_.normed.rows(0, n, width),
               delta = step_.delta.rows(0, n, width), joined = step_.mtp_in.rows(0, n, 2 * width);
  // x = eh_proj · [enorm(embed(t_{p+1})) ; hnorm(h_p)], the embedding first.
  b.embed(head.embed, std::span<const int32_t>(step_.tokens).first(n), normed);
  b.rms_norm(normed, head.enorm, n, width, eps, normed);
  b.upload(delta, hidden);
  b.rms_norm(delta, head.hnorm, n, width, eps, delta);
  for (size_t i = 0; i < n; ++i) {
    const Tensor row = joined.rows(i, 1, 2 * width);
    b.copy(row.slice(0, width), normed.rows(i, 1, width));
    b.copy(row.slice(width, width), delta.rows(i, 1, width));
  }
  b.linear(head.eh_proj, joined, n, h);

  // The decoder layer, its attention on the MTP cache's only layer.
  const Layer& layer = mtp.layer;
  b.rms_norm(h, layer.attn_norm, n, width, eps, normed);
  layer.attention->forward(0, normed, rows, delta, b, step_);
  b.add(h, delta);
  b.rms_norm(h, layer.mlp_norm, n, width, eps, normed);
  if (layer.moe)
    layer.moe->forward(normed, n, delta, b, step_);
  else
    layer.dense->forward(normed, n, delta, b, step_.dense_gate, step_.dense_up);
  b.add(h, delta);

  size_t states = 0;
  for (size_t i = 0; i < n; ++i)
    if (rows[i].want_logits && out_hidden) b.download(h.rows(i, 1, width), out_hidden + states++ * width);
  output_head(h, rows, head.head_norm, head.head, logits);
  for (const Row& r : rows) r.cache->set_length(std::max(r.cache->length(), r.pos + 1));
}

}  // namespace strata
