#include "runtime/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "model/checkpoint.h"
#include "model/expert_catalog.h"
#include "model/expert_heat.h"
#include "pack/manifest.h"
#include "runtime/streaming_experts.h"
#include "util/error.h"
#include "util/process_memory.h"
#include "util/mapped_file.h"

namespace strata {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int64_t kMinStepRows = 16, kMaxStepRows = 4096;
constexpr uint64_t kMinStepShare = 128 * kMiB;

std::string gib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return b;
}

ModelSetup plan_setup(const ModelConfig& c, const LoadOptions& options) {
  if (options.context < 1) throw Error("the context (--ctx) must be at least 1");
  ModelSetup s;
  s.threads = options.threads;
  s.context = options.context;
  // Rows one step may carry for a sequence: a prompt longer than this is
  // prefilled in chunks (under a budget, fit_step_to_budget() narrows it).
  s.max_batch = options.max_batch > 0 ? options.max_batch : kMaxStepRows;
  return s;
}

// Under a budget, the step's buffers (Model::step_bytes(), exact) get a
// sixteenth of it, and at least kMinStepShare: the widest step within that,
// of kMinStepRows at least. (A wider step reads a prompt's experts fewer
// times; what it takes, the expert cache loses.)
void fit_step_to_budget(Model& model, const LoadOptions& options) {
  if (options.ram_bytes == 0 || options.max_batch > 0) return;
  model.set_max_batch_rows(widest_step_within(model, std::max(kMinStepShare, options.ram_bytes / 16)));
}

// Every routed expert of a pack, as its manifest places them on the drives.
ExpertCatalog pack_catalog(const Model& model, Storage& storage) {
  const ModelConfig& c = model.config();
  const std::filesystem::path& dir = model.dir();
  const Manifest manifest = Manifest::load(dir);
  if (static_cast<int64_t>(manifest.experts.size()) != c.num_layers)
    throw Error((dir / "manifest.json").string() + ": lists " + std::to_string(manifest.experts.size()) +
                " layers, the trunk's config " + std::to_string(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const size_t want = c.layer_is_moe(l) ? static_cast<size_t>(c.n_routed_experts) : 0;
    if (manifest.experts[l].size() != want)
      throw Error((dir / "manifest.json").string() + ": layer " + std::to_string(l) + " lists " +
                  std::to_string(manifest.experts[l].size()) + " experts, the config wants " + std::to_string(want));
  }
  return catalog_from_manifest(manifest, dir, storage);
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
    if (!is_routed_expert_tensor(name)) {
      const TensorView& t = source.get(name);
      // An untied token table is read a row per step, not ahead.
      if (!c.tie_word_embeddings && t.data == model.token_table().data) continue;
      advise_willneed(t.data, t.nbytes);
    }
  return catalog;
}

// The experts of a checkpoint or pack as a streaming provider within the
// budget; `plan` gets the split.
std::unique_ptr<ExpertProvider> make_streaming(Model& model, const ExpertBindFn& bind, const LoadOptions& options,
                                               MemoryPlan& plan) {
  const ModelConfig& c = model.config();
  const bool packed = model.kind() == Checkpoint::Kind::Pack;
  StorageOptions so;
  so.backend = options.io_backend;
  std::unique_ptr<Storage> storage = options.storage ? options.storage(so) : make_storage(so);
  if (!storage) throw Error("internal: the storage factory returned no storage");
  ExpertCatalog catalog = packed ? pack_catalog(model, *storage) : checkpoint_catalog(model, bind, *storage);

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

  // The budget: what stays resident, the KV cache for the context, working
  // buffers, and whatever is left for the expert cache.
  plan.budget = options.ram_bytes;
  plan.trunk = total > streamed ? total - streamed : 0;
  // An untied token table is read a few rows per step, straight from the
  // mapped file, and those pages are let go again (Model::forward()): it is
  // not held, so it is not in the budget. (A checkpoint streamed in place is
  // advised so whole, above; a pack's trunk file is not.)
  const kernels::WeightMatrix& embed = model.token_table();
  const uint64_t table = static_cast<uint64_t>(embed.out) * embed.row_bytes();
  if (plan.trunk >= table && model.read_token_table_by_rows()) plan.trunk -= table;
  // A kept session of a model with recurrent state also holds a copy of the
  // states (its snapshot at the prompt's end, runtime/session.h).
  const uint64_t snapshot = options.keep_session ? model.cache_snapshot_bytes() : 0;
  plan.kv = model.cache_bytes_at_context() + snapshot;
  // The step's buffers, exactly as the model plans them; plan.baseline, the
  // process itself, was measured before the model was built.
  plan.step = model.step_bytes();
  size_t slots = options.cache_slots;
  const uint64_t slot_bytes = std::max<uint64_t>(catalog.max_slot_bytes, kIoAlign);
  const std::filesystem::path& dir = model.dir();
  if (slots == 0 && options.ram_bytes > 0) {
    const uint64_t fixed = plan.trunk + plan.kv + plan.step + plan.baseline;
    const uint64_t min_cache = slot_bytes * static_cast<uint64_t>(2 * c.num_experts_per_tok);
    if (options.ram_bytes < fixed + min_cache)
      throw Error("--ram " + gib(options.ram_bytes) + " is too small for " + dir.string() + ": the trunk takes " +
                  gib(plan.trunk) + ", the KV cache for " + std::to_string(options.context) + " positions " +
                  (snapshot ? "with the session's snapshot of its state " : "") + gib(plan.kv) +
                  ", the step's buffers " + gib(plan.step) + ", the process itself " + gib(plan.baseline) +
                  ", and the expert cache needs at least " +
                  gib(min_cache) + " (two tokens' worth of experts); the least that works is " +
                  gib(fixed + min_cache));
    slots = static_cast<size_t>((options.ram_bytes - fixed) / slot_bytes);
  }
  if (slots == 0) {
    // No budget: every expert may stay once read, but never more than most
    // of the machine's memory (a terabyte model streamed without --ram).
    const uint64_t phys = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t fixed = plan.trunk + plan.kv + plan.step + plan.baseline;
    const uint64_t room = phys * 17 / 20 > fixed ? phys * 17 / 20 - fixed : slot_bytes * 2 * c.num_experts_per_tok;
    slots = static_cast<size_t>(std::max<uint64_t>(room / slot_bytes, 2 * c.num_experts_per_tok));
  }
  slots = std::min<size_t>(slots, static_cast<size_t>(std::max<int64_t>(experts, 1)));
  plan.cache = slots * slot_bytes;

  StreamingOptions opt;
  opt.slots = slots;
  opt.verify = options.verify;
  if (options.heat != "none") {
    // Kept under what the weights are, not where: a replaced model drops
    // its heat, a moved one keeps it (model/weights_identity.h).
    opt.heat_path = options.heat.empty() ? default_heat_path(model.identity()) : std::filesystem::path(options.heat);
    opt.heat_model = model.identity();
    opt.prior = ExpertHeat::load(opt.heat_path, opt.heat_model, c.num_layers, c.n_routed_experts);
  }
  return std::make_unique<StreamingExpertProvider>(c, std::move(catalog), std::move(storage), std::move(opt));
}

}  // namespace

