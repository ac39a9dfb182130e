// Matrix-product throughput per weight format and ISA (Google Benchmark).
//
//   kernels_bench [--benchmark_filter=Q4_K] [--benchmark_repetitions=5
//                  --benchmark_report_aggregates_only=true]
//
// Names read matmul/<format>/<isa>/<out>x<in>/n<rows>/t<threads>. Counters:
//   GB/s     — bytes of stored weights (and their scales) streamed per second;
//   Gflop/s  — 2·out·in·n per second.
// Decode (n = 1) and the few rows of a verification or of concurrent streams
// (n <= 8) are measured from RAM: each iteration multiplies the next of
// enough copies of the matrix to exceed the last-level cache
// (STRATA_BENCH_WORKSET_MB, default 1024), as a model's weights would be.
// More rows (a prompt's, e.g. 64) reuse one copy (compute-bound). Row counts:
// STRATA_BENCH_ROWS="1,5,64" (default 1,64).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "kernels/dispatch.h"
#include "kernels/interleave.h"
#include "kernels/linear.h"
#include "util/thread_pool.h"

namespace {

using strata::DType;
using strata::kernels::Isa;
using strata::kernels::Packing;
using strata::kernels::WeightMatrix;

// *_il: the same bytes after kernels::interleave (Packing::Interleaved16).
enum class Fmt { F32, BF16, F16, F8, I8, I4, Mxfp4Hf, Q8_0, Q4_K, Q6_K, Mxfp4, Q8_0_il, Q4_K_il, Mxfp4_il };

Fmt base_format(Fmt f) {
  switch (f) {
    case Fmt::Q8_0_il: return Fmt::Q8_0;
    case Fmt::Q4_K_il: return Fmt::Q4_K;
    case Fmt::Mxfp4_il: return Fmt::Mxfp4;
    default: return f;
  }
}

struct FormatInfo {
  Fmt fmt;
  const char* name;
};

const FormatInfo kFormats[] = {
    {Fmt::Q8_0_il, "Q8_0_il"}, {Fmt::Q4_K_il, "Q4_K_il"}, {Fmt::Mxfp4_il, "MXFP4_il"},
    {Fmt::Q8_0, "Q8_0"},     {Fmt::Q4_K, "Q4_K"}, {Fmt::Q6_K, "Q6_K"}, {Fmt::Mxfp4, "MXFP4"},
    {Fmt::Mxfp4Hf, "MXFP4_hf"}, {Fmt::I4, "I4_g32"}, {Fmt::I8, "I8_row"}, {Fmt::F8, "F8_E4M3_b128"},
    {Fmt::BF16, "BF16"},     {Fmt::F16, "F16"},   {Fmt::F32, "F32"},
};

uint16_t to_f16(float v) {
  _Float16 h = static_cast<_Float16>(v);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// One matrix's bytes: weights, then (for split formats) scales.
struct Layout {
  DType dtype = DType::F32;
  Packing packing = Packing::Plain;
  size_t weight_bytes = 0, scale_bytes = 0, fp8_scales = 0;
};

Layout layout_of(Fmt f, int64_t out, int64_t in) {
  f = base_format(f);
  const size_t n = static_cast<size_t>(out * in);
  Layout l;
  switch (f) {
    case Fmt::F32: l.dtype = DType::F32; l.weight_bytes = 4 * n; break;
    case Fmt::BF16: l.dtype = DType::BF16; l.weight_bytes = 2 * n; break;
    case Fmt::F16: l.dtype = DType::F16; l.weight_bytes = 2 * n; break;
    case Fmt::F8:
      l.dtype = DType::F8_E4M3;
      l.weight_bytes = n;
      l.fp8_scales = static_cast<size_t>(((out + 127) / 128) * ((in + 127) / 128));
      break;
    case Fmt::I8: l.dtype = DType::I8; l.weight_bytes = n; l.scale_bytes = 4 * static_cast<size_t>(out); break;
    case Fmt::I4: l.dtype = DType::I32; l.packing = Packing::Int4x8; l.weight_bytes = n / 2; l.scale_bytes = n / 16; break;
    case Fmt::Mxfp4Hf: l.dtype = DType::U8; l.packing = Packing::Mxfp4Split; l.weight_bytes = n / 2; l.scale_bytes = n / 32; break;
    case Fmt::Q8_0: l.dtype = DType::Q8_0; l.weight_bytes = n / 32 * 34; break;
    case Fmt::Q4_K: l.dtype = DType::Q4_K; l.weight_bytes = n / 256 * 144; break;
    case Fmt::Q6_K: l.dtype = DType::Q6_K; l.weight_bytes = n / 256 * 210; break;
    case Fmt::Mxfp4: l.dtype = DType::MXFP4; l.weight_bytes = n / 32 * 17; break;
  }
  return l;
}

// Sane random contents (finite scales of ordinary size, so no denormal or
// NaN arithmetic skews timings).
void fill(Fmt f, const Layout& l, int64_t out, int64_t in, uint8_t* w, uint8_t* s, float* fs, uint64_t seed) {
  f = base_format(f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  const size_t n = static_cast<size_t>(out * in);
  for (size_t i = 0; i + 8 <= l.weight_bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(w + i, &r, 8);
  }
  switch (f) {
    case Fmt::F32:
      for (size_t i = 0; i < n; ++i) {
        const float v = nd(rng);
        std::memcpy(w + 4 * i, &v, 4);
      }
      break;
    case Fmt::BF16:
    case Fmt::F16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = f == Fmt::BF16 ? strata::f32_to_bf16_round(nd(rng)) : to_f16(nd(rng));
        std::memcpy(w + 2 * i, &h, 2);
      }
      break;
    case Fmt::F8:
      for (size_t i = 0; i < n; ++i)
        if ((w[i] & 0x7f) == 0x7f) w[i] = 0x3f;
      for (size_t i = 0; i < l.fp8_scales; ++i) fs[i] = std::ldexp(ud(rng), -8);
      break;
    case Fmt::I8:
      for (int64_t o = 0; o < out; ++o) {
        const float v = 0.01f * ud(rng);
        std::memcpy(s + 4 * o, &v, 4);
      }
      break;
    case Fmt::I4:
      for (size_t g = 0; g < n / 32; ++g) {
        const uint16_t h = strata::f32_to_bf16_round(0.01f * ud(rng));
        std::memcpy(s + 2 * g, &h, 2);
      }
      break;
    case Fmt::Mxfp4Hf:
      for (size_t g = 0; g < n / 32; ++g) s[g] = static_cast<uint8_t>(118 + rng() % 8);
      break;
    case Fmt::Q8_0:
      for (size_t b = 0; b < n / 32; ++b) {
        const uint16_t h = to_f16(0.01f * ud(rng));
        std::memcpy(w + 34 * b, &h, 2);
      }
      break;
    case Fmt::Q4_K:
      for (size_t b = 0; b < n / 256; ++b) {
        const uint16_t d = to_f16(0.001f * ud(rng)), m = to_f16(0.001f * ud(rng));
        std::memcpy(w + 144 * b, &d, 2);
        std::memcpy(w + 144 * b + 2, &m, 2);
      }
      break;
    case Fmt::Q6_K:
      for (size_t b = 0; b < n / 256; ++b) {
        const uint16_t d = to_f16(0.001f * ud(rng));
        std::memcpy(w + 210 * b + 208, &d, 2);
      }
      break;
    case Fmt::Mxfp4:
      for (size_t b = 0; b < n / 32; ++b) w[17 * b] = static_cast<uint8_t>(118 + rng() % 8);
      break;
  }
}

// The copies of one (format, shape); kept while consecutive benchmarks use it.
struct MatrixSet {
  Fmt fmt;
  int64_t out, in;
  Layout layout;
  std::vector<uint8_t> bytes;   // copies × (weights + scales)
  std::vector<float> fp8_scales;
  std::vector<WeightMatrix> copies;
  size_t stride = 0;
};

size_t workset_bytes() {
  const char* env = std::getenv("STRATA_BENCH_WORKSET_MB");
  return static_cast<size_t>(env ? std::atol(env) : 1024) << 20;
}

MatrixSet& matrices(Fmt f, int64_t out, int64_t in) {
  static std::unique_ptr<MatrixSet> cur;
  if (cur && cur->fmt == f && cur->out == out && cur->in == in) return *cur;
  cur.reset();
  auto m = std::make_unique<MatrixSet>();
  m->fmt = f;
  m->out = out;
  m->in = in;
  m->layout = layout_of(f, out, in);
  m->stride = (m->layout.weight_bytes + m->layout.scale_bytes + 63) / 64 * 64;
  const size_t ncopies = std::max<size_t>(2, workset_bytes() / m->stride);
  m->bytes.resize(ncopies * m->stride);
  m->fp8_scales.resize(m->layout.fp8_scales);
  fill(f, m->layout, out, in, m->bytes.data(), m->bytes.data() + m->layout.weight_bytes, m->fp8_scales.data(), 42);
  for (size_t c = 1; c < ncopies; ++c) std::memcpy(&m->bytes[c * m->stride], m->bytes.data(), m->stride);
  for (size_t c = 0; c < ncopies; ++c) {
    WeightMatrix w;
    w.dtype = m->layout.dtype;
    w.packing = m->layout.packing;
    w.out = out;
    w.in = in;
    w.data = &m->bytes[c * m->stride];
    if (m->layout.scale_bytes) {
      w.scales = w.data + m->layout.weight_bytes;
      w.scale_dtype = f == Fmt::I8 ? DType::F32 : f == Fmt::I4 ? DType::BF16 : DType::F8_E8M0;
      w.scale_group = f == Fmt::I8 ? in : 32;
    }
    if (f == Fmt::F8) {
      w.block_scale = m->fp8_scales.data();
      w.block_out = 128;
      w.block_in = 128;
    }
    if (base_format(f) != f) w = strata::kernels::interleave_in_place(w);
    m->copies.push_back(w);
  }
  cur = std::move(m);
  return *cur;
}

strata::ThreadPool* pool(int threads) {
  static std::map<int, std::unique_ptr<strata::ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<strata::ThreadPool>(threads);
  return p.get();
}

void bm_matmul(benchmark::State& state, Fmt f, Isa isa, int64_t out, int64_t in, size_t n, int threads) {
  strata::kernels::set_isa(isa);
  MatrixSet& m = matrices(f, out, in);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n * static_cast<size_t>(in)), y(n * static_cast<size_t>(out));
  for (auto& v : x) v = nd(rng);
  // Decode streams the copies from RAM; prefill stays on one (compute-bound).
  const size_t ncopies = n <= 8 ? m.copies.size() : 1;
  size_t c = 0;
  // Planned once, as the backend plans it: the timed loop allocates nothing.
  std::vector<float> sums(strata::kernels::linear_sum_floats(m.copies[0], n)),
      rows(strata::kernels::linear_row_floats(m.copies[0]) * static_cast<size_t>(std::max(threads, 1)));
  for (auto _ : state) {
    strata::kernels::linear(m.copies[c], x.data(), n, y.data(), pool(threads), {sums, rows});
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++c == ncopies) c = 0;
  }
  const double bytes = static_cast<double>(m.layout.weight_bytes + m.layout.scale_bytes + m.layout.fp8_scales * 4);
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["Gflop/s"] =
      benchmark::Counter(2.0 * static_cast<double>(out * in) * static_cast<double>(n) * iters / 1e9,
                         benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  struct Shape {
    int64_t out, in;
  };
  // A Kimi-K2 / DeepSeek-V3 expert projection (gate/up: 2048 × 7168) and a
  // square 4096 trunk matrix.
  std::vector<Shape> shapes = {{2048, 7168}, {4096, 4096}};
  // STRATA_BENCH_SHAPES="256x2048,..." replaces them (e.g. cache-resident sizes
  // with STRATA_BENCH_WORKSET_MB=0 to see the compute limit).
  if (const char* env = std::getenv("STRATA_BENCH_SHAPES")) {
    shapes.clear();
    for (const char* p = env; *p;) {
      char* end;
      const long o = std::strtol(p, &end, 10);
      const long i = *end == 'x' ? std::strtol(end + 1, &end, 10) : 0;
      if (o <= 0 || i <= 0 || i % 256 != 0) {
        std::fprintf(stderr, "STRATA_BENCH_SHAPES: expected OUTxIN with IN a multiple of 256\n");
        return 1;
      }
      shapes.push_back({o, i});
      p = *end == ',' ? end + 1 : end;
    }
  }
  std::vector<size_t> row_counts = {1, 64};
  if (const char* env = std::getenv("STRATA_BENCH_ROWS")) {
    row_counts.clear();
    for (const char* p = env; *p;) {
      char* end;
      const long n = std::strtol(p, &end, 10);
      if (n <= 0 || n > 4096 || end == p || (*end != ',' && *end != '\0')) {
        std::fprintf(stderr, "STRATA_BENCH_ROWS: expected row counts from 1 to 4096 like 1,5,64\n");
        return 1;
      }
      row_counts.push_back(static_cast<size_t>(n));
      p = *end == ',' ? end + 1 : end;
    }
  }
  if (row_counts.empty()) {
    std::fprintf(stderr, "STRATA_BENCH_ROWS: expected row counts from 1 to 4096 like 1,5,64\n");
    return 1;
  }
  const int max_threads = strata::default_thread_count();
  for (const FormatInfo& fi : kFormats)
    for (const Shape& s : shapes)
      for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Scalar}) {
        if (!strata::kernels::isa_supported(isa)) continue;
        for (size_t n : row_counts) {
          // The scalar reference is for tests; time it only for decode.
          if (isa == Isa::Scalar && n > 1) continue;
          for (int t : {1, max_threads}) {
            const std::string name = std::string("matmul/") + fi.name + "/" + strata::kernels::isa_name(isa) + "/" +
                                     std::to_string(s.out) + "x" + std::to_string(s.in) + "/n" + std::to_string(n) +
                                     "/t" + std::to_string(t);
            benchmark::RegisterBenchmark(name.c_str(), bm_matmul, fi.fmt, isa, s.out, s.in, n, t)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
            if (max_threads == 1) break;
          }
        }
      }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
