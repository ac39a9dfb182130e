// Streamed generation under faults (issue 17): drives that fail, return short
// or damaged reads, slow down or go away; files that change or shrink while a
// model runs. Each run ends as the fault-free run does, bit for bit, or with
// one clear error naming the file: never other tokens, never a signal.
//
// StreamedFaults.RandomFaultsGiveTheSameTokensOrOneClearError runs a few
// randomized runs per source in CI; STRATA_FAULT_RUNS=N runs N per source
// (and STRATA_FAULT_SEED another base seed) for the record.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "error_message.h"
#include "model/expert_heat.h"
#include "model/model.h"
#include "pack/manifest.h"
#include "pack/packer.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "runtime/streaming_experts.h"
#include "safetensors_writer.h"
#include "same_bits.h"
#include "storage/fault_injecting_storage.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(STRATA_FIXTURES_DIR) / "models";
const std::vector<int32_t> kPrompt = {5, 17, 3, 42, 9};

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// Sampling (temperature 1, fixed seed), so that routing moves from token to
// token and many experts are read.
Outcome generate_on(Model& m, int n = 6, const std::vector<int32_t>& prompt = kPrompt, uint64_t seed = 11) {
  GenerateOptions g;
  g.max_new_tokens = n;
  g.keep_logits = true;
  g.sampling = {1.0f, seed};
  GenerateResult r = generate(m, prompt, g);
  return {r.tokens, r.logits};
}

bool same_bits(const Outcome& a, const Outcome& b) {
  if (a.tokens != b.tokens || a.logits.size() != b.logits.size()) return false;
  for (size_t k = 0; k < a.logits.size(); ++k)
    if (a.logits[k].size() != b.logits[k].size() ||
        std::memcmp(a.logits[k].data(), b.logits[k].data(), a.logits[k].size() * sizeof(float)) != 0)
      return false;
  return true;
}

LoadOptions streamed(size_t slots) {
  LoadOptions o(2);
  o.stream = true;
  o.cache_slots = slots;
  o.heat = "none";
  return o;
}

// `o` with its reads going through a FaultInjectingStorage; `faults` points
// at it once the model is loaded.
LoadOptions on_faults(LoadOptions o, FaultInjectingStorage*& faults) {
  o.storage = [&faults](const StorageOptions& so) {
    auto s = std::make_unique<FaultInjectingStorage>(make_storage(so));
    faults = s.get();
    return s;
  };
  return o;
}

fs::path pack(const fs::path& source, const fs::path& out, std::vector<fs::path> drives = {}) {
  PackOptions p;
  p.source = source;
  p.out = out;
  p.drives = std::move(drives);
  for (const fs::path& d : p.drives) fs::create_directories(d);
  pack_model(p);
  return out;
}

