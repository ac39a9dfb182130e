#pragma once
// Speculative decoding's flags, shared by `generate` and `serve`:
//   --draft ngram | mtp | PATH
//                            the drafter (runtime/drafter.h): context n-grams,
//                            the target's own next-token-prediction layer
//                            (its MTP caches in the target's budget), or a
//                            draft model sharing the tokenizer, held in RAM
//                            (loaded before the target, so the target's
//                            --ram budget counts it)
//   --draft-max N            tokens drafted per step at most (the length
//                            adapts below it); 0 turns drafting off
//   --draft-fixed            N every step, where there is room (benchmarks,
//                            tests: drafting that may be slower than none)
// The output is the same with or without a drafter; only speed changes.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/drafter.h"
#include "runtime/loader.h"

namespace strata::cli {

struct DraftFlags {
  std::string draft;  // empty: no drafting
  int draft_max = 8;
  bool fixed = false;  // --draft-fixed
  const CLI::Option* max_given = nullptr;  // --draft-max, to tell a given value from the default
};

void add_draft_flags(CLI::App* cmd, DraftFlags& f);

// A drafter and the draft model it runs, if any.
struct DraftSetup {
  std::unique_ptr<Model> model;
  std::unique_ptr<Drafter> drafter;
};

// Before the target is loaded: loads a draft model (threads as the
// target's), and adds its mapped weights to `target`'s held_bytes so that
// the target's budget counts them. Throws strata::Error for a bad --draft
// or --draft-max.
DraftSetup load_draft(const DraftFlags& f, LoadOptions& target);
// After: makes the drafter (checks a draft model against `target`, or that
// `target` has an MTP layer). Leaves `setup.drafter` null when drafting is off.
void start_drafter(DraftSetup& setup, const DraftFlags& f, Model& target);

}  // namespace strata::cli
