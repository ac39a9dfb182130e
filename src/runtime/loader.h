#pragma once
// Opening a model to run: the one place that decides where routed experts
// come from and how the RAM budget is split.
//
//   load_model(path, options)
//     open_checkpoint(path)              HF directory, GGUF file or pack
//     Model(checkpoint, setup)           trunk bound: token table, norm, head
//     in RAM:    InMemoryExpertProvider  experts served from the mapped files
//     streamed:  storage (options.storage, or make_storage), the catalog of
//                every expert's bytes (pack manifest, or the checkpoint's
//                tensor locations), the budget split, the heat of earlier
//                runs -> StreamingExpertProvider
//     model.attach_experts(provider)     layers bound against it
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
  // Read routed experts from the drives into a RAM cache instead of serving
  // them from the mapped checkpoint. Implied by ram_bytes and by packed models.
  bool stream = false;
  // The whole process's budget (trunk + KV + buffers + expert cache); 0 = none.
  uint64_t ram_bytes = 0;
  // Cache size in experts, overriding what the budget allows (tests, tuning);
  // 0 = from the budget, or every expert when there is no budget.
  size_t cache_slots = 0;
  int64_t context = 4096;  // positions a sequence may reach (--ctx); the KV cache is budgeted for it
  int64_t max_batch = 0;   // rows of one sequence per step (prefill chunk); 0 = from the budget
  enum class Prefetch { Auto, On, Off } prefetch = Prefetch::Auto;
  // Expert checksums (packed models), see ExpertVerify.
  using Verify = ExpertVerify;
  Verify verify = Verify::First;
  std::string io_backend;  // "" = $STRATA_IO or io_uring, "pread"
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
};

// The widest step (rows, 16 to 4096) whose buffers (Model::step_bytes()),
// beyond what a one-row step needs, fit in `bytes`; 16 when none does. Under
// a budget the loader gives the step a sixteenth of it, 128 MiB at least.
int64_t widest_step_within(const Model& model, uint64_t bytes);

// Opens the model at `path` (HF directory, GGUF file or pack) ready to run.
// Throws strata::Error naming the path and the problem.
std::unique_ptr<Model> load_model(const std::filesystem::path& path, const LoadOptions& options = {});

}  // namespace strata
