#include "pack/lossy.h"

#include <cstdio>

#include "util/error.h"

namespace strata {

PackLossy PackLossy::from_options(const std::string& trunk, const std::string& experts) {
  PackLossy l;
  if (trunk != "keep") l.trunk = trunk;
  if (experts != "keep") l.experts = experts;
  return l;
}

nlohmann::json lossy_json(const PackLossy& l) {
  nlohmann::json j = nlohmann::json::object();
  if (!l.trunk.empty()) j["trunk"] = l.trunk;
  if (!l.experts.empty()) j["experts"] = l.experts;
  return j;
}

PackLossy lossy_from_json(const nlohmann::json& j, const std::string& where) {
  PackLossy l;
  if (j.is_null()) return l;
  if (!j.is_object()) throw Error(where + ": 'lossy' must be an object");
  auto part = [&](const char* key, std::initializer_list<const char*> allowed) -> std::string {
    if (!j.contains(key)) return "";
    if (j[key].is_string())
      for (const char* a : allowed)
        if (j[key].get<std::string>() == a) return a;
    throw Error(where + ": 'lossy." + key + "' must be one of the re-quantized formats");
  };
  l.trunk = part("trunk", {"int8"});
  l.experts = part("experts", {"q8", "int4", "mxfp4"});
  if (!l.any()) throw Error(where + ": 'lossy' names no re-quantized part");
  return l;
}

nlohmann::json fidelity_json(const PackFidelity& f) {
  if (f.skipped) return {{"skipped", true}, {"flag", f.flag}};
  return {{"prompt_set", f.prompt_set},         {"prompts", f.prompts}, {"positions", f.positions},
          {"top1_agreement", f.top1_agreement}, {"mean_kl", f.mean_kl}, {"p99_kl", f.p99_kl},
          {"max_kl", f.max_kl}};
}

PackFidelity fidelity_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": 'fidelity' must be an object");
  PackFidelity f;
  try {
    if (j.value("skipped", false)) {
      f.skipped = true;
      f.flag = j.value("flag", std::string());
      return f;
    }
    f.prompt_set = j.at("prompt_set").get<std::string>();
    f.prompts = j.at("prompts").get<int64_t>();
    f.positions = j.at("positions").get<int64_t>();
    f.top1_agreement = j.at("top1_agreement").get<double>();
    f.mean_kl = j.at("mean_kl").get<double>();
    f.p99_kl = j.at("p99_kl").get<double>();
    f.max_kl = j.at("max_kl").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed 'fidelity': " + e.what());
  }
  return f;
}

std::string approximation_label(const PackLossy& lossy, const std::optional<PackFidelity>& fidelity) {
  if (!lossy.any()) return "";
  std::string s = "approximation: ";
  if (!lossy.trunk.empty()) s += "trunk re-quantized to " + lossy.trunk;
  if (!lossy.trunk.empty() && !lossy.experts.empty()) s += ", ";
  if (!lossy.experts.empty()) s += "experts re-quantized to " + lossy.experts;
  if (!fidelity) return s + " (fidelity not measured)";
  if (fidelity->skipped) return s + " (fidelity not measured: packed with " + fidelity->flag + ")";
  char b[160];
  std::snprintf(b, sizeof b, " (top-1 agreement %.3f, mean KL %.3g vs the source on %lld built-in prompts)",
                fidelity->top1_agreement, fidelity->mean_kl, static_cast<long long>(fidelity->prompts));
  return s + b;
}

}  // namespace strata
