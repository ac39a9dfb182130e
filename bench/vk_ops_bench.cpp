// What one op costs on a Vulkan device when it runs as in a decode step: the
// same op recorded `--calls` times back to back through the Backend interface
// (each with the barrier a step gives it), then one download; the wall time
// over the calls, the median of `--reps` repetitions. For products, the bytes
// of the matrix over that time too. Not run in CI (bench/README.md).
//
//   vk_ops_bench [--device N] [--calls 200] [--reps 7] [--json]
//
// The ops: a norm of a narrow row (what a dispatch and its barrier cost when
// the work is next to none), norms of model widths, and one-row products of
// the Q8_0, Q4_K and MXFP4 matrices of decode steps' shapes.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/linear.h"
#include "util/error.h"
#include "vulkan/vulkan_backend.h"

namespace {

using strata::Backend;
using strata::Tensor;

struct Options {
  int device = -1;
  int calls = 200;
  int reps = 7;
  bool json = false;
};

// A matrix of random blocks with small f16 scales (the values do not change
// the time; the scales keep them finite).
struct Matrix {
  std::vector<uint8_t> data;
  strata::kernels::WeightMatrix w;
};

void put_f16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

Matrix random_matrix(strata::DType type, int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Matrix m;
  m.w.dtype = type;
  m.w.out = out;
  m.w.in = in;
  const size_t row = m.w.row_bytes();
  m.data.resize(row * static_cast<size_t>(out));
  for (auto& b : m.data) b = static_cast<uint8_t>(rng());
  // f16 0x1c00 = 2^-8: the block scales (and Q4_K's minimum scale).
  size_t block = 0, scale_at = 0;
  std::vector<size_t> more;
  if (type == strata::DType::Q8_0) block = 34;
  if (type == strata::DType::Q4_K) block = 144, more = {2};
  if (type == strata::DType::MXFP4) block = 17;
  for (size_t b = 0; b + block <= m.data.size(); b += block) {
    if (type == strata::DType::MXFP4) {
      m.data[b] = static_cast<uint8_t>(118 + rng() % 16);
      continue;
    }
    put_f16(&m.data[b + scale_at], 0x1c00);
    for (size_t at : more) put_f16(&m.data[b + at], 0x1c00);
  }
  m.w.data = m.data.data();
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds a call of `op` (recorded `calls` times, then `sync`), the
// median of `reps`, after one untimed round (weights go up on first use).
double time_op(const Options& o, const std::function<void()>& op, const std::function<void()>& sync) {
  std::vector<double> us;
  for (int r = 0; r <= o.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < o.calls; ++c) op();
    sync();
    const auto t1 = std::chrono::steady_clock::now();
    if (r > 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / o.calls);
  }
  return median(us);
}

void report(const Options& o, const std::string& op, const std::string& shape, double us, double bytes) {
  if (o.json) {
    std::printf("{\"op\":\"%s\",\"shape\":\"%s\",\"us\":%.3f,\"bytes\":%.0f,\"gb_s\":%.2f}\n", op.c_str(),
                shape.c_str(), us, bytes, bytes > 0 ? bytes / us / 1e3 : 0.0);
    return;
  }
  if (bytes > 0)
    std::printf("%-14s %-22s %9.2f us  %8.2f MB  %7.1f GB/s\n", op.c_str(), shape.c_str(), us, bytes / 1e6,
                bytes / us / 1e3);
  else
    std::printf("%-14s %-22s %9.2f us\n", op.c_str(), shape.c_str(), us);
  std::fflush(stdout);
}

int run(const Options& o) {
  std::unique_ptr<Backend> b = strata::make_vulkan_backend(o.device, 0);
  struct Shape {
    strata::DType type;
    const char* name;
    int64_t out, in;
  };
  // Qwen3-30B-A3B's and Kimi K2's decode products: a router, q·k·v stacked,
  // o, a shared expert's gate·up, the widest trunk products.
  const std::vector<Shape> shapes = {
      {strata::DType::Q8_0, "q8_0", 128, 2048},   {strata::DType::Q8_0, "q8_0", 512, 2048},
      {strata::DType::Q8_0, "q8_0", 2048, 4096},  {strata::DType::Q8_0, "q8_0", 5120, 2048},
      {strata::DType::Q8_0, "q8_0", 8192, 2048},  {strata::DType::Q8_0, "q8_0", 16384, 2048},
      {strata::DType::Q8_0, "q8_0", 7168, 2048},  {strata::DType::Q8_0, "q8_0", 2048, 7168},
      {strata::DType::Q4_K, "q4_k", 5120, 2048},  {strata::DType::Q4_K, "q4_k", 2048, 4096},
      {strata::DType::MXFP4, "mxfp4", 5120, 2048}, {strata::DType::MXFP4, "mxfp4", 2048, 4096},
  };
  size_t widest = 8192;
  for (const Shape& s : shapes) widest = std::max({widest, static_cast<size_t>(s.in), static_cast<size_t>(s.out)});
  strata::StepLimits limits;
  limits.rows = 1;
  limits.context = 64;
  limits.widest_in = widest;
  limits.hidden = widest;
  b->plan(limits);
  Tensor x = b->allocate(widest), y = b->allocate(widest), z = b->allocate(widest), probe = b->allocate(1);
  std::vector<float> host(widest);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (float& v : host) v = nd(rng);
  b->upload(x, host.data());
  b->upload(z, host.data());
  float got = 0;
  const auto sync = [&] { b->download(probe, &got); };
  std::vector<float> norm_weight(widest, 1.0f);

  for (size_t width : {64, 2048, 4096, 7168}) {
    const double us = time_op(
        o, [&] { b->rms_norm(x.slice(0, width), norm_weight.data(), 1, width, 1e-6f, y.slice(0, width)); }, sync);
    report(o, "rms_norm", std::to_string(width), us, 0);
  }
  for (size_t width : {2048, 7168}) {
    const double us = time_op(
        o,
        [&] {
          b->add_rms_norm(z.slice(0, width), x.slice(0, width), norm_weight.data(), 1, width, 1e-6f,
                          y.slice(0, width));
        },
        sync);
    report(o, "add_rms_norm", std::to_string(width), us, 0);
  }
  // Every matrix kept until the end: the backend finds its device copies by
  // host address, which a freed matrix's successor could reuse.
  std::vector<Matrix> matrices;
  matrices.reserve(shapes.size());
  for (const Shape& s : shapes) {
    const Matrix& m = matrices.emplace_back(random_matrix(s.type, s.out, s.in, 7));
    const double us = time_op(
        o, [&] { b->linear(m.w, x.slice(0, static_cast<uint64_t>(s.in)), 1, y.slice(0, static_cast<uint64_t>(s.out))); },
        sync);
    report(o, std::string("linear_") + s.name, std::to_string(s.out) + "x" + std::to_string(s.in), us,
           static_cast<double>(m.data.size()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "vk_ops_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (a == "--device") o.device = value();
    else if (a == "--calls") o.calls = std::max(1, value());
    else if (a == "--reps") o.reps = std::max(1, value());
    else if (a == "--json") o.json = true;
    else {
      std::fprintf(stderr, "usage: vk_ops_bench [--device N] [--calls N] [--reps N] [--json]\n");
      return 2;
    }
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vk_ops_bench: %s\n", e.what());
    return 1;
  }
}
