#pragma once
// One step of the model works on a batch of rows: a decode step is one row, a
// prefill chunk or a speculative verification is many rows of one sequence,
// and concurrent requests are rows of different sequences.
#include <cstdint>
#include <span>

namespace strata {

class KvCache;

struct Row {
  int32_t token = 0;
  int64_t pos = 0;         // position in its sequence
  KvCache* cache = nullptr;  // its sequence's cache; rows may share one
  bool want_logits = false;
  // Its final hidden state (after the final norm, what the output head
  // reads) copied out too: what a next-token-prediction drafter is fed
  // (Model::forward()).
  bool want_hidden = false;
  // With want_logits: only the largest logit is wanted (LogitPick, a greedy
  // choice), not the row of logits: a GPU finds it without handing over the
  // vocabulary's worth of values.
  bool pick_only = false;
};

// A row of logits reduced to what greedy decoding needs: the index of its
// largest value, the lowest such, and how many values are NaN or ±Inf (a
// row with any is an error, whatever its largest is).
struct LogitPick {
  int32_t id = 0;
  uint32_t non_finite = 0;
};

// The LogitPick of one row of logits, on the host (backend.cpp): one pass.
LogitPick largest_logit(std::span<const float> row);

}  // namespace strata
