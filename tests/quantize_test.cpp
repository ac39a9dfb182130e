// Converting weights (pack --trunk int8, --experts q8|int4|mxfp4): the block
// formats are byte-identical to ggml's reference quantizers (gguf-py,
// tools/make_quantize_fixtures.py); the others decode back within half a
// step; converted packs run and lose little against the original.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "kernels/quantize.h"
#include "model/model.h"
#include "runtime/loader.h"
#include "pack/packer.h"
#include "runtime/compare.h"
#include "safetensors_writer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void expect_like_gguf_py(const char* type, size_t block_bytes, void (*quantize)(const float*, int64_t, uint8_t*)) {
  const fs::path dir = fs::path(STRATA_FIXTURES_DIR) / "quants";
  const auto in = slurp(dir / (std::string("quantize_") + type + ".f32"));
  const auto want = slurp(dir / (std::string("quantize_") + type + ".blocks"));
  const size_t n = in.size() / sizeof(float), rows = n / 256;
  ASSERT_EQ(want.size(), n / 32 * block_bytes);
  std::vector<float> x(n);
  std::memcpy(x.data(), in.data(), in.size());
  std::vector<uint8_t> got(want.size());
  for (size_t r = 0; r < rows; ++r) quantize(&x[r * 256], 256, &got[r * 256 / 32 * block_bytes]);
  for (size_t b = 0; b < got.size() / block_bytes; ++b)
    ASSERT_EQ(0, std::memcmp(&got[b * block_bytes], &want[b * block_bytes], block_bytes)) << type << " block " << b;
}

TEST(Quantize, Q8_0MatchesGgml) { expect_like_gguf_py("Q8_0", 34, kernels::quantize_row_q8_0); }
TEST(Quantize, Mxfp4MatchesGgml) { expect_like_gguf_py("MXFP4", 17, kernels::quantize_row_mxfp4); }

// Symmetric formats round to nearest: each weight comes back within half a
// quantization step of its row's (or group's) scale.
TEST(Quantize, Int8RowAndInt4DecodeWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 0.02f);
  kernels::WeightMatrix w;
  w.dtype = DType::F32;
  w.out = 8;
  w.in = 128;
  std::vector<float> values(w.out * w.in);
  for (float& v : values) v = g(rng);
  values[3] = 0.5f;  // an outlier sets its row's scale
  w.data = reinterpret_cast<const uint8_t*>(values.data());
  for (auto target : {kernels::QuantTarget::Int8Row, kernels::QuantTarget::Int4}) {
    auto q = kernels::quantize_matrix(w, target);
    std::vector<float> row(w.in);
    for (int64_t o = 0; o < w.out; ++o) {
      kernels::dequantize_row(q->matrix, o, row.data());
      for (int64_t i = 0; i < w.in; ++i) {
        const int64_t g0 = target == kernels::QuantTarget::Int8Row ? 0 : i / 32 * 32;
        const int64_t gn = target == kernels::QuantTarget::Int8Row ? w.in : 32;
        float amax = 0;
        for (int64_t j = g0; j < g0 + gn; ++j) amax = std::max(amax, std::fabs(values[o * w.in + j]));
        const float step = amax / (target == kernels::QuantTarget::Int8Row ? 127.0f : 7.0f);
        EXPECT_LE(std::fabs(row[i] - values[o * w.in + i]), 0.5f * step * 1.02f) << o << "," << i;
      }
    }
  }
}

TEST(Quantize, ConvertedPacksRunAndStayCloseToTheOriginal) {
  const fs::path src = fs::path(STRATA_FIXTURES_DIR) / "models" / "ds_yarn_grouped";
  testfiles::TempDir tmp("strata-quant");
  auto original = load_model(src, LoadOptions{2});
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 3, 42, 9, 100, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8}};
  std::map<std::string, CompareReport> r;
  for (const auto& [trunk, experts] : std::vector<std::pair<std::string, std::string>>{
           {"int8", "keep"}, {"keep", "q8"}, {"keep", "int4"}, {"keep", "mxfp4"}}) {
    PackOptions p;
    p.source = src;
    p.out = tmp / (trunk + "-" + experts);
    p.trunk = trunk;
    p.experts = experts;
    pack_model(p);
    LoadOptions o;
    o.threads = 2;
    o.heat = "none";
    auto packed = load_model(p.out, o);
    r[trunk + "-" + experts] = compare_models(*original, *packed, prompts);
  }
  for (const auto& [name, rep] : r) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(std::isfinite(rep.mean_kl));
    EXPECT_GT(rep.mean_kl, 0.0);  // something was converted
  }
  // 8-bit experts lose far less than 4-bit ones. (The int8 trunk touches
  // every attention projection, and in a tiny random model that flips some
  // routing decisions, so it is held to a looser bound.)
  EXPECT_LT(r["int8-keep"].mean_kl, 0.1);
  EXPECT_LT(r["keep-q8"].mean_kl, 0.01);
  EXPECT_LT(r["keep-q8"].mean_kl, r["keep-int4"].mean_kl);
  EXPECT_LT(r["keep-q8"].mean_kl, r["keep-mxfp4"].mean_kl);
  EXPECT_GE(r["keep-q8"].top1_agreement, 0.9);
  for (const auto& [name, rep] : r) std::printf("%s: mean KL %.3g, top-1 %.2f\n", name.c_str(), rep.mean_kl, rep.top1_agreement);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A checkpoint can ship tensors no architecture binds (DeepSeek-V3 and R1
// carry a next-token-prediction layer with its own embed_tokens and norms).
// An int8 trunk keeps those that are an embedding or a norm by their name in
// their stored precision, as it does the ones the name table knows, and
// converts an unknown projection like any other.
TEST(Quantize, Int8TrunkKeepsUnboundEmbeddingsAndNormsAsShipped) {
  const fs::path fixture = fs::path(STRATA_FIXTURES_DIR) / "models" / "ds_yarn_grouped";
  testfiles::TempDir tmp("strata-quant-extra");
  const fs::path src = tmp / "src";
  fs::create_directories(src);
  // Two shards without an index: the fixture's tensors and the extra ones.
  for (const auto& e : fs::directory_iterator(fixture))
    fs::copy_file(e.path(), src / (e.path().filename() == "model.safetensors" ? fs::path("model-00001-of-00002.safetensors")
                                                                              : e.path().filename()));
  const std::vector<float> values(4 * 32, 0.25f);
  testfiles::write_file(src / "model-00002-of-00002.safetensors",
                        testfiles::safetensors_bytes({
                            {"model.layers.99.embed_tokens.weight", "F32", {4, 32}, testfiles::raw_bytes(values)},
                            {"model.layers.99.enorm.weight", "F32", {4, 32}, testfiles::raw_bytes(values)},
                            {"model.layers.99.eh_proj.weight", "F32", {4, 32}, testfiles::raw_bytes(values)},
                        }));
  PackOptions p;
  p.source = src;
  p.out = tmp / "pack";
  p.trunk = "int8";
  pack_model(p);
  std::map<std::string, std::string> dtype;
  for (const auto& e : fs::directory_iterator(p.out / "trunk")) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream f(e.path(), std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    const nlohmann::json j = nlohmann::json::parse(header);
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "__metadata__") dtype[it.key()] = it.value().at("dtype").get<std::string>();
  }
  EXPECT_EQ(dtype["model.layers.99.embed_tokens.weight"], "F32");
  EXPECT_EQ(dtype["model.layers.99.enorm.weight"], "F32");
  EXPECT_EQ(dtype["model.layers.99.eh_proj.weight"], "I8");
}

}  // namespace
}  // namespace strata
