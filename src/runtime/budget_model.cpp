#include "runtime/budget_model.h"

#include <stdlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "backend/host_kv_cache.h"
#include "formats/dtype.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/tensor_names.h"
#include "model/weights_identity.h"
#include "pack/manifest.h"
#include "pack/remote_headers.h"
#include "runtime/attention_timer.h"
#include "runtime/loader.h"
#include "runtime/expert_step_timer.h"
#include "runtime/product_timer.h"
#include "runtime/sampler.h"
#include "storage/aligned_buffer.h"
#include "storage/checksum.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/process_memory.h"
#include "util/thread_pool.h"

namespace strata {

namespace fs = std::filesystem;

uint64_t expert_read_bytes(const BudgetModel& model, const LoadOptions& load) {
  const uint64_t bytes = model.shape.expert_bytes;
  const uint64_t span = model.kind == "pack"   ? align_up(bytes)
                        : model.kind == "gguf" ? align_up(bytes / std::max<uint64_t>(1, model.expert_matrices)) + kIoAlign
                                               : align_up(bytes) + kIoAlign;
  return piece_length(span, storage_options(load).piece_bytes);
}

uint64_t budget_ram_bytes(std::optional<uint64_t> ram_bytes) {
  if (ram_bytes) return *ram_bytes;
  const uint64_t available = available_memory_bytes();
  if (available == UINT64_MAX) throw Error("the memory available cannot be read on this machine: give --ram");
  return budget_from_available(process_resident_bytes(), available);
}

PlannedStep planned_step(const BudgetModel& model, uint64_t ram_bytes, int threads, int64_t cap, int64_t pass) {
  return planned_cpu_step(model.config, model.context, ram_bytes, threads, cap, pass);
}

uint64_t expert_cache_bytes(const BudgetModel& model, uint64_t ram_bytes, uint64_t process_bytes, int threads,
                            int64_t cap) {
  const uint64_t held =
      model.shape.trunk_bytes + model.kv_bytes + planned_step(model, ram_bytes, threads, cap).bytes + process_bytes;
  const uint64_t experts = model.shape.total_bytes - model.shape.trunk_bytes - model.token_table_bytes;
  return ram_bytes > held ? std::min(ram_bytes - held, experts) : 0;
}

namespace {

// A matrix's scales beside it (FP8's weight_scale_inv, MXFP4's _scales,
// int4's weight_scale): read with the product, not a product of their own.
bool is_scale_tensor(const std::string& name) { return name.find("scale") != std::string::npos; }

}  // namespace

namespace {

// A folder of its own under the temporary directory, removed with the object.
class TempFolder {
 public:
  TempFolder() {
    std::string name = (fs::temp_directory_path() / "strata-budget-XXXXXX").string();
    if (!::mkdtemp(name.data())) throw Error("cannot make a temporary folder: " + std::string(std::strerror(errno)));
    path_ = name;
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

BudgetModel read_local_budget_model(const fs::path& path, const LoadOptions& options);

}  // namespace

BudgetModel read_budget_model(const fs::path& path, const LoadOptions& options) {
  return read_local_budget_model(path, options);
}

BudgetModel read_remote_budget_model(const std::string& source, const LoadOptions& options) {
  const TempFolder headers;
  const RemoteHeaders fetched = fetch_remote_headers(source, headers.path());
  BudgetModel b;
  try {
    b = read_local_budget_model(fetched.model, options);
  } catch (const Error& e) {  // named by the source, not the temporary copy
    throw Error(renamed_in_message(e.what(), fetched.model.string(), url_for_messages(source)));
  }
  b.remote = source;
  b.remote_commit = fetched.commit;
  b.identity.clear();
  b.expert_files.clear();
  b.fetched_bytes = fetched.fetched_bytes;
  return b;
}

namespace {

BudgetModel read_local_budget_model(const fs::path& path, const LoadOptions& options) {
  std::optional<Manifest> manifest;
  fs::path trunk = path;
  if (fs::is_directory(path) && fs::exists(path / "manifest.json")) {
    manifest = Manifest::load(path);
    trunk = path / manifest->trunk;
  }
  // A pack's trunk is opened as the checkpoint it is (no checksum pass over
  // it: nothing of it is read but headers).
  Checkpoint ck = open_checkpoint(trunk);
  if (manifest) {  // the identity the loader gives the pack (its heat is kept under it)
    ck.kind = Checkpoint::Kind::Pack;
    ck.path = path;
    ck.identity = weights_identity(ck);
  }
  const ModelConfig& c = ck.config;
  BudgetModel b;
  b.config = c;
  b.kind = manifest ? "pack" : ck.kind == Checkpoint::Kind::Gguf ? "gguf" : "hf";
  b.identity = ck.identity;
  if (manifest) manifest->check_against(c, path.string());

  uint64_t decoder_experts = 0, other_experts = 0;
  std::map<std::string, uint64_t> files;  // expert bytes by file
  size_t largest = 0;  // the experts' format: their largest tensor's (not a bias or scales)
  size_t largest_trunk = 0;  // the trunk's: its largest matrix's (the token table aside when it is untied)
  const std::string embed = tn(Naming::Hf, TensorKind::TokenEmbd, "weight");
  const std::string head = tn(Naming::Hf, TensorKind::Output, "weight");
  for (const std::string& name : ck.source->names()) {
    const TensorView& t = ck.source->get(name);
    if (is_streamed_expert_tensor(name, c)) {
      (routed_expert_layer(name).value_or(0) < c.num_layers ? decoder_experts : other_experts) += t.nbytes;
      if (t.nbytes > largest) {
        largest = t.nbytes;
        b.expert_dtype = dtype_name(t.dtype);
      }
      if (!t.file.empty()) files[t.file] += t.nbytes;
      if (name.find("gate_up") != std::string::npos) b.expert_matrices = 2;
    } else {
      b.shape.trunk_bytes += t.nbytes;
      if (name == embed && !c.tie_word_embeddings) {
        b.token_table_bytes = t.nbytes;
      } else if (t.shape.size() >= 2 && !is_scale_tensor(name)) {
        ++b.trunk_matrices;
        if (t.nbytes > largest_trunk) {
          largest_trunk = t.nbytes;
          b.trunk_dtype = dtype_name(t.dtype);
        }
      }
      if (name == (c.tie_word_embeddings ? embed : head)) b.head_bytes = t.nbytes;
      const std::optional<ParsedName> parsed = parse_tensor_name(name, Naming::Hf);
      if (parsed && parsed->suffix == ".weight" && parsed->layer >= 0 && parsed->layer < c.num_layers &&
          tensor_name(parsed->kind).role == TensorRole::Router)
        b.router_bytes += t.nbytes;
    }
  }
  if (manifest) {
    for (size_t l = 0; l < manifest->experts.size(); ++l)
      for (const PackedExpert& e : manifest->experts[l])
        (static_cast<int64_t>(l) < c.num_layers ? decoder_experts : other_experts) += e.length;
    if (!manifest->layouts.empty()) {
      const ExpertWeights& w = manifest->layouts.front();
      b.expert_dtype = dtype_name((w.gate_up.valid() ? w.gate_up : w.gate).dtype);
      b.expert_matrices = w.gate_up.valid() ? 2 : 3;
    }
    files.clear();
    for (uint32_t d = 0; d < manifest->drives.size(); ++d) {
      check_drive_file(*manifest, path, d);  // as a run would: no prediction for a pack that cannot run
      files[manifest->drive_file(path, d).string()] = 0;
    }
  }
  std::vector<std::pair<uint64_t, fs::path>> by_size;
  for (const auto& [file, bytes] : files) {
    std::error_code ec;
    const fs::path f = fs::absolute(file);
    const auto size = fs::file_size(f, ec);
    by_size.emplace_back(ec ? bytes : size, f);
  }
  std::sort(by_size.begin(), by_size.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (const auto& [_, f] : by_size) b.expert_files.push_back(f);
  for (int64_t l = 0; l < c.num_layers; ++l) b.shape.moe_layers += c.layer_is_moe(l) ? 1 : 0;
  b.shape.experts = c.n_routed_experts;
  b.shape.experts_per_token = c.num_experts_per_tok;
  if (b.shape.moe_layers == 0 || b.shape.experts <= 0 || decoder_experts == 0)
    throw Error(path.string() + ": has no routed experts to stream (a dense model runs in RAM or not at all)");
  b.shape.expert_bytes = decoder_experts / static_cast<uint64_t>(b.shape.moe_layers * b.shape.experts);
  b.shape.total_bytes = b.shape.trunk_bytes + decoder_experts + other_experts;
  // An untied token table is read a row a token from the mapped file, and
  // the loader leaves it out of the budget (Model::read_token_table_by_rows).
  b.shape.trunk_bytes -= b.token_table_bytes;

  b.context = plan_context(c, options, path);
  b.kv_bytes = HostKvCache::bytes_at(cache_shape_of(c, b.context, 4096)) * static_cast<uint64_t>(options.sequences);
  return b;
}

// One pick of a token from a vocabulary's logits, as a run samples it
// (runtime/sampler.h), the median of a few: the logits spread like a
// model's, so that the Gumbel bound prunes as it does in a run.
double sample_seconds(int64_t vocab, float temperature, double seconds) {
  if (vocab <= 0) return 0;
  std::vector<float> logits(static_cast<size_t>(vocab));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (float& l : logits) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    l = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0) * 8.0f - 4.0f;
  }
  SamplingParams sampling;
  sampling.temperature = temperature;
  uint64_t index = 0;
  volatile int32_t sink = 0;
  return median_run_seconds([&] { sink = pick_token(logits, sampling, index++); }, seconds);
}

// xxh3 over an expert-sized buffer, seconds a byte (storage/checksum.h).
double hash_seconds_per_byte(double seconds) {
  std::vector<uint8_t> blob(4u << 20);
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(i * 131u + (i >> 9));
  volatile uint64_t sink = 0;
  return median_run_seconds([&] { sink = xxh3_64(blob.data(), blob.size()); }, seconds) /
         static_cast<double>(blob.size());
}

}  // namespace

const char* timed_format(const std::string& expert_dtype) {
  return expert_dtype == "MXFP4" || expert_dtype == "U8" ? "MXFP4" : "Q8_0";
}

BudgetCompute measure_compute(const BudgetModel& model, int threads, int64_t prompt_tokens, int64_t step_rows,
                              float temperature, double seconds) {
  BudgetCompute r;
  r.timed_as = timed_format(model.expert_dtype);
  r.trunk_timed_as = timed_format(model.trunk_dtype);
  const bool experts_mxfp4 = r.timed_as == std::string("MXFP4"), trunk_mxfp4 = r.trunk_timed_as == std::string("MXFP4");
  ThreadPool pool(threads > 0 ? threads : default_thread_count());
  const BudgetShape& s = model.shape;
  const size_t trunk_rows = 64;
  const int64_t step = step_rows > 0 ? std::min(std::max<int64_t>(prompt_tokens, 1), step_rows)
                                     : std::max<int64_t>(prompt_tokens, 1);
  const size_t expert_rows = static_cast<size_t>(
      std::clamp<int64_t>(step * s.experts_per_token / std::max<int64_t>(s.experts, 1), 1, 64));
  // The rate of `rows`-row products in a format, weights from memory.
  auto rate = [&](const ProductTimer& t, size_t rows) {
    return static_cast<double>(t.matrix_bytes()) * static_cast<double>(rows) / t.seconds(rows, pool, seconds / 4) / 1e9;
  };
  // A one-row rate, which decides a decode token's compute, is the median
  // of three windows, with the other row counts' timings between them
  // (`first`, `second`: a trunk timed in its own format has one): one window
  // of a busy moment read half the rate on the 2-core machine
  // (docs/PERFORMANCE.md, "Session 43").
  auto one_row_rate = [&](const ProductTimer& t, const std::function<void()>& first,
                          const std::function<void()>& second) {
    std::array<double, 3> rates{};
    rates[0] = rate(t, 1);
    first();
    rates[1] = rate(t, 1);
    second();
    rates[2] = rate(t, 1);
    std::sort(rates.begin(), rates.end());
    return rates[1];
  };
  double expert_gbps = 0;
  const bool one_format = trunk_mxfp4 == experts_mxfp4;
  {
    const ProductTimer timer(experts_mxfp4);
    r.decode_gbps = one_row_rate(
        timer, [&] { expert_gbps = rate(timer, expert_rows); },
        [&] {
          if (one_format) r.prefill_gbps = rate(timer, trunk_rows);
        });
    if (one_format) r.trunk_decode_gbps = r.decode_gbps;
  }
  if (!one_format) {  // the trunk in its own format (one timer at a time: they are large)
    const ProductTimer timer(trunk_mxfp4);
    r.trunk_decode_gbps = one_row_rate(timer, [&] { r.prefill_gbps = rate(timer, trunk_rows); }, [] {});
  }
  // A decode token's products are many and small: one expert matrix's bytes
  // each, read from memory. What one costs beyond its bytes at the rate above
  // (the threads' hand-off, the rows' setup) is its fixed cost.
  const uint64_t expert_matrix = s.expert_bytes / static_cast<uint64_t>(std::max<int64_t>(1, model.expert_matrices));
  const int64_t width = std::max<int64_t>(32, (model.config.hidden_size + 31) / 32 * 32);
  {
    const ProductTimer small(experts_mxfp4, std::max<uint64_t>(expert_matrix, 1), width);
    const double small_s = small.seconds(1, pool, seconds / 4);
    r.product_overhead_s = std::max(0.0, small_s - static_cast<double>(small.matrix_bytes()) / (r.decode_gbps * 1e9));
  }
  // A token multiplies by the resident trunk and by k experts in each MoE layer.
  const double trunk = static_cast<double>(s.trunk_bytes);
  const double experts = static_cast<double>(s.experts_per_token * s.moe_layers) * static_cast<double>(s.expert_bytes);
  const double products =
      static_cast<double>(model.trunk_matrices + s.experts_per_token * s.moe_layers * model.expert_matrices);
  r.decode_s = trunk / (r.trunk_decode_gbps * 1e9) + experts / (r.decode_gbps * 1e9) + products * r.product_overhead_s;
  // The output head runs for a prompt's last position only (one row).
  const double head = static_cast<double>(std::min(model.head_bytes, s.trunk_bytes));
  const int64_t prompt = std::max<int64_t>(prompt_tokens, 1);
  // A step's experts keep fewer threads busy than the one large product
  // timed: its distinct experts, each with an equal share of its rows, run
  // as MoeBlock::forward runs them (model/moe.h).
  const double groups = std::max(1.0, std::round(distinct_experts(s.experts, s.experts_per_token, step)));
  const uint32_t group_rows = static_cast<uint32_t>(
      std::max(1.0, std::round(static_cast<double>(step * s.experts_per_token) / groups)));
  std::vector<int32_t> ids(static_cast<size_t>(groups));
  std::iota(ids.begin(), ids.end(), 0);
  const std::vector<uint32_t> rows(ids.size(), group_rows);
  std::vector<uint64_t> load(ids.size());
  // An expert's rows: the latent width of a latent MoE, else the hidden size.
  const int64_t expert_rows_width = model.config.latent_width > 0 ? model.config.latent_width : model.config.hidden_size;
  const ExpertThreading busy =
      expert_threading(ids, rows, static_cast<size_t>(pool.size()), static_cast<size_t>(model.config.moe_intermediate_size),
                       static_cast<size_t>(expert_rows_width), load);
  r.prefill_experts_busy = busy.busy();
  const int64_t expert_in = (expert_rows_width + 31) / 32 * 32;
  const int64_t expert_width = (model.config.moe_intermediate_size + 31) / 32 * 32;
  if (busy.runs_one_per_thread && expert_in >= 32 && expert_width >= 32) {
    // One expert a thread: a step's experts timed as the CPU backend runs
    // them, from weights of about the products' timing size (and a copy a
    // thread at least), so that they come from memory as a model's do.
    // (At most twice the products' timing size: a copy a thread of a large
    // expert on many cores must not take the machine's memory.)
    const uint64_t each = std::max<uint64_t>(s.expert_bytes, 1), room = compute_mib() << 20;
    const size_t copies = std::clamp<size_t>(std::max<size_t>(static_cast<size_t>(pool.size()), room / each), 1,
                                             std::min<size_t>(ids.size(), std::max<uint64_t>(1, 2 * room / each)));
    const ExpertStepTimer timer(experts_mxfp4, expert_in, expert_width, copies);
    const double step_s = timer.seconds(ids.size(), group_rows, pool, seconds / 4);
    r.prefill_experts_s = step_s * static_cast<double>(s.moe_layers) / static_cast<double>(step);
    r.prefill_experts_timed_as = "one per thread";
  } else {
    r.prefill_experts_s = experts / (expert_gbps * 1e9) / r.prefill_experts_busy;
    r.prefill_experts_timed_as = "spread";
  }
  r.prefill_s = (trunk - head) / (r.prefill_gbps * 1e9) + r.prefill_experts_s +
                head / (r.trunk_decode_gbps * 1e9) / static_cast<double>(prompt);
  // Attention over the cached positions: a decode token after the prompt
  // reads all of them, a prompt token on average half, in blocks of the
  // step's rows (runtime/attention_timer.h).
  r.attention_s = attention_seconds(model.config, prompt + 1, pool, seconds / 4);
  r.prefill_attention_s = prompt_attention_seconds(model.config, (prompt + 1) / 2, step, pool, seconds / 4);
  r.decode_s += r.attention_s;
  r.prefill_s += r.prefill_attention_s;
  // A streamed token's guesses: the next layer's router on this layer's
  // stream, a product a MoE layer (Model::prefetch_for).
  r.guess_s = static_cast<double>(model.router_bytes) / (r.trunk_decode_gbps * 1e9) +
              static_cast<double>(s.moe_layers) * r.product_overhead_s;
  r.sample_s = sample_seconds(model.config.vocab_size, temperature, seconds / 8);
  r.decode_s += r.sample_s;
  r.hash_s_per_byte = hash_seconds_per_byte(seconds / 8);
  return r;
}

}  // namespace strata
