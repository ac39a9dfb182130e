#pragma once
// One step of the model works on a batch of rows: a decode step is one row, a
// prefill chunk or a speculative verification is many rows of one sequence,
// and concurrent requests are rows of different sequences.
#include <cstdint>

namespace strata {

class KvCache;

struct Row {
  int32_t token = 0;
  int64_t pos = 0;         // position in its sequence
  KvCache* cache = nullptr;  // its sequence's cache; rows may share one
  bool want_logits = false;
};

}  // namespace strata
