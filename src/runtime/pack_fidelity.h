#pragma once
// How close a lossy pack stayed to its source, measured once when it is
// packed and kept in its manifest (pack/lossy.h), so every later output of
// the pack can say what it is without measuring again.
//
// The prompts are built in and need no tokenizer: fixed token-id sequences
// derived from the vocabulary size alone, so the same model always gets the
// same set and `strata compare SOURCE PACK` (without --prompts) reproduces
// the manifest's figures exactly (compare_models on the same set).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pack/lossy.h"

namespace strata {

// Named in the manifest: a change to the set below must change the name.
inline constexpr const char* kBuiltinPromptSet = "builtin-v1";

// 8 sequences of 16 token ids in [0, vocab_size), shortened to fit
// max_positions (0 = no limit); each at least two tokens.
std::vector<std::vector<int32_t>> builtin_fidelity_prompts(int64_t vocab_size, int64_t max_positions = 0);

struct FidelityOptions {
  int threads = 0;              // 0: all cores
  bool skip = false;            // record {"skipped": true, "flag": skip_flag} instead
  std::string skip_flag = "--skip-fidelity";
  bool show_progress = false;   // the loads' and the prompts' bars on stderr
};

// For a lossy pack at `pack` (made by pack_model from `source`): measures the
// built-in prompts on both and records the figures in its manifest (written
// atomically), or records that the measurement was skipped. A measurement
// already recorded is kept, and one skipped before is made now unless
// skipped again. Returns the manifest's fidelity; nullopt for an exact pack,
// which is left as it is. Throws strata::Error naming the model that failed.
std::optional<PackFidelity> record_pack_fidelity(const std::filesystem::path& source,
                                                 const std::filesystem::path& pack, const FidelityOptions& options);

}  // namespace strata
