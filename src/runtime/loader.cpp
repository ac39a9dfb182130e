#include "runtime/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "backend/cpu_backend.h"
#include "model/checkpoint.h"
#include "model/expert_catalog.h"
#include "model/expert_heat.h"
#include "pack/manifest.h"
#include "remote/range_filling_storage.h"
#include "remote/remote_mirror.h"
#include "runtime/streaming_experts.h"
#include "storage/pack_dir.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/page_cache.h"
#include "util/process_memory.h"
#include "util/progress.h"
#include "util/thread_pool.h"

namespace strata {

namespace {

// Copies of a recurrent model's states held beside its caches: a kept
// session's (its state at the prompt's end, runtime/session.h) and, with a
// drafter, each sequence's from before a drafted step. Zero for a model
// without recurrent state.
uint64_t state_snapshot_bytes(const Model& model, const LoadOptions& o) {
  const uint64_t copies = (o.keep_session ? 1u : 0u) + (o.drafting ? static_cast<uint64_t>(o.sequences) : 0u);
  return copies * model.cache_snapshot_bytes();
}

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int64_t kMinStepRows = 16, kMaxStepRows = 4096;
constexpr uint64_t kMinStepShare = 128 * kMiB, kMinPassShare = 64 * kMiB;

std::string gib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return b;
}

constexpr int64_t kDefaultContext = 4096;

}  // namespace

int64_t plan_context(const ModelConfig& c, const LoadOptions& o, const std::filesystem::path& path) {
  if (o.context < 0) throw Error("the context (--ctx) must be at least 1");
  const int64_t trained = c.max_position_embeddings;
  if (o.context == 0) return trained > 0 ? std::min(kDefaultContext, trained) : kDefaultContext;
  if (trained > 0 && o.context > trained && !o.allow_long_context)
    throw Error("--ctx " + std::to_string(o.context) + " is beyond the " + std::to_string(trained) +
                " positions " + path.string() +
                " was trained for (max_position_embeddings); --allow-long-ctx runs it anyway");
  return o.context;
}

namespace {

ModelSetup plan_setup(const ModelConfig& c, const LoadOptions& options, const std::filesystem::path& path) {
  if (options.sequences < 1) throw Error("internal: a model runs at least one sequence");
  ModelSetup s;
  s.threads = options.threads;
  s.device = options.device;
  s.context = plan_context(c, options, path);
  // Rows one step may carry for a sequence: a prompt longer than this is
  // prefilled in chunks (under a budget, make_streaming() narrows it).
  s.max_batch = options.max_batch > 0       ? options.max_batch
                : options.max_batch_cap > 0 ? std::min<int64_t>(options.max_batch_cap, kMaxStepRows)
                                            : kMaxStepRows;
  s.max_pass = options.max_pass;
  return s;
}

// The budget the experts are streamed within, and where it came from.
struct Budget {
  uint64_t ram = 0;         // 0: none (every expert may stay once read)
  uint64_t available = 0;   // with `derived`: the memory available it came from
  bool derived = false;     // from the memory available, not --ram
  std::string why;          // with `derived`: the line that says so, once the budget is known to work
};

}  // namespace

uint64_t process_resident_bytes() {
  const uint64_t all = resident_bytes(), mapped = resident_mapped_file_bytes();
  return all > mapped ? all - mapped : 0;
}

uint64_t budget_from_available(uint64_t baseline, uint64_t available) {
  const uint64_t room = available / 10 * 9;
  return room > UINT64_MAX - baseline ? UINT64_MAX : baseline + room;
}

StorageOptions storage_options(const LoadOptions& options) {
  StorageOptions so;
  so.backend = options.io_backend;
  if (options.io_depth > 0) so.queue_depth = options.io_depth;
  if (options.piece_bytes > 0) so.piece_bytes = options.piece_bytes;
  return so;
}

