#include "model/arch.h"

#include "util/error.h"

namespace strata {

std::span<const ArchSpec* const> all_archs() {
  static const ArchSpec* const all[] = {&deepseek_v3_arch(), &qwen3_moe_arch(), &gpt_oss_arch(), &kimi_k3_arch()};
  return all;
}

const ArchSpec& arch_spec(Arch arch) {
  for (const ArchSpec* s : all_archs())
    if (s->arch == arch) return *s;
  throw Error("internal: architecture " + std::to_string(static_cast<int>(arch)) + " has no spec");
}

const ArchSpec* arch_for_model_type(std::string_view model_type) {
  for (const ArchSpec* s : all_archs())
    for (const char* t : s->hf_model_types)
      if (model_type == t) return s;
  return nullptr;
}

const ArchSpec* arch_for_gguf(std::string_view gguf_arch) {
  for (const ArchSpec* s : all_archs())
    if (s->gguf.read && gguf_arch == s->gguf_arch) return s;
  return nullptr;
}

std::string supported_model_types() {
  std::string out;
  for (const ArchSpec* s : all_archs())
    for (const char* t : s->hf_model_types) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

std::string supported_gguf_archs() {
  std::string out;
  for (const ArchSpec* s : all_archs())
    if (s->gguf.read) out += (out.empty() ? "" : ", ") + std::string(s->gguf_arch);
  return out;
}

CacheWidths cache_widths(const ModelConfig& c) { return arch_spec(c.arch).cache_widths(c); }

std::vector<std::pair<TensorKind, int64_t>> declared_tensors(const ModelConfig& c, Naming naming) {
  std::vector<std::pair<TensorKind, int64_t>> out = {{TensorKind::TokenEmbd, -1}, {TensorKind::OutputNorm, -1}};
  if (!c.tie_word_embeddings) out.emplace_back(TensorKind::Output, -1);
  const ArchSpec& spec = arch_spec(c.arch);
  for (TensorKind k : spec.model_tensors) out.emplace_back(k, -1);
  std::vector<TensorKind> kinds;
  for (int64_t l = 0; l < c.num_layers + c.num_nextn_predict_layers; ++l) {
    kinds.clear();
    spec.declare_layer(c, l, naming, kinds);
    if (l >= c.num_layers) kinds.insert(kinds.end(), std::begin(kMtpKinds), std::end(kMtpKinds));
    for (TensorKind k : kinds) out.emplace_back(k, l);
  }
  return out;
}

}  // namespace strata
