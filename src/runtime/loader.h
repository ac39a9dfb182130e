#pragma once
// Opening a model to run: the one place that decides where routed experts
// come from and how the RAM budget is split.
//
//   load_model(path, options) = open_model + warm_model
//   open_model(path, options)            everything bad input can fail, cheaply
//     open_checkpoint(path)              HF directory, GGUF file or pack
//     the context                        --ctx, checked against the model's
//                                        max_position_embeddings
//     Model(checkpoint, setup)           trunk bound: token table, norm, head
//     in RAM:    InMemoryExpertProvider  experts served from the mapped files
//     streamed:  storage (options.storage, or make_storage), the catalog of
//                every expert's bytes (pack manifest, or the checkpoint's
//                tensor locations), the budget split, the heat of earlier
//                runs -> StreamingExpertProvider
//     model.attach_experts(provider)     layers bound against it
//   warm_model(model)                    the weights the plan holds read into
//                                        the page cache (a "load" bar); a
//                                        device's copies of head and table
//
// Memory: with a budget (--ram) the process keeps within it. Without one, a
// model that would not fit in the memory the machine has available
// (util/process_memory.h) is streamed within a budget derived from that
// memory, and options.notice says so: nothing starts loading what the
// machine cannot hold.
//
// The storage is handed in, RocksDB-style: tests pass a factory that wraps
// the real backend in FaultInjectingStorage and run whole models on it.
// Which provider serves an expert changes timing only, never bits.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "model/expert_provider.h"
#include "model/model.h"
#include "storage/storage.h"

