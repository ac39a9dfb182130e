#include "model/expert_provider.h"

#include <algorithm>
#include <string>

#include "model/tensor_names.h"
#include "model/weights.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace strata {

ExpertBindFn per_expert_tensors(WeightBinder& w, const ModelConfig& c) {
  return [&w, &c](int64_t l, int64_t e) {
    ExpertWeights x;
    x.gate = w.linear(hf_name(TensorKind::FfnGateExps, l, e), c.moe_intermediate_size, c.hidden_size);
    x.up = w.linear(hf_name(TensorKind::FfnUpExps, l, e), c.moe_intermediate_size, c.hidden_size);
    x.down = w.linear(hf_name(TensorKind::FfnDownExps, l, e), c.hidden_size, c.moe_intermediate_size);
    return x;
  };
}

InMemoryExpertProvider::InMemoryExpertProvider(const ModelConfig& c, const ExpertBindFn& bind, int64_t first,
                                               int64_t end)
    : bind_(bind),
      experts_(static_cast<size_t>(end < 0 ? c.num_layers : end)),
      copy_of_(experts_.size(), InterleavedWeights::kNone),
      released_(experts_.size(), false) {
  fetch_.weights_.reserve(static_cast<size_t>(std::max<int64_t>(c.n_routed_experts, 0)));
  for (int64_t l = first; l < static_cast<int64_t>(experts_.size()); ++l) {
    if (!c.layer_is_moe(l)) continue;
    auto& layer = experts_[l];
    layer.reserve(c.n_routed_experts);
    for (int64_t e = 0; e < c.n_routed_experts; ++e) layer.push_back(bind_(l, e));
    // A layer at a time, so at most one layer's source pages are held twice.
    std::vector<kernels::WeightMatrix*> mats;
    for (ExpertWeights& x : layer)
      for (kernels::WeightMatrix* m : x.matrices()) mats.push_back(m);
    copy_of_[l] = interleaved_.adopt(mats);
  }
}

void InMemoryExpertProvider::release_layer(int64_t layer) {
  if (layer < 0 || static_cast<size_t>(layer) >= experts_.size() || released_[layer]) return;
  released_[layer] = true;
  // The interleaved copies are freed; matrices still in the mapped file give
  // its pages back (they would fault in again if read).
  // (release_mapped_pages() ignores memory of no mapped file: the copies.)
  for (const ExpertWeights& x : experts_[layer])
    for (const kernels::WeightMatrix* m : x.matrices())
      if (m->valid()) release_mapped_pages(m->data, static_cast<size_t>(m->out) * m->row_bytes());
  interleaved_.release(copy_of_[layer]);
}

ExpertFetch& InMemoryExpertProvider::fetch(int64_t layer, std::span<const int32_t> experts) {
  if (!experts.empty() && layer >= 0 && static_cast<size_t>(layer) < released_.size() && released_[layer])
    throw Error("internal: experts of layer " + std::to_string(layer) + " asked for after the backend took them");
  fetch_.weights_.clear();
  fetch_.next_ = 0;
  for (int32_t e : experts) fetch_.weights_.push_back(&experts_.at(layer).at(e));
  return fetch_;
}

size_t InMemoryExpertProvider::ReadyFetch::next_batch(std::vector<std::pair<int, const ExpertWeights*>>& out, size_t max) {
  out.clear();
  while (out.size() < max && next_ < weights_.size()) {
    out.emplace_back(static_cast<int>(next_), weights_[next_]);
    ++next_;
  }
  return out.size();
}


}  // namespace strata
