#include "model/expert_heat.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <tuple>
#include <sstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "util/cache_dir.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

void ExpertHeat::merge(const ExpertHeat& other) {
  if (other.counts_.size() != counts_.size()) throw Error("expert heat: layer counts differ");
  for (size_t l = 0; l < counts_.size(); ++l) {
    if (other.counts_[l].size() != counts_[l].size()) throw Error("expert heat: expert counts differ");
    for (size_t e = 0; e < counts_[l].size(); ++e) {
      counts_[l][e] += other.counts_[l][e];
      wrong_[l][e] += other.wrong_[l][e];
    }
  }
  add_guesses(other.guesses_.predicted, other.guesses_.right);
}

namespace {

double sum_of(const std::vector<std::vector<double>>& layers) {
  double t = 0;
  for (const auto& l : layers)
    for (double c : l) t += c;
  return t;
}

}  // namespace

double ExpertHeat::total() const { return sum_of(counts_); }

double ExpertHeat::wrong_total() const { return sum_of(wrong_); }

std::vector<std::pair<int64_t, int64_t>> ExpertHeat::hottest(size_t n) const {
  std::vector<std::pair<int64_t, int64_t>> all;
  for (size_t l = 0; l < counts_.size(); ++l)
    for (size_t e = 0; e < counts_[l].size(); ++e)
      if (counts_[l][e] > 0) all.emplace_back(l, e);
  std::stable_sort(all.begin(), all.end(),
                   [&](const auto& a, const auto& b) { return count(a.first, a.second) > count(b.first, b.second); });
  if (all.size() > n) all.resize(n);
  return all;
}

namespace {

// A heat file's text; nullopt when it cannot be read.
std::optional<std::string> heat_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The counts of a parsed heat file's "layers", checked against the model's
// shape: a mismatch is a strata::Error when `strict`, else an empty heat.
ExpertHeat counts_of(const nlohmann::json& j, const std::filesystem::path& path, int64_t layers, int64_t experts,
                     bool strict) {
  ExpertHeat empty(layers, experts);
  auto reject = [&](const std::string& why) -> ExpertHeat {
    if (strict) throw Error(path.string() + ": " + why);
    return empty;
  };
  ExpertHeat h(layers, experts);
  // One array of counts a layer (empty: none), as "layers" and "wrong" hold them.
  const auto read_layers = [&](const nlohmann::json& ls, const std::string& what, auto add) -> std::optional<std::string> {
    if (!ls.is_array() || static_cast<int64_t>(ls.size()) != layers) return what + "layer count does not match the model";
    for (int64_t l = 0; l < layers; ++l) {
      const auto& row = ls[l];
      if (!row.is_array()) return what + "layer " + std::to_string(l) + " is not an array";
      if (row.empty()) continue;
      if (static_cast<int64_t>(row.size()) != experts)
        return what + "layer " + std::to_string(l) + " has " + std::to_string(row.size()) + " experts, the model " +
               std::to_string(experts);
      for (int64_t e = 0; e < experts; ++e)
        if (!row[e].is_number() || row[e].get<double>() < 0) return what + "counts must be non-negative numbers";
      for (int64_t e = 0; e < experts; ++e) add(l, e, row[e].get<double>());
    }
    return std::nullopt;
  };
  if (auto why = read_layers(j.at("layers"), "", [&](int64_t l, int64_t e, double n) { h.add(l, e, n); }))
    return reject(*why);
  if (j.contains("guesses")) {
    const auto& g = j["guesses"];
    const auto count = [&](const char* key) {
      return g.is_object() && g.contains(key) && g[key].is_number() ? g[key].get<double>() : -1.0;
    };
    const double predicted = count("predicted"), right = count("right");
    // A hint's record that cannot be counts is left out, its counts kept.
    const bool counted = predicted >= 0 && right >= 0 && right <= predicted;
    if (counted)
      h.add_guesses(predicted, right);
    else if (strict)
      throw Error(path.string() + ": \"guesses\" must hold non-negative \"predicted\" and \"right\", right at most predicted");
    // The wrong guesses by expert, as the counts, at most the wrong ones on
    // record (a hint's that cannot be are left out whole: part of them
    // would mislead, as would wrong guesses without their totals).
    if (counted && g.contains("wrong")) {
      std::vector<std::tuple<int64_t, int64_t, double>> wrong;
      double total = 0;
      std::optional<std::string> why = read_layers(g.at("wrong"), "\"guesses\": \"wrong\": ", [&](int64_t l, int64_t e, double n) {
        wrong.emplace_back(l, e, n);
        total += n;
      });
      if (!why && !(total <= predicted - right))
        why = "\"guesses\": \"wrong\" counts more wrong guesses than \"predicted\" less \"right\"";
      if (why && strict) throw Error(path.string() + ": " + *why);
      if (!why)
        for (const auto& [l, e, n] : wrong) h.add_wrong(l, e, n);
    }
  }
  return h;
}

}  // namespace

