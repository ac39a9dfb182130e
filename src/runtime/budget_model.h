#pragma once
// What `strata budget` needs of a model and of this machine, without loading
// the model (runtime/budget.h does the arithmetic):
//  - read_budget_model(): the weights' bytes split into the resident trunk
//    (an untied token table left out: it is read a row a token) and the
//    routed experts (a pack: its trunk's tensors and its manifest's blob
//    lengths, what the drives deliver; a checkpoint: its tensors' bytes),
//    and the KV cache one sequence needs at the context (the CPU's cache,
//    as the loader plans it). Headers only: no weight is read. A remote
//    model (hf://, http(s)://, s3://: remote/source.h) is described from
//    its headers alone (read_remote_budget_model), fetched into a temporary
//    folder (pack/remote_headers.h) that is gone when it returns.
//  - measure_compute(): seconds per token of this machine's products for
//    those bytes, from a short run of the kernels on a matrix far larger
//    than the CPU's caches (runtime/product_timer.h), the experts' products
//    in the experts' format and the trunk's in the trunk's (Q8_0 or MXFP4;
//    other formats are timed as Q8_0;
//    STRATA_BUDGET_COMPUTE_MIB sets another size, for tests): decode as one
//    row, plus each of its products' fixed cost, timed on a small matrix; a
//    prompt token as its share of a step's products (the output head's one
//    row shared by the prompt's tokens). Both plus attention over the cached
//    positions (runtime/attention_timer.h): a decode token after a prompt of
//    P tokens reads P + 1, a prompt token P/2 on average. Beside those, what
//    a streamed decode token does besides its products (timed here too): the
//    guesses at the next layers' experts (each MoE router once more), the
//    pick of its token at the runs' temperature (over the whole vocabulary),
//    and the checksums of what it reads (xxh3 on one core, a second a byte:
//    the hashing threads take cores the products would have).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "model/model_config.h"
#include "runtime/budget.h"
#include "runtime/loader.h"

