// The CPU backend's attention ops (GqaAttend, MlaAttend in backend.h).
#include "backend/cpu_attention.h"

#include <algorithm>
#include <string>

#include "backend/cpu_backend.h"
#include "backend/cpu_rows.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace strata {

namespace {

HostKvCache& host_cache(KvCache* cache) {
  auto* c = dynamic_cast<HostKvCache*>(cache);
  if (!c) throw Error("internal: a row whose cache the CPU backend did not make");
  return *c;
}

// The rows split into runs of consecutive rows of one sequence (same cache),
// each at most kRowsPerBlock long, as [begin, end) pairs, into `runs`
// (planned: one per row at most).
void sequence_runs(std::span<const Row> rows, std::vector<std::pair<size_t, size_t>>& runs) {
  runs.clear();
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && j - i < kRowsPerBlock && rows[j].cache == rows[i].cache) ++j;
    runs.emplace_back(i, j);
    i = j;
  }
}

// Task t of runs × heads: its run and head. The pool hands out its chunks of
// tasks in order, and a prompt's later runs see more keys, so runs are
// counted from the last: the longest tasks start first and the short ones
// fill the threads' ends (docs/PERFORMANCE.md).
struct RunHead {
  size_t run;
  int64_t head;
};
RunHead run_head(size_t t, size_t runs, int64_t heads) {
  const size_t h = static_cast<size_t>(heads);
  return {runs - 1 - t / h, static_cast<int64_t>(t % h)};
}

}  // namespace

void CpuBackend::gqa_attention(const GqaAttend& op) {
  const std::span<const Row> rows = op.rows;
  const size_t n = rows.size();
  check_positions(rows);
  const int64_t H = op.heads, KV = op.kv_heads, d = op.head_dim;
  float* q = host(op.q.slice(0, n * H * d));
  float* k = host(op.k.slice(0, n * KV * d));
  const float* v = host(op.v.slice(0, n * KV * d));
  float* heads = host(op.out.slice(0, n * H * d));
  cpu_rows::for_rows(pool_, n, static_cast<size_t>((H + 2 * KV) * d), [&](int, size_t r0, size_t r1) {
    for (size_t i = r0; i < r1; ++i) {
      const int64_t pos = rows[i].pos;
      for (int64_t h = 0; h < H; ++h) {
        float* qh = &q[(i * H + h) * d];
        if (op.q_norm) kernels::rms_norm(qh, op.q_norm, d, op.eps, qh);
        op.rope->apply(qh, pos);
      }
      HostKvCache& cache = host_cache(rows[i].cache);
      float* kc = cache.key(op.layer, pos);
      for (int64_t h = 0; h < KV; ++h) {
        float* kh = &k[(i * KV + h) * d];
        if (op.k_norm) kernels::rms_norm(kh, op.k_norm, d, op.eps, kh);
        op.rope->apply(kh, pos);
      }
      std::copy_n(&k[i * KV * d], KV * d, kc);
      std::copy_n(&v[i * KV * d], KV * d, cache.value(op.layer, pos));
    }
  });

  sequence_runs(rows, runs_);
  // One pointer captured: the pool's std::function then holds it in place.
  struct Ctx {
    CpuBackend* self;
    const GqaAttend* op;
    float* q;
    float* heads;
  } ctx{this, &op, q, heads};
  pool_.parallel_for_indexed(runs_.size() * static_cast<size_t>(H), [c = &ctx](int worker, size_t t0, size_t t1) {
    const GqaAttend& op = *c->op;
    const std::span<const Row> rows = op.rows;
    const int64_t H = op.heads, d = op.head_dim, group = op.heads / op.kv_heads;
    const AttentionScratch s = c->self->attention_scratch(worker);
    int64_t* first = s.ints;
    int64_t* len = s.ints + s.block;
    constexpr size_t kChunk = kKeysPerChunk;
    float dotted[kRowsPerBlock * kChunk];
    size_t together[kRowsPerBlock];
    const float* from_rows[kRowsPerBlock];
    float* to_rows[kRowsPerBlock];
    for (size_t t = t0; t < t1; ++t) {
      const RunHead task = run_head(t, c->self->runs_.size(), H);
      // Plain variables: lambdas below capture them (clang 14 cannot capture structured bindings).
      const auto& run = c->self->runs_[task.run];
      const size_t b0 = run.first, b1 = run.second;
      const int64_t h = task.head, kvh = h / group;
      const size_t m = b1 - b0;
      const HostKvCache& cache = host_cache(rows[b0].cache);
      int64_t lo = rows[b0].pos, hi = 0, widest = 0;
      for (size_t r = 0; r < m; ++r) {
        const int64_t pos = rows[b0 + r].pos;
        // A sliding-window layer sees only the last `window` positions.
        first[r] = op.window ? std::max<int64_t>(0, pos - op.window + 1) : 0;
        len[r] = pos + 1 - first[r];
        lo = std::min(lo, first[r]);
        hi = std::max(hi, pos + 1);
        widest = std::max(widest, len[r] + 1);
      }
      float* scores = s.floats;
      const float** keys = s.pointers;  // per position from lo
      const float** values = s.pointers + (hi - lo);
      for (int64_t p = lo; p < hi; ++p) {
        keys[p - lo] = cache.key(op.layer, p) + kvh * d;
        values[p - lo] = cache.value(op.layer, p) + kvh * d;
      }
      auto start = [&](size_t r) { return first[r]; };
      auto end = [&](size_t r) { return first[r] + len[r]; };
      // Each row's dots against a chunk of keys run side by side, the rows
      // that see the same keys together (kernels::dots_rows), each dot with
      // the bits of a lone one.
      by_key_chunks(lo, hi, m, start, end, together, [&](const size_t* rs, size_t k, int64_t from, size_t count) {
        for (size_t i = 0; i < k; ++i) from_rows[i] = &c->q[((b0 + rs[i]) * H + h) * d];
        kernels::dots_rows(from_rows, k, &keys[from - lo], count, static_cast<size_t>(d), dotted, kChunk);
        for (size_t i = 0; i < k; ++i)
          for (size_t j = 0; j < count; ++j)
            scores[rs[i] * widest + (from - first[rs[i]]) + static_cast<int64_t>(j)] = dotted[i * kChunk + j] * op.scale;
      });
      for (size_t r = 0; r < m; ++r) {
        float* sr = &scores[r * widest];
        // A sink is one more logit in the softmax's denominator with no value.
        if (op.sinks) {
          sr[len[r]] = op.sinks[h];
          kernels::softmax(sr, len[r] + 1);
        } else {
          kernels::softmax(sr, len[r]);
        }
        std::fill_n(&c->heads[((b0 + r) * H + h) * d], d, 0.0f);
      }
      // The weighted sum of values, a chunk per call (kernels::axpys_rows:
      // each row's axpys of one position after another, with their bits).
      by_key_chunks(lo, hi, m, start, end, together, [&](const size_t* rs, size_t k, int64_t from, size_t count) {
        for (size_t i = 0; i < k; ++i) {
          from_rows[i] = &scores[rs[i] * widest + (from - first[rs[i]])];
          to_rows[i] = &c->heads[((b0 + rs[i]) * H + h) * d];
        }
        kernels::axpys_rows(from_rows, k, &values[from - lo], count, to_rows, static_cast<size_t>(d));
      });
    }
  });
}