ExpertHeat ExpertHeat::load(const std::filesystem::path& path, const std::string& model, int64_t layers,
                            int64_t experts, bool strict) {
  ExpertHeat empty(layers, experts);
  const std::optional<std::string> text = heat_text(path);
  if (!text) {
    if (strict) throw Error(path.string() + ": cannot open router trace");
    return empty;
  }
  auto reject = [&](const std::string& why) -> ExpertHeat {
    if (strict) throw Error(path.string() + ": " + why);
    return empty;
  };
  const nlohmann::json j = parse_json_or_discarded(*text);
  if (j.is_discarded() || !j.is_object()) return reject("not a JSON object");
  // (Fields looked up, never assumed: a hostile file's wrong types or
  // missing keys are a rejection, not an exception of the JSON library.)
  const auto field = [&](const char* key) { return j.contains(key) ? j.at(key) : nlohmann::json(); };
  if (field("version") != 1) return reject("unsupported heat version");
  if (!strict && field("model") != model) return empty;
  if (!field("layers").is_array()) return reject("no \"layers\" array");
  return counts_of(j, path, layers, experts, strict);
}

ExpertHeat ExpertHeat::load_given(const std::filesystem::path& path, const std::string& model, int64_t layers,
                                  int64_t experts) {
  std::error_code ec;
  // Missing, or an empty file made for it (mktemp): a fresh start.
  if (!std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0) return ExpertHeat(layers, experts);
  const std::optional<std::string> text = heat_text(path);
  const nlohmann::json j = text ? parse_json_or_discarded(*text) : nlohmann::json(nlohmann::json::value_t::discarded);
  const auto field = [&](const char* key) { return j.is_object() && j.contains(key) ? j.at(key) : nlohmann::json(); };
  if (j.is_discarded() || field("version") != 1 || !field("model").is_string() || !field("layers").is_array())
    throw Error(path.string() + ": not a strata heat file: the run would write this model's heat over it (give "
                "--heat a file of its own, or none)");
  // The heat of the weights that were here before (a model replaced at its
  // path): this one starts without it, as at the default path.
  if (field("model") != model) return ExpertHeat(layers, experts);
  return counts_of(j, path, layers, experts, /*strict=*/true);
}

void ExpertHeat::save(const std::filesystem::path& path, const std::string& model) const {
  nlohmann::json j;
  j["version"] = 1;
  j["model"] = model;
  // One array a layer, empty where every count is naught.
  const auto by_layer = [](const std::vector<std::vector<double>>& layers) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& l : layers) {
      const bool any = std::any_of(l.begin(), l.end(), [](double c) { return c > 0; });
      a.push_back(any ? nlohmann::json(l) : nlohmann::json::array());
    }
    return a;
  };
  j["layers"] = by_layer(counts_);
  if (guesses_.predicted > 0)
    j["guesses"] = {{"predicted", guesses_.predicted}, {"right", guesses_.right}, {"wrong", by_layer(wrong_)}};
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  // A name of this write's own: runs of the same model may end together,
  // also in containers that share the folder (and their process ids).
  const auto tmp = path.string() + "." + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()) + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump() << "\n";
    out.close();  // a full disk may fail only here
    if (!out) {
      std::filesystem::remove(tmp, ec);
      throw Error(tmp + ": cannot write expert heat");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw Error(path.string() + ": cannot write expert heat: " + ec.message());
  }
}

std::filesystem::path default_heat_path(const std::string& identity) {
  return strata_cache_dir() / "heat" / (identity + ".json");
}

}  // namespace strata