namespace {

// Whether `need` bytes in all (the process's own baseline included) fit
// in what is available beside that baseline.
bool fits(uint64_t need, uint64_t baseline, uint64_t available) {
  return need <= baseline || need - baseline <= available;
}

// Under a budget, the step's buffers (Model::step_bytes(), exact) get a
// sixteenth of it, and at least kMinStepShare: the widest step within that,
// of kMinStepRows at least. (A wider step reads a prompt's experts fewer
// times; what it takes, the expert cache loses.)
uint64_t step_share(uint64_t ram) { return std::max(kMinStepShare, ram / 16); }
// A pass's residual stream beyond its step's (Model::max_pass_rows) gets a
// thirty-second of the budget, and at least kMinPassShare, out of what the
// expert cache would have had: a prompt that fits the pass reads each
// streamed layer's experts once.
uint64_t pass_share(uint64_t ram) { return std::max(kMinPassShare, ram / 32); }
// A device backend's host staging (Backend::limit_staging) gets an eighth of
// the budget, from 64 MiB up to the 576 MiB it keeps without a budget, and
// room for four of the largest experts, so a submission always has room for
// one.
uint64_t staging_share(uint64_t ram, uint64_t slot_bytes) {
  return std::max(std::clamp<uint64_t>(ram / 8, 64ull << 20, 576ull << 20), 4 * slot_bytes);
}

void fit_step_to_budget(Model& model, const LoadOptions& options, uint64_t ram) {
  if (ram == 0 || options.max_batch > 0) return;
  StepPlan plan = plan_step_within([&](size_t rows, size_t span) { return model.step_bytes(rows, span); },
                                   step_share(ram), pass_share(ram), model.context(), options.max_batch_cap,
                                   options.max_pass);
  // On a GPU the pass's stream lives in its memory, beside the trunk and the
  // expert cache that --vram sized without it: no wider than a step could
  // be before passes (unless --prefill-pass says so).
  if (options.max_pass == 0 && model.backend().name() != "cpu") plan.pass = std::min(plan.pass, kMaxStepRows);
  model.set_max_batch_rows(plan.rows, plan.pass);
}

// Every routed expert of a checkpoint streamed in place, as reads of the
// files its tensors are in.
ExpertCatalog checkpoint_catalog(Model& model, const ExpertBindFn& bind, Storage& storage) {
  const ModelConfig& c = model.config();
  const TensorSource& source = model.tensors();
  ExpertCatalog catalog = catalog_from_bound_experts(c, bind, source, storage);
  // The experts sit between trunk tensors in the same files: fault in only
  // the trunk, so the page cache holds no expert bytes (they are read with
  // O_DIRECT into the cache, within the budget).
  advise_random_all_mapped();
  for (const auto& name : source.names())
    if (!is_streamed_expert_tensor(name, c)) {
      const TensorView& t = source.get(name);
      // An untied token table is read a row per step, not ahead.
      if (!c.tie_word_embeddings && t.data == model.token_table().data) continue;
      advise_willneed(t.data, t.nbytes);
    }
  return catalog;
}

// Whether `backend`'s budget for experts kept for good takes every expert of
// `catalog` (each of its arrays aligned apart: four matrices of up to four
// arrays, 16 · 256 bytes more at most), all of them the decoder layers'
// (MTP layers' experts are not taken whole), a layer's all of one size (a
// layer of mixed shapes is not taken whole).
bool held_on_device(const Backend& backend, const ExpertCatalog& catalog, int64_t decoder_layers) {
  uint64_t bytes = 0;
  for (size_t l = 0; l < catalog.layers.size(); ++l)
    for (const auto& e : catalog.layers[l]) {
      if (static_cast<int64_t>(l) >= decoder_layers || e.payload_bytes != catalog.layers[l][0].payload_bytes)
        return false;
      bytes += e.payload_bytes + 16 * 256;
    }
  return backend.hold_budget() > 0 && bytes > 0 && bytes <= backend.hold_budget();
}

// The experts of a checkpoint or pack as a streaming provider within the
// budget; `plan` gets the split.
std::unique_ptr<ExpertProvider> make_streaming(Model& model, const Manifest* manifest, const ExpertBindFn& bind,
                                               const LoadOptions& options, Budget budget, MemoryPlan& plan,
                                               bool& cache_for_device) {
  const ModelConfig& c = model.config();
  const bool packed = model.kind() == Checkpoint::Kind::Pack;
  const StorageOptions so = storage_options(options);
  std::unique_ptr<Storage> storage = options.storage ? options.storage(so) : make_storage(so);
  if (!storage) throw Error("internal: the storage factory returned no storage");
  // A streaming install: experts not fetched yet are fetched as they are
  // read (one upgraded to full has them all: it is read as any checkpoint).
  const bool mirror = !packed && RemoteMirror::is_mirror(model.dir()) && !RemoteMirror::is_full(model.dir());
  if (mirror)
    storage = std::make_unique<RangeFillingStorage>(std::move(storage), RemoteMirror::open_shared(model.dir()));
  ExpertCatalog catalog = packed ? catalog_from_manifest(*manifest, model.dir(), *storage)
                                 : checkpoint_catalog(model, bind, *storage);

  uint64_t streamed = 0, total = 0;
  int64_t experts = 0;
  for (const auto& layer : catalog.layers)
    for (const auto& e : layer) {
      streamed += e.payload_bytes;
      ++experts;
    }
  streamed -= catalog.resident_bytes;
  for (const auto& name : model.tensors().names()) total += model.tensors().get(name).nbytes;
  if (packed) streamed = 0;  // the trunk holds no experts

  // The budget: what stays resident, the KV caches for the context, working
  // buffers, and whatever is left for the expert cache.
  plan.trunk = total > streamed ? total - streamed : 0;
  // An untied token table is read a few rows per step, straight from the
  // mapped file, and those pages are let go again (Model::forward()): it is
  // not held, so it is not in the budget. (A checkpoint streamed in place is
  // advised so whole, above; a pack's trunk file is not.)
  const kernels::WeightMatrix& embed = model.token_table();
  const uint64_t table = static_cast<uint64_t>(embed.out) * embed.row_bytes();
  if (plan.trunk >= table && model.read_token_table_by_rows()) plan.trunk -= table;
  // Every sequence that may run at once holds a cache at the full context; a
  // kept session of a model with recurrent state also holds a copy of the
  // states (its snapshot at the prompt's end, runtime/session.h).
  const uint64_t snapshot = state_snapshot_bytes(model, options);
  plan.kv = model.cache_bytes_at_context() * static_cast<uint64_t>(options.sequences) + snapshot;
  if (options.mtp_draft) plan.kv += model.mtp_cache_bytes_at_context() * static_cast<uint64_t>(options.sequences);
  // MTP drafting: the hidden states of a step's rows, a prompt pass as wide
  // as the model plans it beside a verification of up to 16 rows per
  // sequence (counted with the KV cache once the budget fitted the pass).
  auto mtp_hidden = [&] {
    return options.mtp_draft ? static_cast<uint64_t>(model.max_pass_rows() + 16 * options.sequences) *
                                   static_cast<uint64_t>(model.config().hidden_size) * sizeof(float)
                             : 0;
  };
  const uint64_t slot_bytes = std::max<uint64_t>(catalog.max_slot_bytes, kIoAlign);
  const uint64_t min_cache = slot_bytes * static_cast<uint64_t>(2 * c.num_experts_per_tok);
  const std::filesystem::path& dir = model.dir();

  // No budget given: every expert may stay once read when the machine has
  // room for all of them; otherwise a budget from the memory available.
  if (budget.ram == 0 && options.cache_slots == 0) {
    const uint64_t available = available_memory_bytes();
    const uint64_t all = plan.trunk + plan.kv + mtp_hidden() + model.step_bytes() + plan.baseline +
                         slot_bytes * static_cast<uint64_t>(experts);
    if (!fits(all, plan.baseline, available)) {
      budget = {budget_from_available(plan.baseline, available), available, true, ""};
      budget.why = dir.string() + ": its experts do not all fit in the " + gib(available) +
                   " of memory available; streaming them within a budget of " + gib(budget.ram) +
                   " (--ram sets another)";
    }
  }
  fit_step_to_budget(model, options, budget.ram);
  plan.kv += mtp_hidden();
  // The step's buffers, exactly as the model plans them; plan.baseline, the
  // process itself, was measured before the model was built.
  plan.step = model.step_bytes();
  // A device's host staging is held beside the expert cache (none on the CPU).
  if (budget.ram > 0) {
    model.backend().limit_staging(staging_share(budget.ram, slot_bytes));
    plan.staging = model.backend().staging_bytes();
  }
  size_t slots = options.cache_slots;
  if (slots == 0 && budget.ram > 0) {
    const uint64_t fixed = plan.trunk + plan.kv + plan.step + plan.staging + plan.baseline;
    if (budget.ram < fixed + min_cache) {
      // The least that works: a device's staging is a share of it, so the
      // least gives that share of itself (the share grows an eighth as fast
      // as the budget: a few rounds settle it).
      uint64_t least = fixed + min_cache;
      if (plan.staging > 0)
        for (int round = 0; round < 64; ++round) {
          const uint64_t next = fixed - plan.staging + min_cache + staging_share(least, slot_bytes);
          if (next <= least) break;
          least = next;
        }
      const std::string parts =
          ": the trunk takes " + gib(plan.trunk) + ", the KV cache for " + std::to_string(model.context()) +
          " positions" +
          (options.sequences > 1 ? " of each of " + std::to_string(options.sequences) + " sequences " : " ") +
          (snapshot ? "with the snapshots of its state (a kept session's, each drafting sequence's) " : "") +
          gib(plan.kv) + ", the step's buffers " + gib(plan.step) +
          (plan.staging ? ", the device's host staging " + gib(plan.staging) : "") + ", the process itself " +
          gib(plan.baseline) +
          ", and the expert cache needs at least " + gib(min_cache) +
          " (two tokens' worth of experts); the least that works is " + gib(least);
      if (budget.derived)
        throw Error(dir.string() + " does not fit in the " + gib(budget.available) + " of memory available" + parts);
      if (!options.raise_ram_to_least)
        throw Error("--ram " + gib(budget.ram) + " is too small for " + dir.string() + parts);
      budget.ram = fixed + min_cache;
    }
    slots = static_cast<size_t>((budget.ram - fixed) / slot_bytes);
  }
  if (budget.derived && options.notice) options.notice(budget.why);
  if (slots == 0) slots = static_cast<size_t>(experts);  // no budget: everything fits
  // Where the backend's own memory takes every expert (a GPU's --vram), each
  // layer is handed to it whole at load (Model::hold_experts_on_device) and
  // the RAM cache only passes each expert on, once: it keeps the least that
  // works, not a copy of the model. (A streaming install is not taken whole:
  // that would download every expert at load.)
  cache_for_device = options.cache_slots == 0 && !mirror && held_on_device(model.backend(), catalog, c.num_layers);
  if (cache_for_device) slots = std::min<size_t>(slots, static_cast<size_t>(min_cache / slot_bytes));
  // A model without routed experts (a dense draft model, say) streams
  // nothing: one idle slot keeps the provider well-formed.
  slots = std::clamp<size_t>(slots, 1, static_cast<size_t>(std::max<int64_t>(experts, 1)));
  plan.budget = budget.ram;
  plan.cache = slots * slot_bytes;

  StreamingOptions opt;
  opt.slots = slots;
  opt.pool = model.backend().host_pool();
  opt.verify = options.verify;
  if (options.heat != "none") {
    // Kept under what the weights are, not where: a replaced model drops
    // its heat, a moved one keeps it (model/weights_identity.h).
    opt.heat_path = options.heat.empty() ? default_heat_path(model.identity()) : std::filesystem::path(options.heat);
    opt.heat_model = model.identity();
    opt.prior = options.heat.empty()
                    ? ExpertHeat::load(opt.heat_path, opt.heat_model, c.num_layers, c.n_routed_experts)
                    : ExpertHeat::load_given(opt.heat_path, opt.heat_model, c.num_layers, c.n_routed_experts);
  }
  return std::make_unique<StreamingExpertProvider>(c, std::move(catalog), std::move(storage), std::move(opt));
}

// Without --ram, --stream or --cache-experts a checkpoint runs from its
// mapped files when it fits in the memory available; when it does not, its
// experts are streamed within a budget derived from that memory.
Budget choose_budget(const Model& model, const LoadOptions& options, uint64_t baseline, bool* streaming) {
  if (options.ram_bytes > 0) {
    const uint64_t available = available_memory_bytes();
    if (options.notice && !fits(options.ram_bytes, baseline, available))
      options.notice("the RAM budget of " + gib(options.ram_bytes) + " is more than the " + gib(available) +
                     " of memory available; the system may swap or end the process");
    return {options.ram_bytes, 0, false, ""};
  }
  if (*streaming) return {};  // make_streaming decides, knowing the experts' slots
  uint64_t need = baseline + model.step_bytes() +
                  model.cache_bytes_at_context() * static_cast<uint64_t>(options.sequences) +
                  state_snapshot_bytes(model, options);
  for (const auto& name : model.tensors().names()) need += model.tensors().get(name).nbytes;
  const uint64_t available = available_memory_bytes();
  if (fits(need, baseline, available)) return {};
  *streaming = true;
  Budget b{budget_from_available(baseline, available), available, true, ""};
  b.why = model.dir().string() + " needs about " + gib(need) + " in RAM and " + gib(available) +
          " is available: streaming its experts from the drive within a budget of " + gib(b.ram) +
          " (--ram sets another)";
  return b;
}

}  // namespace

