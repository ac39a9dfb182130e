#pragma once
// What a decode token's attention over its cached positions costs on this
// machine, for `strata budget`: the part of a token's compute that grows
// with the context and that the weight products (runtime/product_timer.h)
// leave out. On the 2-core machine it was a sixth of an in-RAM decode token
// of a Qwen3-MoE-shaped model at a few hundred positions (docs/PERFORMANCE.md).
//
// attention_work() says what that is, from the config alone: per attention
// layer (Kimi Delta Attention's recurrent layers have no positions to read),
// each head scores the query against every visible cached row and sums the
// rows' values by those scores, as the CPU backend does (backend/cpu_attention):
//   - GQA: a head reads its key-value head's slice, head_dim wide, of the
//     key rows and of the value rows;
//   - MLA (absorbed): every head reads the whole latent row (kv_lora_rank +
//     rope width) for its scores and the latent (kv_lora_rank) for the sum;
//   - a sliding-window layer sees at most its window.
// attention_seconds() times that work with the kernels the backend uses
// (kernels::dots_rows, softmax, kernels::axpys_rows, kKeysPerChunk keys a call), heads
// shared by the pool's threads, on several layers' worth of cached rows (a
// key row and its value row side by side: the same bytes the backend's
// separate arrays hold) so that they come from memory as a real token's do,
// at most large_matrix_mib() (runtime/product_timer.h). Past 16384
// positions, or past what that allows one layer, it times fewer and scales
// linearly (the work is linear in the positions).
//
// A prompt's rows attend in blocks of consecutive rows (kRowsPerBlock at
// most) that share each cached row's loads (kernels::dots_rows, axpys_rows),
// a task for each block and head: prompt_attention_seconds() times that, per
// row, with as many blocks as a step of `step` rows has (enough for four
// tasks a thread at most). Timed one row at a time instead, a 1024-token
// prompt's attention came out at about four times its cost (a Qwen3-MoE-
// shaped model, docs/PERFORMANCE.md).
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace strata {

class ThreadPool;

struct AttentionWork {
  int64_t layers = 0;     // layers alike
  int64_t heads = 0;      // query heads of each
  int64_t positions = 0;  // cached rows a head reads
  int64_t key_floats = 0;    // a head's floats of a key row (its scores)
  int64_t value_floats = 0;  // a head's floats of a value row (its sum)
  int64_t key_stride = 0;    // floats of a cached key row (every head's)
  int64_t value_stride = 0;  // of a value row; 0: the values are in the key rows (MLA's latent)
};

// The layers' attention at `positions` cached positions, alike layers
// together (at most one entry per window size).
std::vector<AttentionWork> attention_work(const ModelConfig& c, int64_t positions);

// Seconds of one decode token's attention over `positions` positions, every
// layer: the median of runs for about `seconds`.
double attention_seconds(const ModelConfig& c, int64_t positions, ThreadPool& pool, double seconds);

// Seconds of one prompt row's attention over `positions` positions, every
// layer, in steps of `step` rows (at least one) that attend in blocks of at
// most kRowsPerBlock: the median of runs for about `seconds`, divided by the
// rows timed.
double prompt_attention_seconds(const ModelConfig& c, int64_t positions, int64_t step, ThreadPool& pool,
                                double seconds);

}  // namespace strata
