#include "runtime/budget_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "backend/host_kv_cache.h"
#include "formats/dtype.h"
#include "kernels/interleave.h"
#include "kernels/quantize.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/tensor_names.h"
#include "model/weights_identity.h"
#include "pack/manifest.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata {

namespace fs = std::filesystem;

BudgetModel read_budget_model(const fs::path& path, const LoadOptions& options) {
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
  const std::string embed = tn(Naming::Hf, TensorKind::TokenEmbd, "weight");
  for (const std::string& name : ck.source->names()) {
    const TensorView& t = ck.source->get(name);
    if (is_streamed_expert_tensor(name, c)) {
      (routed_expert_layer(name).value_or(0) < c.num_layers ? decoder_experts : other_experts) += t.nbytes;
      if (t.nbytes > largest) {
        largest = t.nbytes;
        b.expert_dtype = dtype_name(t.dtype);
      }
      if (!t.file.empty()) files[t.file] += t.nbytes;
    } else {
      b.shape.trunk_bytes += t.nbytes;
      if (name == embed && !c.tie_word_embeddings) b.token_table_bytes = t.nbytes;
    }
  }
  if (manifest) {
    for (size_t l = 0; l < manifest->experts.size(); ++l)
      for (const PackedExpert& e : manifest->experts[l])
        (static_cast<int64_t>(l) < c.num_layers ? decoder_experts : other_experts) += e.length;
    if (!manifest->layouts.empty()) {
      const ExpertWeights& w = manifest->layouts.front();
      b.expert_dtype = dtype_name((w.gate_up.valid() ? w.gate_up : w.gate).dtype);
    }
    files.clear();
    for (uint32_t d = 0; d < manifest->drives.size(); ++d) files[manifest->drive_file(path, d).string()] = 0;
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

namespace {

// Seconds per call of kernels::linear over `w` for `rows` rows, the median
// of calls made for about `seconds`.
double time_linear(const kernels::WeightMatrix& w, size_t rows, ThreadPool& pool, double seconds) {
  std::vector<float> x(rows * static_cast<size_t>(w.in), 0.5f), y(rows * static_cast<size_t>(w.out));
  kernels::linear(w, x.data(), rows, y.data(), &pool);  // warm: the matrix into the caches it fits
  std::vector<double> took;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::linear(w, x.data(), rows, y.data(), &pool);
    took.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } while (took.size() < 3 ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  std::nth_element(took.begin(), took.begin() + took.size() / 2, took.end());
  return took[took.size() / 2];
}

}  // namespace

const char* timed_format(const std::string& expert_dtype) {
  return expert_dtype == "MXFP4" || expert_dtype == "U8" ? "MXFP4" : "Q8_0";
}

BudgetCompute measure_compute(const BudgetModel& model, int threads, int64_t prompt_tokens, double seconds) {
  BudgetCompute r;
  // A matrix far larger than the caches, as the experts and trunk are
  // together: 256 MiB in the experts' format, every row the same random one
  // (the kernels' speed does not depend on the values).
  r.timed_as = timed_format(model.expert_dtype);
  const bool mxfp4 = r.timed_as == "MXFP4";
  kernels::WeightMatrix w;
  w.dtype = mxfp4 ? DType::MXFP4 : DType::Q8_0;
  w.in = 8192;
  const size_t row_bytes = w.row_bytes();
  // Testing hook: STRATA_BUDGET_COMPUTE_MIB=<MiB> sets another size (the
  // command's tests run under sanitizers, where 256 MiB takes minutes).
  uint64_t mib = 256;
  if (const char* env = std::getenv("STRATA_BUDGET_COMPUTE_MIB")) mib = std::clamp<uint64_t>(std::strtoull(env, nullptr, 10), 1, 4096);
  w.out = std::max<int64_t>(16, static_cast<int64_t>((mib << 20) / row_bytes) / 16 * 16);
  std::vector<float> f(static_cast<size_t>(w.in));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : f) v = u(rng);
  std::vector<uint8_t> data(row_bytes * static_cast<size_t>(w.out));
  (mxfp4 ? kernels::quantize_row_mxfp4 : kernels::quantize_row_q8_0)(f.data(), w.in, data.data());
  for (int64_t o = 1; o < w.out; ++o) std::copy_n(data.data(), row_bytes, data.data() + o * row_bytes);
  w.data = data.data();
  // The CPU path's layout: interleaved where the kernels read 16 rows at once.
  if (kernels::interleavable(w)) w = kernels::interleave_in_place(w);
  const double bytes = static_cast<double>(data.size());

  ThreadPool pool(threads > 0 ? threads : default_thread_count());
  const BudgetShape& s = model.shape;
  const size_t trunk_rows = 64;
  const size_t expert_rows = static_cast<size_t>(std::clamp<int64_t>(
      std::max<int64_t>(prompt_tokens, 1) * s.experts_per_token / std::max<int64_t>(s.experts, 1), 1, 64));
  r.decode_gbps = bytes / time_linear(w, 1, pool, seconds / 3) / 1e9;
  r.prefill_gbps = bytes * static_cast<double>(trunk_rows) / time_linear(w, trunk_rows, pool, seconds / 3) / 1e9;
  const double expert_gbps =
      bytes * static_cast<double>(expert_rows) / time_linear(w, expert_rows, pool, seconds / 3) / 1e9;
  // A token multiplies by the resident trunk and by k experts in each MoE layer.
  const double trunk = static_cast<double>(s.trunk_bytes);
  const double experts = static_cast<double>(s.experts_per_token * s.moe_layers) * static_cast<double>(s.expert_bytes);
  r.decode_s = (trunk + experts) / (r.decode_gbps * 1e9);
  r.prefill_s = trunk / (r.prefill_gbps * 1e9) + experts / (expert_gbps * 1e9);
  return r;
}

}  // namespace strata