namespace {

// The largest n in [lo, hi] with extra(n) <= bytes (extra growing with n); lo when none.
int64_t widest_within(const std::function<uint64_t(int64_t n)>& extra, int64_t lo, int64_t hi, uint64_t bytes) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (extra(mid) <= bytes) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace

int64_t widest_step_within(const std::function<uint64_t(size_t rows)>& step_bytes, uint64_t bytes) {
  const uint64_t one_row = step_bytes(1);
  return widest_within([&](int64_t rows) { return step_bytes(static_cast<size_t>(rows)) - one_row; }, kMinStepRows,
                       kMaxStepRows, bytes);
}

int64_t widest_step_within(const Model& model, uint64_t bytes) {
  return widest_step_within([&](size_t rows) { return model.step_bytes(rows); }, bytes);
}

StepPlan plan_step_within(const std::function<uint64_t(size_t rows, size_t span)>& step_bytes, uint64_t share,
                          uint64_t pass_share, int64_t context, int64_t cap, int64_t pass) {
  // The widest step within the step's share (at most `cap`); then the widest
  // pass, up to the context, whose residual stream beyond the step's fits
  // the pass's share (or the one given, up to the context).
  const uint64_t one_row = step_bytes(1, 1);
  StepPlan plan;
  plan.rows = widest_within(
      [&](int64_t rows) { return step_bytes(static_cast<size_t>(rows), static_cast<size_t>(rows)) - one_row; },
      kMinStepRows, kMaxStepRows, share);
  if (cap > 0) plan.rows = std::min(plan.rows, cap);
  const size_t rows = static_cast<size_t>(plan.rows);
  const uint64_t step = step_bytes(rows, rows);
  plan.pass = pass > 0 ? std::min(pass, std::max<int64_t>(context, 1))
                       : widest_within(
                             [&](int64_t p) {
                               return step_bytes(rows, static_cast<size_t>(std::max(p, plan.rows))) - step;
                             },
                             plan.rows, std::max(plan.rows, context), pass_share);
  plan.pass = std::max(plan.pass, plan.rows);
  return plan;
}

PlannedStep planned_cpu_step(const ModelConfig& c, int64_t context, uint64_t ram, int threads, int64_t cap,
                             int64_t pass) {
  const size_t pool = static_cast<size_t>(threads > 0 ? threads : default_thread_count());
  auto bytes = [&](size_t rows, size_t span) {
    const StepSizes z = plan_step_sizes(c, rows, /*held=*/false, span);
    return StepState::bytes(z) + CpuBackend::scratch_bytes_for(plan_step_limits(c, z, context), pool);
  };
  const StepPlan plan = plan_step_within(bytes, step_share(ram), pass_share(ram), context, cap, pass);
  return PlannedStep{plan.rows, plan.pass, bytes(static_cast<size_t>(plan.rows), static_cast<size_t>(plan.pass))};
}

std::unique_ptr<Model> open_model(const std::filesystem::path& path, const LoadOptions& options) {
  // The process as it stands before the model's own memory: what the caller
  // built first (the tokenizer and chat template, which the CLI and the
  // server load before the model) and the runtime itself.
  const uint64_t baseline = process_resident_bytes() + options.held_bytes;
  // A streaming install loads once its trunk is all there (before anything
  // reads it).
  if (RemoteMirror::is_mirror(path) && !std::filesystem::exists(path / kPackManifest) && !RemoteMirror::is_complete(path))
    throw Error(path.string() + " is a streaming install that did not finish (its trunk is not all there): "
                "run the same strata pull --streaming again");
  Checkpoint ck = open_checkpoint(path);
  if (options.notice)
    for (const std::string& note : ck.notes) options.notice(note);
  const ModelSetup setup = plan_setup(ck.config, options, path);
  auto model = std::make_unique<Model>(std::move(ck), setup);
  if (options.notice && !model->device_notice().empty()) options.notice(model->device_notice());
  const bool packed = model->kind() == Checkpoint::Kind::Pack;
  std::optional<Manifest> manifest;
  if (packed) {
    manifest = Manifest::load(model->dir());
    manifest->check_against(model->config(), (model->dir() / "manifest.json").string());
    model->set_approximation(manifest->approximation());
  }
  // A pack's experts are not in its trunk: they are only ever streamed.
  // A streaming install's experts are only ever streamed: most of their
  // bytes are not on the drive yet (remote/remote_mirror.h).
  const bool mirror = !packed && RemoteMirror::is_mirror(model->dir()) && !RemoteMirror::is_full(model->dir());
  bool streaming = packed || mirror || options.stream || options.ram_bytes > 0 || options.cache_slots > 0;
  const Budget budget = choose_budget(*model, options, baseline, &streaming);
  ExpertBindFn bind;
  if (!packed) bind = expert_binder(model->config(), model->tensors(), model->binder());
  if (!streaming) {
    model->attach_experts(std::make_unique<InMemoryExpertProvider>(model->config(), bind), false, MemoryPlan{});
    return model;
  }
  MemoryPlan plan;
  plan.baseline = baseline;
  bool cache_for_device = false;
  auto experts = make_streaming(*model, manifest ? &*manifest : nullptr, bind, options, budget, plan, cache_for_device);
  // Auto is on: guesses are background reads that only use an idle drive
  // and are cancelled when their layer does not ask for them; measured
  // (docs/PERFORMANCE.md, issue 4) they shorten a cold decode step.
  // A streaming install guesses too: a guessed expert that is not on the
  // drive yet is fetched ahead of its layer (and stays on the drive).
  model->attach_experts(std::move(experts), options.prefetch != LoadOptions::Prefetch::Off, plan);
  // The cache was made small for a device that then did not take every
  // layer (experts of mixed shapes, a budget the device lowered): the rest
  // stream through it, every step reading again.
  if (cache_for_device && !model->experts_held_on_device() && options.notice)
    options.notice(model->dir().string() + ": the GPU did not take every layer of experts as planned; the others " +
                   "stream through a RAM cache of " + gib(plan.cache) + " (--cache-experts sets a larger one)");
  return model;
}

namespace {
// The mapped ranges warm_model reads.
std::vector<FileRange> mapped_ranges(const Model& model) {
  std::vector<FileRange> ranges;
  const TensorSource& source = model.tensors();
  for (const auto& name : source.names()) {
    // Read into the cache when routed to (a pack made before MTP experts
    // streamed holds those in its trunk: they are warmed with it).
    if (const auto layer = routed_expert_layer(name); layer && model.streams_experts_of(*layer)) continue;
    const TensorView& t = source.get(name);
    if (model.token_table_by_rows() && t.data == model.token_table().data) continue;  // a row per step
    const auto at = locate_mapped(t.data);
    if (!at) continue;  // converted when read: in memory already
    ranges.push_back({at->path, at->offset, t.nbytes});
  }
  return ranges;
}
}  // namespace

void warm_model(Model& model, bool show_progress) {
  std::vector<FileRange> ranges = mapped_ranges(model);
  Progress bar("load", covered_bytes(ranges), show_progress);
  read_into_page_cache(std::move(ranges), [&](uint64_t n) { bar.add(n); });
  bar.finish();
  model.preload_head_and_table();
}

uint64_t mapped_weight_bytes(const Model& model) { return covered_bytes(mapped_ranges(model)); }

std::unique_ptr<Model> load_model(const std::filesystem::path& path, const LoadOptions& options) {
  auto model = open_model(path, options);
  warm_model(*model, options.show_progress);
  return model;
}

}  // namespace strata