namespace strata {

struct BudgetModel {
  BudgetShape shape;
  ModelConfig config;
  std::string kind;        // "pack", "gguf", "hf"
  std::string identity;    // what its expert heat is kept under (Checkpoint::identity); "" for a remote model
  std::string remote;      // a remote model's source ("" for a local one): its experts are on no drive here
  std::string remote_commit;  // the hub commit it was pinned to ("" for other sources)
  uint64_t fetched_bytes = 0;  // a remote model's headers: what was fetched
  // The files its experts are read from (a pack's drive files, the GGUF
  // file, the safetensors shards holding experts), absolute, largest first.
  std::vector<std::filesystem::path> expert_files;
  std::string expert_dtype;  // the first routed expert's format, as dtype_name() spells it
  std::string trunk_dtype;   // the trunk's largest matrix's (the untied token table aside)
  int64_t context = 0;     // as the loader would plan it (LoadOptions::context, allow_long_context)
  uint64_t kv_bytes = 0;   // one sequence's cache at that context
  uint64_t token_table_bytes = 0;  // untied: read a row a token, so in total_bytes but not in trunk_bytes
  // The output head (lm_head, or the token table when tied), in trunk_bytes:
  // a prefill multiplies by it for its last position only.
  uint64_t head_bytes = 0;
  // Products a decode token makes: one per resident weight matrix (the
  // token table aside), and per routed expert it picks (gate, up and down;
  // gate_up and down where they are fused).
  int64_t trunk_matrices = 0;
  int64_t expert_matrices = 3;
  // The decoder's MoE routers (mlp.gate, in trunk_bytes): a streamed token's
  // guesses at the next layer's experts multiply by each once more.
  uint64_t router_bytes = 0;
};

// The process's budget: `ram_bytes` when given, else what the loader derives
// from the memory available. Throws strata::Error when that cannot be read.
uint64_t budget_ram_bytes(std::optional<uint64_t> ram_bytes);
// The step a run of the model plans on the CPU with `threads` threads (0:
// the default count) under `ram_bytes`, its rows at most `cap` (a tuned
// profile's max_batch; 0: none), its pass `pass` rows where given
// (--prefill-pass): its rows and buffers (loader.h's planned_cpu_step at the
// model's context).
PlannedStep planned_step(const BudgetModel& model, uint64_t ram_bytes, int threads, int64_t cap = 0, int64_t pass = 0);
// The reads a routed expert is read in, as a run with `load` reads it (its
// piece_bytes, else the storage's): the size a drive's ceiling is measured
// at. A pack's expert is one page-aligned extent, cut into pieces; a GGUF's
// is one unaligned range a matrix (the experts' stacked tensors), read with
// the whole pages around it (about a page more); a safetensors checkpoint's
// is taken as one such range (an approximation: where its tensors lie apart,
// as stacked or FP8 checkpoints' do, the reads are shorter).
uint64_t expert_read_bytes(const BudgetModel& model, const LoadOptions& load);
// What is left of `ram_bytes` for the expert cache, at most every expert:
// the budget less the trunk, the KV cache, the step (as planned_step's) and
// `process_bytes`.
uint64_t expert_cache_bytes(const BudgetModel& model, uint64_t ram_bytes, uint64_t process_bytes, int threads,
                            int64_t cap = 0);

// Throws strata::Error naming the path when it is not a model strata opens,
// or has no routed experts.
BudgetModel read_budget_model(const std::filesystem::path& path, const LoadOptions& options);
// A remote model (remote/source.h: is_remote_source()) from its headers: the
// same, and errors naming the source, or what fetching it met.
BudgetModel read_remote_budget_model(const std::string& source, const LoadOptions& options);

struct BudgetCompute {
  double decode_s = 0;          // one token's products (their bytes at decode_gbps, and each one's overhead) and attention
  double prefill_s = 0;         // a prompt token's share of a prefill, attention included
  double attention_s = 0;       // of decode_s: attention over the prompt's positions (runtime/attention_timer.h)
  double prefill_attention_s = 0;  // of prefill_s: over half the prompt's positions
  double decode_gbps = 0;       // weight bytes a second, one row, in the experts' format
  double trunk_decode_gbps = 0;  // the same in the trunk's format
  double prefill_gbps = 0;      // weight bytes a second, per row of a 64-row product, in the trunk's format
  double product_overhead_s = 0;  // what a one-row product costs beyond its bytes (the threads' hand-off)
  double guess_s = 0;           // a streamed token's guesses: each MoE router's product once more
  double sample_s = 0;          // picking a token from its logits at the temperature given (in decode_s)
  double hash_s_per_byte = 0;   // checksumming reads, one core
  // The share of the threads a prompt step's experts keep busy (model/moe.h's
  // expert_threading): where they run spread over the threads, their prefill
  // compute is divided by it.
  double prefill_experts_busy = 1;
  // Of prefill_s: a prompt token's share of its steps' routed experts, and
  // how they were timed: "one per thread" (a step's experts run as the CPU
  // backend runs them, runtime/expert_step_timer.h) or "spread" (at the rate
  // of a product of rows · k / E rows over all threads, ÷ the busy share).
  double prefill_experts_s = 0;
  std::string prefill_experts_timed_as;
  std::string timed_as;         // the experts' format timed
  std::string trunk_timed_as;   // the trunk's
};

// The format the compute is timed in for weights stored as `expert_dtype`:
// "MXFP4" for MXFP4 (GGUF's, or Hugging Face's U8 blocks), else "Q8_0".
const char* timed_format(const std::string& expert_dtype);

// About `seconds` of kernel runs at `threads` (0: all cores; up to about
// three times that with the one-row rate's extra windows, attention, and the
// trunk timed in a format of its own). A prompt of
// `prompt_tokens` runs in steps of at most `step_rows` rows (0: one step),
// each giving an expert about rows · k / E of them, the trunk 64: the prompt
// token's share is timed so (the experts as prefill_experts_timed_as says).
// `temperature`: the runs' (generate's --temperature; 0 picks the largest
// logit).
BudgetCompute measure_compute(const BudgetModel& model, int threads, int64_t prompt_tokens, int64_t step_rows = 0,
                              float temperature = 0, double seconds = 1.0);

}  // namespace strata