int64_t widest_step_within(const Model& model, uint64_t bytes) {
  const uint64_t one_row = model.step_bytes(1);
  int64_t lo = kMinStepRows, hi = kMaxStepRows;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (model.step_bytes(static_cast<size_t>(mid)) - one_row <= bytes) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

std::unique_ptr<Model> load_model(const std::filesystem::path& path, const LoadOptions& options) {
  // The process as it stands before the model's own memory: what the caller
  // built first (the tokenizer and chat template, which the CLI and the
  // server load before the model) and the runtime itself.
  const uint64_t baseline = resident_anonymous_bytes();
  Checkpoint ck = open_checkpoint(path);
  const ModelSetup setup = plan_setup(ck.config, options);
  auto model = std::make_unique<Model>(std::move(ck), setup);
  fit_step_to_budget(*model, options);
  const bool packed = model->kind() == Checkpoint::Kind::Pack;
  // A pack's experts are not in its trunk: they are only ever streamed.
  const bool streaming = packed || options.stream || options.ram_bytes > 0 || options.cache_slots > 0;
  ExpertBindFn bind;
  if (!packed) bind = expert_binder(model->config(), model->tensors(), model->binder());
  if (!streaming) {
    model->attach_experts(std::make_unique<InMemoryExpertProvider>(model->config(), bind), false, MemoryPlan{});
    return model;
  }
  MemoryPlan plan;
  plan.baseline = baseline;
  auto experts = make_streaming(*model, bind, options, plan);
  // Auto is on: guesses are background reads that only use an idle drive
  // and are cancelled when their layer does not ask for them; measured
  // (docs/PERFORMANCE.md, issue 4) they shorten a cold decode step.
  model->attach_experts(std::move(experts), options.prefetch != LoadOptions::Prefetch::Off, plan);
  return model;
}

}  // namespace strata
