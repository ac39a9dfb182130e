#pragma once
// How often each routed expert has been selected: the cache's frequency
// score, the list of experts worth pinning in RAM, and what `pack --trace`
// uses to place hot experts. Beside it, how often a decode token's guesses
// at its next layer's experts were right, and which experts the wrong ones
// named: what that prefetch reads for nothing, which `strata budget` counts
// (a wrong guess costs a read only where the cache lacks its expert, and
// wrong guesses name colder experts than picks do). Persisted between runs
// as JSON:
//   {"version": 1, "model": "<id>", "layers": [[count, ...], ...],
//    "guesses": {"predicted": n, "right": m, "wrong": [[count, ...], ...]}}
// (one array per layer, empty for dense layers; counts are selections;
// "guesses" absent until a run has guessed; "wrong" absent in files of
// earlier versions).
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace strata {

class ExpertHeat {
 public:
  ExpertHeat() = default;
  ExpertHeat(int64_t layers, int64_t experts)
      : counts_(layers, std::vector<double>(experts, 0.0)), wrong_(layers, std::vector<double>(experts, 0.0)) {}

  int64_t layers() const { return static_cast<int64_t>(counts_.size()); }
  double count(int64_t layer, int64_t expert) const { return counts_[layer][expert]; }
  void add(int64_t layer, int64_t expert, double n = 1) { counts_[layer][expert] += n; }
  // Adds another run's counts (shapes must match; throws strata::Error).
  void merge(const ExpertHeat& other);
  double total() const;
  // One-token steps' guesses at their next MoE layer's experts
  // (Model::prefetch_for): how many experts were guessed, and how many of
  // those that layer's router then picked.
  struct Guesses {
    double predicted = 0, right = 0;
  };
  void add_guesses(double predicted, double right) {
    guesses_.predicted += predicted;
    guesses_.right += right;
  }
  const Guesses& guesses() const { return guesses_; }
  // Of those guesses, the ones the layer's router did not pick, by expert.
  void add_wrong(int64_t layer, int64_t expert, double n = 1) { wrong_[layer][expert] += n; }
  double wrong(int64_t layer, int64_t expert) const { return wrong_[layer][expert]; }
  double wrong_total() const;
  // The `n` hottest (layer, expert) pairs with a count above zero, hottest
  // first; ties by (layer, expert) so the choice is reproducible.
  std::vector<std::pair<int64_t, int64_t>> hottest(size_t n) const;

  // Loads `path`; a missing file gives an empty heat of the given shape. A
  // file for another model or shape is ignored (returns empty) - it is a
  // hint, never a reason to fail - unless `strict` (pack --trace).
  static ExpertHeat load(const std::filesystem::path& path, const std::string& model, int64_t layers,
                         int64_t experts, bool strict = false);
  // A path the user gave (--heat FILE), which the run writes when it ends: a
  // missing or empty file, or another model's heat (the weights that were
  // there before), gives an empty heat; this model's heat must have its
  // shape; anything that is not a strata heat file is a strata::Error (it
  // would be written over).
  static ExpertHeat load_given(const std::filesystem::path& path, const std::string& model, int64_t layers,
                               int64_t experts);
  // Writes atomically (temp file + rename).
  void save(const std::filesystem::path& path, const std::string& model) const;

 private:
  std::vector<std::vector<double>> counts_;
  std::vector<std::vector<double>> wrong_;  // counts_'s shape
  Guesses guesses_;
};

// Where a model's heat lives between runs: <strata_cache_dir()>/heat/
// <identity>.json, the identity of its weights (model/weights_identity.h,
// also the file's "model"): a model moved elsewhere keeps its heat, one
// replaced at the same path starts without.
std::filesystem::path default_heat_path(const std::string& identity);

}  // namespace strata
