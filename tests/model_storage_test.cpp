// Whole models on the fault-injecting storage, handed in through
// LoadOptions::storage as a test would hand in any other source: short reads
// and a slow drive change timing only (logits bit-identical to the in-RAM
// run); a failing read or a corrupted byte is one clear error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/model.h"
#include "pack/packer.h"
#include "runtime/loader.h"
#include "safetensors_writer.h"
#include "error_message.h"
#include "same_bits.h"
#include "storage/fault_injecting_storage.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";

// Greedy decoding straight on the model: the prompt's last logits, then one
// row per new token. Returns every logits row.
std::vector<std::vector<float>> greedy(Model& m, std::vector<int32_t> tokens, int n) {
  const size_t vocab = static_cast<size_t>(m.config().vocab_size);
  auto cache = m.new_cache();
  std::vector<std::vector<float>> out;
  std::vector<float> logits(vocab);
  m.prefill(tokens, 0, *cache, logits.data());
  for (int k = 0; k < n; ++k) {
    out.push_back(logits);
    int32_t next = 0;
    for (size_t v = 1; v < vocab; ++v)
      if (logits[v] > logits[static_cast<size_t>(next)]) next = static_cast<int32_t>(v);
    const Row row{next, static_cast<int64_t>(tokens.size()), cache.get(), true};
    tokens.push_back(next);
    m.forward({&row, 1}, logits.data());
  }
  return out;
}

const std::vector<int32_t> kPrompt = {5, 17, 3, 42, 9, 11, 2};

// Loads `model` streamed through a FaultInjectingStorage over the real
// backend; `faults` points at it once loaded.
std::unique_ptr<Model> load_on_faults(const fs::path& model, FaultInjectingStorage*& faults, size_t slots) {
  LoadOptions o(2);
  o.stream = true;
  o.cache_slots = slots;
  o.heat = "none";
  o.storage = [&faults](const StorageOptions& so) {
    auto s = std::make_unique<FaultInjectingStorage>(make_storage(so));
    faults = s.get();
    return s;
  };
  return load_model(model, o);
}

class ModelOnFaultyStorage : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelOnFaultyStorage, ShortReadsAndASlowDriveChangeNoBits) {
  const fs::path dir = kModels / GetParam();
  const auto want = greedy(*load_model(dir, LoadOptions(2)), kPrompt, 5);
  FaultInjectingStorage* faults = nullptr;
  auto m = load_on_faults(dir, faults, 3);
  ASSERT_NE(faults, nullptr) << "the loader did not use the storage it was handed";
  faults->short_reads(4096);
  faults->slow_drive(0, std::chrono::microseconds(300));
  expect_same_logits(want, greedy(*m, kPrompt, 5));
  EXPECT_GT(faults->stats().short_reads, 0u);
  EXPECT_GT(faults->stats().delays, 0u);
}

TEST_P(ModelOnFaultyStorage, AFailingReadIsAClearErrorNamingTheFile) {
  FaultInjectingStorage* faults = nullptr;
  auto m = load_on_faults(kModels / GetParam(), faults, 3);
  ASSERT_NE(faults, nullptr);
  faults->fail_range(0, 0, ~uint64_t{0} >> 1, EIO);
  const std::string msg = testfiles::error_message([&] { greedy(*m, kPrompt, 2); });
  testfiles::expect_phrase(msg, faults->file(0).path);
  testfiles::expect_phrase(msg, "offset");
  testfiles::expect_phrase(msg, "Input/output error");
  EXPECT_GT(faults->stats().errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, ModelOnFaultyStorage, ::testing::Values("qwen_gqa", "ds_fp8", "gptoss_mxfp4"));

TEST(PackOnFaultyStorage, ACorruptedByteInFlightIsCaughtByItsChecksum) {
  testfiles::TempDir tmp("strata-faulty-pack");
  PackOptions p;
  p.source = kModels / "qwen_gqa";
  p.out = tmp / "pack";
  pack_model(p);
  const auto want = greedy(*load_model(kModels / "qwen_gqa", LoadOptions(2)), kPrompt, 4);
  {
    FaultInjectingStorage* faults = nullptr;
    auto m = load_on_faults(p.out, faults, 2);
    ASSERT_NE(faults, nullptr);
    faults->short_reads(8192);
    expect_same_logits(want, greedy(*m, kPrompt, 4));
  }
  FaultInjectingStorage* faults = nullptr;
  auto m = load_on_faults(p.out, faults, 2);
  ASSERT_NE(faults, nullptr);
  // Every 4 KiB of the expert file gets one byte flipped as it lands: the
  // bytes on disk are intact, so only the checksum on arrival can catch it.
  for (uint64_t off = 4096 + 100; off < faults->file(0).size; off += 4096) faults->corrupt(0, off);
  const std::string msg = testfiles::error_message([&] { greedy(*m, kPrompt, 4); });
  testfiles::expect_phrase(msg, faults->file(0).path);
  testfiles::expect_phrase(msg, "checksum mismatch");
  EXPECT_GT(faults->stats().corruptions, 0u);
}

}  // namespace
}  // namespace strata
