#include "runtime/pack_fidelity.h"

#include <algorithm>

#include "model/model.h"
#include "pack/manifest.h"
#include "runtime/compare.h"
#include "runtime/loader.h"
#include "util/progress.h"

namespace strata {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<std::vector<int32_t>> builtin_fidelity_prompts(int64_t vocab_size, int64_t max_positions) {
  constexpr int kPrompts = 8;
  constexpr int64_t kLength = 16;
  const int64_t length = max_positions > 0 ? std::clamp<int64_t>(max_positions, 2, kLength) : kLength;
  std::vector<std::vector<int32_t>> out(kPrompts);
  for (int p = 0; p < kPrompts; ++p) {
    uint64_t state = 0x5354524154410000ull + static_cast<uint64_t>(p);  // "STRATA" + the prompt's index
    for (int64_t i = 0; i < length; ++i)
      out[p].push_back(static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(vocab_size)));
  }
  return out;
}

std::optional<PackFidelity> record_pack_fidelity(const std::filesystem::path& source, const std::filesystem::path& pack,
                                                 const FidelityOptions& options) {
  Manifest m = Manifest::load(pack);
  if (!m.lossy.any()) return std::nullopt;
  if (m.fidelity && !m.fidelity->skipped) return m.fidelity;
  if (options.skip) {
    if (!m.fidelity) {
      PackFidelity f;
      f.skipped = true;
      f.flag = options.skip_flag;
      m.fidelity = f;
      m.save(pack / "manifest.json");
    }
    return m.fidelity;
  }
  LoadOptions lo(options.threads);
  lo.heat = "none";  // a measurement, not a run whose experts should be remembered
  lo.show_progress = options.show_progress;
  auto reference = load_model(source, lo);
  auto packed = load_model(pack, lo);
  const auto prompts =
      builtin_fidelity_prompts(reference->config().vocab_size, std::min(reference->context(), packed->context()));
  uint64_t positions = 0;
  for (const auto& p : prompts) positions += p.size();
  Progress bar("fidelity", positions, options.show_progress, ProgressUnit::Tokens, /*quiet_if_quick=*/true);
  const CompareReport r = compare_models(*reference, *packed, prompts,
                                         [&](int64_t done, int64_t) { bar.set(static_cast<uint64_t>(done)); });
  bar.finish();
  PackFidelity f;
  f.prompt_set = kBuiltinPromptSet;
  f.prompts = r.sequences;
  f.positions = r.positions;
  f.top1_agreement = r.top1_agreement;
  f.mean_kl = r.mean_kl;
  f.p99_kl = r.p99_kl;
  f.max_kl = r.max_kl;
  m.fidelity = f;
  m.save(pack / "manifest.json");
  return f;
}

}  // namespace strata