namespace strata {

// Makes the Storage a streamed model reads its experts through.
using StorageFactory = std::function<std::unique_ptr<Storage>(const StorageOptions&)>;

struct LoadOptions {
  LoadOptions() = default;
  explicit LoadOptions(int worker_threads) : threads(worker_threads) {}
  int threads = 0;  // 0: all hardware threads
  ComputeDevice device;  // --device
  // Read routed experts from the drives into a RAM cache instead of serving
  // them from the mapped checkpoint. Implied by ram_bytes and by packed models.
  bool stream = false;
  // The whole process's budget (trunk + KV + buffers + expert cache); 0 = none
  // (then the memory available decides, see above).
  uint64_t ram_bytes = 0;
  // A ram_bytes below the least that works is raised to it instead of
  // refused (the demo's default; MemoryPlan::budget says what was used).
  bool raise_ram_to_least = false;
  // Cache size in experts, overriding what the budget allows (tests, tuning);
  // 0 = from the budget, or every expert when there is no budget.
  size_t cache_slots = 0;
  // Positions a sequence may reach (--ctx); the KV cache is budgeted for it.
  // 0: 4096, or the model's max_position_embeddings when that is smaller.
  // Beyond max_position_embeddings only with allow_long_context.
  int64_t context = 0;
  bool allow_long_context = false;
  // Sequences that run at once (serve --max-running): each one's KV cache at
  // the full context is in the budget.
  int sequences = 1;
  int64_t max_batch = 0;   // rows of one sequence per step (prefill chunk); 0 = from the budget
  // Rows of one pass (Model::max_pass_rows(): a prompt this long reads a
  // streamed layer's experts once); 0 = from the budget, or one step's
  // without a budget or with max_batch.
  int64_t max_pass = 0;
  // A tuned profile's widest step (runtime/tune_profile.h): the step is the
  // budget's (or the default), at most this; 0 = no cap.
  int64_t max_batch_cap = 0;
  enum class Prefetch { Auto, On, Off } prefetch = Prefetch::Auto;
  // Expert checksums (packed models), see ExpertVerify.
  using Verify = ExpertVerify;
  Verify verify = Verify::First;
  std::string io_backend;  // "" = $STRATA_IO or io_uring, "pread"
  unsigned io_depth = 0;   // pieces in flight per drive (StorageOptions::queue_depth); 0 = its default
  uint64_t piece_bytes = 0;  // StorageOptions::piece_bytes; 0 = its default
  // The tuned profile these options took values from (its path), for the
  // stats; "" = none.
  std::string profile;
  // Where streamed experts are read through; empty = make_storage (the
  // io_backend above picks io_uring or pread).
  StorageFactory storage;
  // Expert heat between runs: "" = the default place (see expert_heat.h),
  // "none" = neither read nor written.
  std::string heat;
  // A session is kept (generate --session): for a model with recurrent state
  // its snapshot at the prompt's end (runtime/session.h) is budgeted with
  // the KV cache.
  bool keep_session = false;
  // A decision the user should hear of (streaming chosen because the model
  // does not fit): one line, without a prefix. Not called when unset.
  std::function<void(const std::string&)> notice;
  // warm_model() draws a "load" progress bar on stderr.
  bool show_progress = false;
  // Bytes of mapped files the process holds beside this model (a draft
  // model's weights: mapped_weight_bytes()), counted in the budget's
  // baseline with the process's own memory.
  uint64_t held_bytes = 0;
  // Drafting with the model's own next-token-prediction layer (--draft mtp):
  // each sequence's MTP cache at the full context, and the hidden states of
  // a step's rows handed to it, are budgeted with the KV cache. (The layer's
  // weights, its routed experts too, are in the trunk's bytes already.)
  bool mtp_draft = false;
  // Any drafter: a sequence's drafted step may be rolled back, so a model
  // with recurrent state keeps each sequence's states from before the step
  // (runtime/scheduler.cpp): one snapshot per sequence, budgeted with the KV
  // cache.
  bool drafting = false;
};

// The process's own memory, a budget's baseline: its resident set (the
// heap, its code's and libraries' pages) less the pages of checkpoints it
// maps, which count as weights where they are (a draft model's, a model
// compared with another). Without --ram the budget is this and what
// budget_from_available() adds; the model's room is the same either way.
uint64_t process_resident_bytes();

// Without --ram, for a model that does not fit: what the machine can give
// beside the process's `baseline`, less a tenth for everything else (the
// page cache of the files being read, other processes' growth).
uint64_t budget_from_available(uint64_t baseline, uint64_t available);

// The context a model loads with: 4096 or the model's trained length when
// that is shorter; a longer one only when asked for explicitly (positions
// past max_position_embeddings were never trained, and RoPE scaling tables
// end there). Throws strata::Error naming `path` for a refused --ctx.
int64_t plan_context(const ModelConfig& c, const LoadOptions& o, const std::filesystem::path& path);

// The widest step (rows, 16 to 4096) whose buffers (Model::step_bytes()),
// beyond what a one-row step needs, fit in `bytes`; 16 when none does. Under
// a budget the loader gives the step a sixteenth of it, 128 MiB at least.
int64_t widest_step_within(const Model& model, uint64_t bytes);
// The same over any step's bytes by rows.
int64_t widest_step_within(const std::function<uint64_t(size_t rows)>& step_bytes, uint64_t bytes);

// The step and the pass within a budget's shares (step_bytes(rows, span):
// Model::step_bytes): the step gets the widest rows (16 to 4096, at most
// `cap` when not 0) whose buffers, beyond a one-row step's, fit `share`
// (the loader's sixteenth of the budget); the pass spans the context where
// its residual stream (and banked blocks) beyond the step's fits
// `pass_share` (a thirty-second), else it is the widest that does (a prompt
// longer than the pass reads a streamed layer's experts once a pass); the
// pass is at least the step. `pass` (--prefill-pass; 0: none) is the pass's
// rows instead, up to the context.
struct StepPlan {
  int64_t rows = 0, pass = 0;
};
StepPlan plan_step_within(const std::function<uint64_t(size_t rows, size_t span)>& step_bytes, uint64_t share,
                          uint64_t pass_share, int64_t context, int64_t cap, int64_t pass = 0);

// The step a model of config `c` at `context` positions plans on the CPU
// with `threads` threads (0: the default count) under a budget of `ram`
// bytes, as the loader fits it (its rows at most `cap`, a tuned profile's
// max_batch_cap; 0: none; its pass `pass` rows where given, --prefill-pass):
// its rows and its buffers' bytes (StepState and the CPU backend's scratch).
// `strata budget` counts it without building the model.
struct PlannedStep {
  int64_t rows = 0, pass = 0;
  uint64_t bytes = 0;
};
PlannedStep planned_cpu_step(const ModelConfig& c, int64_t context, uint64_t ram, int threads, int64_t cap = 0,
                             int64_t pass = 0);

// The storage a streamed model is read through under `options`: its backend,
// reads in flight and piece size where given, else the storage's defaults
// (what `strata budget` and `strata bench` rate a drive at too).
StorageOptions storage_options(const LoadOptions& options);

// Opens the model at `path` (HF directory, GGUF file or pack) ready to run:
// open_model, then warm_model. Throws strata::Error naming the path and the
// problem.
std::unique_ptr<Model> load_model(const std::filesystem::path& path, const LoadOptions& options = {});

// Every check and decision of loading (checkpoint, config, context, budget,
// layers bound), reading no more than binding needs: a bad model fails here
// (`strata serve` calls it before it listens). The model runs as it is;
// warm_model only saves the first steps their page faults.
std::unique_ptr<Model> open_model(const std::filesystem::path& path, const LoadOptions& options = {});

// Reads the weights the model holds (the trunk; every weight when experts
// are not streamed; not an untied token table read by rows) into the page
// cache, with a progress bar when `show_progress`, and makes a device's
// copies of the output head and the token table (Model::preload_head_and_table).
// Throws strata::Error on a read error.
void warm_model(Model& model, bool show_progress);

// Bytes of the weights `model` reads from mapped files (what warm_model
// reads in; a converted weight is in the process's own memory instead).
uint64_t mapped_weight_bytes(const Model& model);

}  // namespace strata