void CpuBackend::mla_attention(const MlaAttend& op) {
  const std::span<const Row> rows = op.rows;
  const size_t n = rows.size();
  check_positions(rows);
  const int64_t H = op.heads, qk = op.nope + op.rope_dim, lora = op.latent, rope = op.rope_dim;
  if (static_cast<size_t>(lora) > limits_.latent || static_cast<size_t>(rope) > limits_.latent_rope)
    throw Error("internal: latent attention wider than planned");
  const float* q = host(op.q.slice(0, n * H * qk));
  float* kv = host(op.kv.slice(0, n * (lora + rope)));
  float* heads = host(op.out.slice(0, n * H * op.v_dim));

  // The cache row: the normalised latent, then the rotated shared key.
  cpu_rows::for_rows(pool_, n, static_cast<size_t>(lora + rope), [&](int, size_t r0, size_t r1) {
    for (size_t i = r0; i < r1; ++i) {
      float* row = &kv[i * (lora + rope)];
      float* dst = host_cache(rows[i].cache).key(op.layer, rows[i].pos);
      kernels::rms_norm(row, op.kv_norm, lora, op.eps, dst);
      std::copy_n(row + lora, rope, dst + lora);
      if (op.rope) op.rope->apply(dst + lora, rows[i].pos);
    }
  });

  sequence_runs(rows, runs_);
  struct Ctx {
    CpuBackend* self;
    const MlaAttend* op;
    const float* q;
    float* heads;
  } ctx{this, &op, q, heads};
  pool_.parallel_for_indexed(runs_.size() * static_cast<size_t>(H), [c = &ctx](int worker, size_t t0, size_t t1) {
    const MlaAttend& op = *c->op;
    const std::span<const Row> rows = op.rows;
    const int64_t H = op.heads, nope = op.nope, rope = op.rope_dim, qk = nope + rope, lora = op.latent,
                  vdim = op.v_dim;
    const AttentionScratch s = c->self->attention_scratch(worker);
    const kernels::LinearScratch one_row = c->self->worker_scratch(worker);
    // A row's query as the cache holds a key: the query in latent space,
    // then its rotated part (one dot against the whole cached row).
    const size_t key = static_cast<size_t>(lora + rope);
    float* query = s.floats;
    float* latent = query + s.block * key;
    float* scores = latent + s.block * lora;
    constexpr size_t kChunk = kKeysPerChunk;
    float dotted[kRowsPerBlock * kChunk];
    size_t together[kRowsPerBlock];
    const float* from_rows[kRowsPerBlock];
    float* to_rows[kRowsPerBlock];
    for (size_t t = t0; t < t1; ++t) {
      const RunHead task = run_head(t, c->self->runs_.size(), H);
      // Plain variables: lambdas below capture them (clang 14 cannot capture structured bindings).
      const auto& run = c->self->runs_[task.run];
      const size_t b0 = run.first, b1 = run.second;
      const int64_t h = task.head;
      const size_t m = b1 - b0;
      const HostKvCache& cache = host_cache(rows[b0].cache);
      int64_t longest = 0;
      for (size_t i = b0; i < b1; ++i) longest = std::max(longest, rows[i].pos + 1);
      // With W_UK[h] and W_UV[h] of their own, the block's rows go through
      // each as one product (its weights decoded once for all of them; each
      // row's bits as alone, linear.h), staged in `scores` (block × (context
      // + 1) floats, free before the dots and after the weighted sum): the
      // rows' q_nope gathered there, later the expanded heads.
      const bool together_uk_uv = !op.k_b.empty() && !op.v_b.empty() && m > 1 &&
                                  std::max(nope, vdim) <= c->self->limits_.context + 1 &&
                                  kernels::linear_sum_floats(op.k_b[h], m) <= one_row.sums.size() &&
                                  kernels::linear_sum_floats(op.v_b[h], m) <= one_row.sums.size();
      if (together_uk_uv) {  // into `latent` (zeroed after), then each row's query
        for (size_t r = 0; r < m; ++r) std::copy_n(&c->q[((b0 + r) * H + h) * qk], nope, &scores[r * nope]);
        kernels::linear(op.k_b[h], scores, m, latent, nullptr, one_row);
        for (size_t r = 0; r < m; ++r) std::copy_n(&latent[r * lora], lora, &query[r * key]);
      }
      std::fill_n(latent, m * lora, 0.0f);
      for (size_t r = 0; r < m; ++r) {
        const float* qh = &c->q[((b0 + r) * H + h) * qk];
        float* qr = &query[r * key];
        // q_nope · W_UK[h]: the query in latent space.
        if (op.k_b.empty())
          kernels::linear_transposed(op.kv_b->row_slice(h * (nope + vdim), nope), qh, qr, one_row.rows);
        else if (!together_uk_uv)
          kernels::linear(op.k_b[h], qh, 1, qr, nullptr, one_row);
        std::copy_n(qh + nope, rope, qr + lora);
        if (op.rope) op.rope->apply(qr + lora, rows[b0 + r].pos);
      }
      auto start = [](size_t) { return int64_t{0}; };
      auto len = [&](size_t r) { return rows[b0 + r].pos + 1; };
      const float** cached = s.pointers;  // per cached position: latent, rotated key
      for (int64_t p = 0; p < longest; ++p) cached[p] = cache.key(op.layer, p);
      // Each row's dots against a chunk of keys run side by side, the rows
      // that see the same keys together (kernels::dots_rows), each dot with
      // the bits of a lone one.
      by_key_chunks(0, longest, m, start, len, together, [&](const size_t* rs, size_t k, int64_t from, size_t count) {
        for (size_t i = 0; i < k; ++i) from_rows[i] = &query[rs[i] * key];
        kernels::dots_rows(from_rows, k, &cached[from], count, key, dotted, kChunk);
        for (size_t i = 0; i < k; ++i)
          for (size_t j = 0; j < count; ++j)
            scores[rs[i] * longest + from + static_cast<int64_t>(j)] = dotted[i * kChunk + j] * op.scale;
      });
      for (size_t r = 0; r < m; ++r) kernels::softmax(&scores[r * longest], len(r));
      // The weighted sum, a chunk of keys per call (kernels::axpys_rows:
      // each row's axpys of one key after another, with their bits).
      by_key_chunks(0, longest, m, start, len, together, [&](const size_t* rs, size_t k, int64_t from, size_t count) {
        for (size_t i = 0; i < k; ++i) {
          from_rows[i] = &scores[rs[i] * longest + from];
          to_rows[i] = &latent[rs[i] * lora];
        }
        kernels::axpys_rows(from_rows, k, &cached[from], count, to_rows, static_cast<size_t>(lora));
      });
      // Expand the attended latent through W_UV[h].
      if (together_uk_uv) {
        kernels::linear(op.v_b[h], latent, m, scores, nullptr, one_row);
        for (size_t r = 0; r < m; ++r) std::copy_n(&scores[r * vdim], vdim, &c->heads[((b0 + r) * H + h) * vdim]);
      } else {
        for (size_t r = 0; r < m; ++r)
          kernels::linear(op.v_b.empty() ? op.kv_b->row_slice(h * (nope + vdim) + nope, vdim) : op.v_b[h],
                          &latent[r * lora], 1, &c->heads[((b0 + r) * H + h) * vdim], nullptr, one_row);
      }
    }
  });
}

}  // namespace strata