void flip_byte(const fs::path& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// A clear error: one line, "expert read failed: " and the file (somewhere
// under `dir`) with the offset.
bool names_a_file_under(const std::string& msg, const fs::path& dir) {
  return msg.rfind("expert read failed: ", 0) == 0 && msg.find('\n') == std::string::npos &&
         msg.find(dir.string() + "/") != std::string::npos && msg.find(" offset ") != std::string::npos;
}

// --verify first (the default) checked a blob only the first time a run read
// it: changed on disk afterwards, it was read again and used unchecked.
TEST(StreamedFaults, ABlobChangedOnDiskIsCaughtWhenItIsReadAgain) {
  testfiles::TempDir tmp("strata-faults");
  const fs::path p = pack(kModels / "qwen_gqa", tmp / "pack");
  LoadOptions o = streamed(2);  // experts are evicted and read again
  o.prefetch = LoadOptions::Prefetch::Off;
  o.heat = (tmp / "heat.json").string();
  auto m = load_model(p, o);
  generate_on(*m);
  // Damage, on disk, every blob that run read (and checked), past its header.
  EXPECT_EQ(m->save_heat(), "");
  const ExpertHeat used = ExpertHeat::load(tmp / "heat.json", m->identity(), m->config().num_layers,
                                           m->config().n_routed_experts, /*strict=*/true);
  const Manifest man = Manifest::load(p);
  size_t damaged = 0;
  for (size_t l = 0; l < man.experts.size(); ++l)
    for (size_t e = 0; e < man.experts[l].size(); ++e)
      if (used.count(static_cast<int64_t>(l), static_cast<int64_t>(e)) > 0) {
        flip_byte(man.drive_file(p, man.experts[l][e].drive), man.experts[l][e].offset + 100);
        ++damaged;
      }
  ASSERT_GT(damaged, 0u);
  // Unchecked, the same prompt would read damaged bytes and carry on.
  const std::string msg = testfiles::error_message([&] { generate_on(*m); }, "expert read failed: ");
  testfiles::expect_phrase(msg, man.drive_file(p, 0).string());
  testfiles::expect_phrase(msg, "checksum mismatch");
}

// --verify always: a cached expert is hashed again at every use, so bytes
// that changed in memory after they landed are caught as well.
TEST(StreamedFaults, VerifyAlwaysChecksCacheHitsToo) {
  testfiles::TempDir tmp("strata-faults");
  const fs::path p = pack(kModels / "qwen_gqa", tmp / "pack");
  LoadOptions o = streamed(12);  // half the experts: hits and misses
  o.prefetch = LoadOptions::Prefetch::Off;
  auto run = [&](LoadOptions::Verify v) {
    o.verify = v;
    auto m = load_model(p, o);
    const Outcome out = generate_on(*m, 12);
    return std::make_pair(out, m->expert_stats());
  };
  const auto [first, first_stats] = run(LoadOptions::Verify::First);
  const auto [always, always_stats] = run(LoadOptions::Verify::Always);
  expect_same_bits(first.tokens, first.logits, always.tokens, always.logits);
  // First: every byte read from the drive, and nothing more.
  EXPECT_EQ(first_stats.bytes_verified, first_stats.bytes_read);
  ASSERT_GT(always_stats.hits, 0u);
  EXPECT_GT(always_stats.bytes_verified, always_stats.bytes_read);
}

// The same, where it matters: an expert whose bytes change in the cache
// after they landed is caught at its next use with --verify always.
TEST(StreamedFaults, VerifyAlwaysCatchesACachedExpertChangedInMemory) {
  testfiles::TempDir tmp("strata-faults");
  const fs::path p = pack(kModels / "qwen_gqa", tmp / "pack");
  const auto model = load_model(p, streamed(4));
  const ModelConfig& c = model->config();
  const Manifest man = Manifest::load(p);
  for (const auto verify : {ExpertVerify::First, ExpertVerify::Always}) {
    std::unique_ptr<Storage> storage = make_storage();
    ExpertCatalog catalog = catalog_from_manifest(man, p, *storage);
    StreamingOptions so;
    so.slots = 4;
    so.verify = verify;
    StreamingExpertProvider provider(c, std::move(catalog), std::move(storage), so);
    const int64_t layer = 0;
    const std::vector<int32_t> expert = {3};
    auto use = [&](bool damage) {
      ExpertFetch& f = provider.fetch(layer, expert);
      std::vector<std::pair<int, const ExpertWeights*>> got;
      ASSERT_EQ(f.next_batch(got, 1), 1u);
      if (damage) const_cast<uint8_t*>(got[0].second->down.data)[5] ^= 0x10;  // a bad bit in RAM
      f.end();
    };
    use(true);
    if (verify == ExpertVerify::First) {
      EXPECT_NO_THROW(use(false));  // a cache hit is taken as it is
      continue;
    }
    const std::string msg = testfiles::error_message([&] { use(false); }, "expert cache: layer 0 expert 3 changed in memory");
    testfiles::expect_phrase(msg, "checksum mismatch");
    EXPECT_NO_THROW(use(false)) << "read again from the drive";
  }
}

struct FaultTally {
  uint64_t runs = 0, identical = 0, clear_errors = 0, recovered = 0;
  uint64_t with_kind[4] = {}, combined = 0;  // runs with short reads, errors, delays, damaged bytes; with 2+ kinds
  FaultStats injected;
  void add(const FaultStats& s) {
    injected.reads += s.reads;
    injected.short_reads += s.short_reads;
    injected.errors += s.errors;
    injected.corruptions += s.corruptions;
    injected.delays += s.delays;
  }
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// One randomized run: a fresh load with a small cache (experts are read again
// and again), random fault kinds and rates, prefetch and read backend. After
// an error the faults stop and the same model must give the fault-free
// tokens: a failed request leaves nothing behind for the next one.
void random_run(const fs::path& model, const fs::path& files, bool checksums, uint64_t seed, const Outcome& want,
                FaultTally& tally) {
  std::mt19937_64 rng(seed);
  FaultInjectingStorage* faults = nullptr;
  LoadOptions o = on_faults(streamed(1 + rng() % 5), faults);
  o.prefetch = rng() % 2 ? LoadOptions::Prefetch::On : LoadOptions::Prefetch::Off;
  o.io_backend = rng() % 2 ? "io_uring" : "pread";
  if (checksums && rng() % 4 == 0) o.verify = LoadOptions::Verify::Always;
  RandomFaults rf;
  rf.seed = rng();
  // A random non-empty set of kinds; damaged bytes only where checksums can
  // catch them (a checkpoint read in place has none: pack it for that).
  const unsigned kinds = checksums ? 15 : 7;
  unsigned pick = 0;
  while (pick == 0) pick = static_cast<unsigned>(rng() % (kinds + 1)) & kinds;
  if (pick & 1) rf.short_one_in = 1 + rng() % 4;
  // Rates spread so that some runs meet no fault that matters: a pack run
  // makes ~30 raw reads, one in place ~120.
  if (pick & 2) rf.error_one_in = 10 + rng() % 300, rf.error = rng() % 3 ? EIO : ENODEV;
  if (pick & 4) rf.delay_one_in = 1 + rng() % 4, rf.max_delay = std::chrono::microseconds(50 + rng() % 1000);
  if (pick & 8) rf.corrupt_one_in = 10 + rng() % 200;
  SCOPED_TRACE(model.filename().string() + " seed " + std::to_string(seed) + " kinds " + std::to_string(pick));

  auto m = load_model(model, o);
  ASSERT_NE(faults, nullptr);
  faults->random_faults(rf);
  ++tally.runs;
  for (int k = 0; k < 4; ++k) tally.with_kind[k] += (pick >> k) & 1;
  tally.combined += __builtin_popcount(pick) > 1;
  Outcome got;
  std::string error;
  try {
    got = generate_on(*m);
  } catch (const Error& e) {
    error = e.what();
  }
  faults->random_faults({});
  tally.add(faults->stats());
  if (error.empty()) {
    EXPECT_TRUE(same_bits(want, got)) << "other tokens or logits under faults, and no error";
    tally.identical += same_bits(want, got);
    return;
  }
  EXPECT_TRUE(names_a_file_under(error, files)) << error;
  ++tally.clear_errors;
  try {
    const Outcome again = generate_on(*m);
    EXPECT_TRUE(same_bits(want, again)) << "after the error, with the faults gone: other tokens";
    tally.recovered += same_bits(want, again);
  } catch (const Error& e) {
    ADD_FAILURE() << "after the error (" << error << "), with the faults gone: " << e.what();
  }
}

TEST(StreamedFaults, RandomFaultsGiveTheSameTokensOrOneClearError) {
  testfiles::TempDir tmp("strata-faults");
  const fs::path hf = kModels / "ds_sharded";  // five shards, read in place
  const fs::path packed = pack(hf, tmp / "pack", {tmp / "d0", tmp / "d1"});
  const Outcome want = generate_on(*load_model(hf, LoadOptions(2)));
  const int runs = env_int("STRATA_FAULT_RUNS", 40);
  const uint64_t base = static_cast<uint64_t>(env_int("STRATA_FAULT_SEED", 1));
  FaultTally in_place, from_pack;
  for (int i = 0; i < runs && !HasFatalFailure(); ++i) {
    random_run(hf, hf, false, base * 1000003 + 2 * static_cast<uint64_t>(i), want, in_place);
    random_run(packed, tmp.path(), true, base * 1000003 + 2 * static_cast<uint64_t>(i) + 1, want, from_pack);
  }
  for (const auto& [name, t] : {std::pair{"in place", &in_place}, std::pair{"pack", &from_pack}}) {
    std::printf(
        "[faults] %s: %llu runs, %llu identical, %llu clear errors (%llu then identical with the faults gone); "
        "%llu raw reads, %llu short, %llu failed, %llu corrupted, %llu delayed; runs with short reads %llu, errors "
        "%llu, delays %llu, damaged bytes %llu, two kinds or more %llu\n",
        name, (unsigned long long)t->runs, (unsigned long long)t->identical, (unsigned long long)t->clear_errors,
        (unsigned long long)t->recovered, (unsigned long long)t->injected.reads,
        (unsigned long long)t->injected.short_reads, (unsigned long long)t->injected.errors,
        (unsigned long long)t->injected.corruptions, (unsigned long long)t->injected.delays,
        (unsigned long long)t->with_kind[0], (unsigned long long)t->with_kind[1], (unsigned long long)t->with_kind[2],
        (unsigned long long)t->with_kind[3], (unsigned long long)t->combined);
    EXPECT_EQ(t->identical + t->clear_errors, t->runs);
  }
  // The runs did meet faults, and both outcomes occurred.
  EXPECT_GT(from_pack.injected.errors + in_place.injected.errors, 0u);
  EXPECT_GT(from_pack.injected.corruptions, 0u);
  EXPECT_GT(from_pack.clear_errors + in_place.clear_errors, 0u);
  EXPECT_GT(from_pack.identical + in_place.identical, 0u);
}

// The reads of a request that failed go on landing after it ended, and fail
// too: none of that may end the next request, which never asked for them.
TEST(StreamedFaults, AFailedRequestLeavesNoFailureForTheNextOne) {
  const fs::path hf = kModels / "ds_sharded";
  const Outcome want = generate_on(*load_model(hf, LoadOptions(2)));
  FaultInjectingStorage* faults = nullptr;
  LoadOptions o = on_faults(streamed(6), faults);
  o.prefetch = LoadOptions::Prefetch::Off;
  o.io_backend = "pread";  // its threads hand each read back as it is done
  auto m = load_model(hf, o);
  ASSERT_NE(faults, nullptr);
  // Every read fails, each after a random wait of up to 40 ms: the first
  // failure ends the request while others are still on their way, and the
  // next request asks for the same experts at once.
  for (FileId f = 0; f < 5; ++f) faults->fail_range(f, 0, ~uint64_t{0} >> 1, EIO);
  RandomFaults slow;
  slow.delay_one_in = 1;
  slow.max_delay = std::chrono::milliseconds(40);
  faults->random_faults(slow);
  testfiles::error_message([&] { generate_on(*m); }, "expert read failed: ");
  ASSERT_GT(faults->pending(), 0u) << "every read had landed before the request ended";
  faults->clear();
  try {
    EXPECT_TRUE(same_bits(want, generate_on(*m)));
  } catch (const Error& e) {
    ADD_FAILURE() << "the next request failed: " << e.what();
  }
  EXPECT_GT(faults->stats().errors, 1u);
}

// A pack drive that is not there when the model opens is named; one that
// goes away mid-run (its directory removed: the open file still reads) changes
// nothing; one whose reads start failing mid-run is one clear error, and the
// next request, with the drive back, runs as before.
TEST(StreamedFaults, AMissingPackDriveIsOneClearError) {
  testfiles::TempDir tmp("strata-faults");
  const fs::path src = kModels / "ds_sharded";
  const fs::path p = pack(src, tmp / "pack", {tmp / "d0", tmp / "d1"});
  const Outcome want = generate_on(*load_model(src, LoadOptions(2)));
  const fs::path d1 = tmp / "d1";
  {
    fs::rename(d1, tmp / "away");
    const std::string msg = testfiles::error_message([&] { load_model(p, streamed(2)); });
    testfiles::expect_phrase(msg, "pack drive 1");
    testfiles::expect_phrase(msg, d1.string());
    // A file where the drive's directory was.
    std::ofstream(d1) << "not a drive";
    testfiles::expect_phrase(testfiles::error_message([&] { load_model(p, streamed(2)); }), "pack drive 1");
    fs::remove(d1);
    fs::rename(tmp / "away", d1);
  }
  FaultInjectingStorage* faults = nullptr;
  auto m = load_model(p, on_faults(streamed(2), faults));
  ASSERT_NE(faults, nullptr);
  fs::rename(d1, tmp / "away");
  EXPECT_TRUE(same_bits(want, generate_on(*m))) << "drive directory removed mid-run";
  // Every read of drive 1's file fails from now on, as a dead drive's do.
  const Manifest man = Manifest::load(p);
  FileId file1 = 0;
  while (faults->file(file1).path != man.drive_file(p, 1).string()) ++file1;
  faults->fail_range(file1, 0, ~uint64_t{0} >> 1, ENODEV);
  const std::string msg = testfiles::error_message([&] { generate_on(*m); }, "expert read failed: ");
  testfiles::expect_phrase(msg, man.drive_file(p, 1).string());
  testfiles::expect_phrase(msg, "No such device");
  faults->clear();
  EXPECT_TRUE(same_bits(want, generate_on(*m))) << "the drive is back";
}

// What `strata generate` does with an error: one line, exit status 1.
[[noreturn]] void generate_as_the_cli_does(const fs::path& model, const LoadOptions& o, const fs::path& shrink) {
  try {
    auto m = load_model(model, o);
    fs::resize_file(shrink, 0);  // after the load: mapped, opened, read ahead
    generate_on(*m);
  } catch (const Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
  std::_Exit(0);
}

// A checkpoint file truncated while a model runs from it: the pages of its
// mapping past the new end raise SIGBUS when touched, which ends the process
// with one line naming the file (util/mapped_file_guard.h).
TEST(StreamedFaultsDeathTest, AFileTruncatedUnderAMappedModelIsOneClearError) {
  testfiles::TempDir tmp("strata-faults");
  fs::copy(kModels / "qwen_gqa", tmp / "m", fs::copy_options::recursive);
  const fs::path file = tmp / "m" / "model.safetensors";
  EXPECT_EXIT(generate_as_the_cli_does(tmp / "m", LoadOptions(2), file), ::testing::ExitedWithCode(1),
              "strata: error: [^\n]*/m/model\\.safetensors: byte [0-9]+ cannot be read: the file shrank to 0 bytes "
              "after it was opened");
}

// Streamed in place, the trunk is mapped and the experts are read: whichever
// meets the shorter file first, the error names it.
TEST(StreamedFaultsDeathTest, AShardTruncatedWhileStreamingIsOneClearError) {
  testfiles::TempDir tmp("strata-faults");
  fs::copy(kModels / "ds_sharded", tmp / "m", fs::copy_options::recursive);
  for (const char* shard : {"model-00002-of-00005.safetensors", "model-00005-of-00005.safetensors"}) {
    SCOPED_TRACE(shard);
    const fs::path file = tmp / "m" / shard;
    const std::string copy = (tmp / "m" / "copy").string();
    fs::copy_file(file, copy, fs::copy_options::overwrite_existing);
    EXPECT_EXIT(generate_as_the_cli_does(tmp / "m", streamed(2), file), ::testing::ExitedWithCode(1),
                std::string("strata: error: [^\n]*/m/") + shard + "[^\n]*the file shrank");
    fs::rename(copy, file);
  }
}

// A pack's trunk is mapped too.
TEST(StreamedFaultsDeathTest, APackTrunkTruncatedWhileRunningIsOneClearError) {
  testfiles::TempDir tmp("strata-faults");
  const fs::path p = pack(kModels / "qwen_gqa", tmp / "pack");
  const fs::path trunk = p / "trunk" / "model.safetensors";
  ASSERT_TRUE(fs::exists(trunk));
  EXPECT_EXIT(generate_as_the_cli_does(p, streamed(2), trunk), ::testing::ExitedWithCode(1),
              "strata: error: [^\n]*/trunk/model\\.safetensors: byte [0-9]+ cannot be read: the file shrank");
}

}  // namespace
}  // namespace strata
