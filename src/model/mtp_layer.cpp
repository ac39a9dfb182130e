#include "model/mtp_layer.h"

#include "model/tensor_names.h"
#include "model/weights.h"

namespace strata {

MtpHead bind_mtp_head(WeightBinder& w, const ModelConfig& c, int64_t l) {
  using enum TensorKind;
  MtpHead m;
  m.enorm = w.vector(tn(Naming::Hf, NextnENorm, "weight", l), c.hidden_size);
  m.hnorm = w.vector(tn(Naming::Hf, NextnHNorm, "weight", l), c.hidden_size);
  m.eh_proj = w.linear(hf_name(NextnEhProj, l), c.hidden_size, 2 * c.hidden_size);
  m.embed = w.table(tn(Naming::Hf, NextnEmbedTokens, "weight", l), c.vocab_size, c.hidden_size);
  m.head_norm = w.vector(tn(Naming::Hf, NextnSharedHeadNorm, "weight", l), c.hidden_size);
  m.head = w.linear(hf_name(NextnSharedHeadHead, l), c.vocab_size, c.hidden_size);
  return m;
}

}  // namespace strata
