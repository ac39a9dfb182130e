#include "cli/draft_flags.h"

#include "util/error.h"

namespace strata::cli {

void add_draft_flags(CLI::App* cmd, DraftFlags& f) {
  cmd->add_option("--draft", f.draft,
                  "Speculative decoding: 'ngram' (continuations of earlier n-grams of the prompt and output), 'mtp' "
                  "(the checkpoint's own next-token-prediction layer, DeepSeek-V3's) or a draft model sharing the "
                  "tokenizer (held in RAM; --ram counts it). Output is unchanged");
  f.max_given = cmd->add_option("--draft-max", f.draft_max, "Tokens drafted per step at most (adapts below it; 0: off)")
                    ->capture_default_str();
  cmd->add_flag("--draft-fixed", f.fixed,
                "Draft --draft-max tokens every step instead of adapting (for benchmarks and tests: it may be "
                "slower than no drafting)");
}

DraftSetup load_draft(const DraftFlags& f, LoadOptions& target) {
  if (f.draft_max < 0 || f.draft_max > 15) throw Error("--draft-max must be in [0, 15]");
  // Said rather than ignored: they shape a drafter that was not asked for.
  if (f.draft.empty() && (f.fixed || (f.max_given && f.max_given->count() > 0)))
    throw Error("--draft-max and --draft-fixed shape a drafter: give --draft ngram, mtp or a draft model");
  DraftSetup s;
  if (f.draft.empty() || f.draft_max == 0) return s;
  target.drafting = true;  // recurrent states are kept from before each drafted step
  if (f.draft == "ngram") return s;
  if (f.draft == "mtp") {
    target.mtp_draft = true;  // its caches are budgeted with the target's
    return s;
  }
  LoadOptions o;
  o.threads = target.threads;
  // The target's context and sequences, so that drafting goes on as far as
  // the target does (past the draft's trained positions its guesses only
  // get worse: the target decides every token).
  o.context = target.context;
  o.allow_long_context = true;
  o.sequences = target.sequences;
  o.show_progress = false;
  o.heat = "none";
  try {
    s.model = load_model(f.draft, o);
  } catch (const Error& e) {
    throw Error(std::string("--draft: ") + e.what());
  }
  if (s.model->streaming()) throw Error("--draft " + f.draft + ": a draft model must fit in RAM (it was to be streamed)");
  target.held_bytes += mapped_weight_bytes(*s.model);
  return s;
}

void start_drafter(DraftSetup& setup, const DraftFlags& f, Model& target) {
  if (f.draft.empty() || f.draft_max == 0) return;
  if (f.draft == "mtp")
    setup.drafter = make_mtp_drafter(target);
  else
    setup.drafter = setup.model ? make_model_drafter(*setup.model, target) : make_ngram_drafter();
}

}  // namespace strata::cli
