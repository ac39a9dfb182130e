#pragma once
// What a lossy pack says about itself: which parts `strata pack` re-quantized
// (--trunk int8, --experts q8|int4|mxfp4) and how close the result stayed to
// its source on the built-in prompts (runtime/pack_fidelity.h measures it).
//
// In manifest.json (both absent for an exact pack):
//   "lossy":    {"trunk": "int8", "experts": "int4"}   // only the parts changed
//   "fidelity": {"prompt_set": "builtin-v1", "prompts": 8, "positions": 128,
//                "top1_agreement": 0.97, "mean_kl": 0.012, "p99_kl": .., "max_kl": ..}
//            or {"skipped": true, "flag": "--skip-fidelity"}
// A lossy pack without "fidelity" was never measured (the measurement did not
// finish); its label says so rather than claiming anything.
//
// The label is the one line every output of a lossy pack carries (generate,
// /v1/models, /metrics); an exact pack has none.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace strata {

struct PackLossy {
  std::string trunk;    // "" = kept as shipped, else "int8"
  std::string experts;  // "" = kept as shipped, else "q8" | "int4" | "mxfp4"
  bool any() const { return !trunk.empty() || !experts.empty(); }
  // From pack's options ("keep" = kept).
  static PackLossy from_options(const std::string& trunk, const std::string& experts);
};

struct PackFidelity {
  bool skipped = false;
  std::string flag;        // what skipped it ("--skip-fidelity")
  std::string prompt_set;  // which built-in set was measured
  int64_t prompts = 0, positions = 0;
  double top1_agreement = 0, mean_kl = 0, p99_kl = 0, max_kl = 0;
};

nlohmann::json lossy_json(const PackLossy& l);
// Throws strata::Error "<where>: ..." when malformed; null gives an exact pack.
PackLossy lossy_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json fidelity_json(const PackFidelity& f);
PackFidelity fidelity_from_json(const nlohmann::json& j, const std::string& where);

// "approximation: experts re-quantized to int4 (top-1 agreement 0.97, mean KL
// 0.012 vs the source on 8 built-in prompts)"; "" when nothing is lossy.
std::string approximation_label(const PackLossy& lossy, const std::optional<PackFidelity>& fidelity);

}  // namespace strata
