// The expert cache's choice of a slot to reuse while a pass of several parts
// runs a layer (ExpertProvider::keep_layer): another layer's expert goes
// first; a read the step waits for still takes a kept one when nothing else
// is free; a guess never does.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "pack/manifest.h"
#include "pack/packer.h"
#include "runtime/loader.h"
#include "runtime/streaming_experts.h"
#include "safetensors_writer.h"
#include "storage/storage.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// A cache of `slots` slots of the pack at `pack`.
std::unique_ptr<StreamingExpertProvider> provider_of(const fs::path& pack, const ModelConfig& c, size_t slots) {
  std::unique_ptr<Storage> storage = make_storage();
  ExpertCatalog catalog = catalog_from_manifest(Manifest::load(pack), pack, *storage);
  StreamingOptions so;
  so.slots = slots;
  return std::make_unique<StreamingExpertProvider>(c, std::move(catalog), std::move(storage), so);
}

class KeepLayer : public ::testing::Test {
 protected:
  void SetUp() override {
    PackOptions p;
    p.source = fs::path(STRATA_FIXTURES_DIR) / "models" / "qwen_gqa";
    p.out = tmp_ / "pack";
    pack_model(p);
    LoadOptions o;
    o.stream = true;
    o.cache_slots = 4;
    o.heat = "none";
    config_ = load_model(p.out, o)->config();
    ASSERT_GE(config_.n_routed_experts, 3);
    ASSERT_GE(config_.num_layers, 3);
    provider_ = provider_of(p.out, config_, 4);
  }
  // Asks for `experts` of `layer` and lets them go again.
  void use(int64_t layer, std::vector<int32_t> experts) {
    ExpertFetch& f = provider_->fetch(layer, experts);
    std::vector<std::pair<int, const ExpertWeights*>> got;
    while (f.next_batch(got, experts.size()) > 0) {
    }
    f.end();
  }
  uint64_t misses() const { return provider_->stats().misses; }

  testfiles::TempDir tmp_{"strata-keep"};
  ModelConfig config_;
  std::unique_ptr<StreamingExpertProvider> provider_;
};

TEST_F(KeepLayer, ReadsTakeAnotherLayersSlotFirst) {
  use(0, {0, 1});
  use(1, {0, 1});  // four slots: layer 0's two (the older), layer 1's two
  // Kept, layer 0's experts stay: a read for layer 1 takes a slot of its own layer.
  provider_->keep_layer(0);
  use(1, {2});
  const uint64_t before = misses();
  use(0, {0, 1});
  EXPECT_EQ(misses(), before);
  provider_->keep_layer(-1);
  // Without a kept layer the least used (then the oldest) goes: layer 1's expert 1.
  use(2, {0});
  const uint64_t now = misses();
  use(1, {1});
  EXPECT_EQ(misses(), now + 1);
}

TEST_F(KeepLayer, AReadStillTakesAKeptSlotWhenNothingElseIsFree) {
  use(0, {0, 1, 2});
  use(1, {0});
  provider_->keep_layer(0);
  // Two experts of layer 2: layer 1's slot, then one of the kept layer's.
  use(2, {0, 1});
  const uint64_t before = misses();
  use(0, {0, 1, 2});
  EXPECT_EQ(misses(), before + 1);
  provider_->keep_layer(-1);
}

TEST_F(KeepLayer, AGuessNeverTakesAKeptSlot) {
  ASSERT_GE(config_.n_routed_experts, 4);
  use(0, {0, 1, 2, 3});  // every slot holds the kept layer's
  provider_->keep_layer(0);
  provider_->prefetch(1, std::vector<int32_t>{0});
  EXPECT_EQ(provider_->stats().prefetch_issued, 0u);
  // Once the layer is no longer kept, the guess takes one of its slots.
  provider_->keep_layer(-1);
  provider_->prefetch(1, std::vector<int32_t>{0});
  EXPECT_EQ(provider_->stats().prefetch_issued, 1u);
}

// A step's guess takes a quarter of the cache at most (the experts the
// next tokens need stay); a pass's, whose parts then ask for its layer
// whole, three quarters: the last quarter stays for a request's misses.
TEST_F(KeepLayer, APassGuessMayTakeThreeQuartersOfTheCache) {
  ASSERT_GE(config_.n_routed_experts, 4);
  provider_->prefetch(1, std::vector<int32_t>{0, 1, 2});
  EXPECT_EQ(provider_->stats().prefetch_issued, 1u);
  // The same layer's guess again, a pass's: two more (expert 0 is guessed already), then the cap.
  provider_->prefetch(1, std::vector<int32_t>{0, 1, 2, 3}, ExpertProvider::GuessOf::Pass);
  EXPECT_EQ(provider_->stats().prefetch_issued, 3u);
  // The slot left reads a request for experts no guess named.
  const uint64_t before = misses();
  use(0, {1});
  EXPECT_EQ(misses(), before + 1);
}

// A pass stopped before the layer it guessed for leaves its guesses unasked:
// the next guess, for another layer, finds them stale and not in its way
// (they would otherwise hold three quarters of the cache until that layer
// came round again, and no step could guess); landed, they stay as ordinary
// entries.
TEST_F(KeepLayer, AStoppedPasssGuessesDoNotHoldTheNextGuessBack) {
  ASSERT_GE(config_.n_routed_experts, 4);
  provider_->prefetch(2, std::vector<int32_t>{0, 1, 2}, ExpertProvider::GuessOf::Pass);
  ASSERT_EQ(provider_->stats().prefetch_issued, 3u);
  provider_->settle();  // landed
  provider_->prefetch(1, std::vector<int32_t>{3});  // a quarter of 4 slots: room for one
  EXPECT_EQ(provider_->stats().prefetch_issued, 4u);
  EXPECT_EQ(provider_->stats().prefetch_cancelled, 0u);  // nothing was still being read
  const uint64_t before = misses();
  use(2, {0, 1});  // still cached
  EXPECT_EQ(misses(), before);
  EXPECT_EQ(provider_->stats().prefetch_used, 0u);  // as ordinary entries, not guesses
}

// A guess never keeps a request from its reads: in a cache of two slots a
// pass's guesses may take both, and a pass stopped before the layer they
// were for leaves them there; a request for other experts then takes a
// landed guess's slot rather than finding none.
TEST_F(KeepLayer, ARequestTakesALandedGuessWhenNothingElseIsFree) {
  const std::unique_ptr<StreamingExpertProvider> two = provider_of(tmp_ / "pack", config_, 2);
  StreamingExpertProvider& small = *two;
  small.prefetch(1, std::vector<int32_t>{0, 1}, ExpertProvider::GuessOf::Pass);
  ASSERT_EQ(small.stats().prefetch_issued, 2u);
  small.settle();  // both landed
  const std::vector<int32_t> want = {0, 1};
  ExpertFetch& f = small.fetch(0, want);
  std::vector<std::pair<int, const ExpertWeights*>> got;
  size_t n = 0;
  while (f.next_batch(got, want.size()) > 0) n += got.size();
  f.end();
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(small.stats().misses, 2u);
}

// A pass of three parts over layer 1: a guess for it (3) stays in flight
// and counted through the parts that do not ask for it, and the last part,
// which does, finds it: used, not cancelled, predicted right once.
TEST_F(KeepLayer, GuessesSurviveThePartsBeforeTheLastAndCountOnce) {
  use(0, {0, 1});
  provider_->prefetch(1, std::vector<int32_t>{3});  // a quarter of 4 slots: one guess
  ASSERT_EQ(provider_->stats().prefetch_issued, 1u);
  provider_->keep_layer(1);
  use(1, {2});
  use(1, {2});
  provider_->keep_layer(-1);
  const uint64_t before = misses();
  use(1, {3, 2});
  EXPECT_EQ(misses(), before);
  EXPECT_EQ(provider_->stats().prefetch_used, 1u);
  EXPECT_EQ(provider_->stats().prefetch_cancelled, 0u);
  EXPECT_EQ(provider_->stats().predicted_right, 1u);
}

// A layer guessed twice before its fetch (a dense layer's guess after the
// MoE layer before it guessed past it): the second guess is the one counted.
TEST_F(KeepLayer, ALayerGuessedTwiceCountsTheLastGuess) {
  provider_->prefetch(1, std::vector<int32_t>{0, 1}, ExpertProvider::GuessOf::Token);
  provider_->prefetch(1, std::vector<int32_t>{2, 3}, ExpertProvider::GuessOf::Token);
  use(1, {2, 0});
  EXPECT_EQ(provider_->stats().predicted, 2u);
  EXPECT_EQ(provider_->stats().predicted_right, 1u);
}

// A pass guesses its next layer while its first part runs: the guesses for
// the layer it is in, which its later parts still ask for, are neither
// cancelled nor taken out of the counts by the next layer's guess.
TEST_F(KeepLayer, TheNextLayersGuessLeavesTheGuessesOfTheLayerAPassIsIn) {
  using GuessOf = ExpertProvider::GuessOf;
  const size_t E = static_cast<size_t>(config_.n_routed_experts);
  provider_ = provider_of(tmp_ / "pack", config_, E + 4);
  EXPECT_TRUE(provider_->prefetch(1, std::vector<int32_t>{2, 3}, GuessOf::Pass));
  ASSERT_EQ(provider_->stats().prefetch_issued, 2u);
  provider_->keep_layer(1);
  use(1, {2});                                                     // the first part
  EXPECT_TRUE(provider_->prefetch(2, std::vector<int32_t>{0}, GuessOf::Pass));  // the next layer's guess
  EXPECT_EQ(provider_->stats().prefetch_issued, 3u);
  provider_->keep_layer(-1);
  const uint64_t before = misses();
  use(1, {3});  // the last part
  use(2, {0});
  EXPECT_EQ(misses(), before);
  EXPECT_EQ(provider_->stats().prefetch_used, 3u);
  EXPECT_EQ(provider_->stats().prefetch_cancelled, 0u);
  EXPECT_EQ(provider_->stats().predicted, 3u);
  EXPECT_EQ(provider_->stats().predicted_right, 3u);
}

// While a pass is in a layer, its guess at the next layer leaves the cache
// room for all of that layer's experts (its later parts read what the
// earlier ones did not pick): in E + 2 slots, two guesses, and the guess
// says it was cut short. At the layer's last part the same guess may take
// three quarters of the cache, and goes out whole.
TEST_F(KeepLayer, AGuessWhileAPassIsInALayerLeavesItRoomForAllItsExperts) {
  using GuessOf = ExpertProvider::GuessOf;
  const size_t E = static_cast<size_t>(config_.n_routed_experts);
  provider_ = provider_of(tmp_ / "pack", config_, E + 2);
  provider_->keep_layer(1);
  use(1, {0});
  const std::vector<int32_t> guess = {0, 1, 2, 3};
  EXPECT_FALSE(provider_->prefetch(2, guess, GuessOf::Pass));
  EXPECT_EQ(provider_->stats().prefetch_issued, 2u);
  provider_->keep_layer(-1);
  EXPECT_TRUE(provider_->prefetch(2, guess, GuessOf::Pass));
  EXPECT_EQ(provider_->stats().prefetch_issued, 4u);
  EXPECT_EQ(provider_->stats().prefetch_cancelled, 0u);
  EXPECT_EQ(provider_->stats().predicted, 4u);  // the second guess replaced the first in the counts
}

// Every part asks for the guessed expert: it counts once.
TEST_F(KeepLayer, AGuessAskedByEveryPartCountsOnce) {
  use(0, {0, 1});
  provider_->prefetch(1, std::vector<int32_t>{3});
  provider_->keep_layer(1);
  use(1, {3});
  use(1, {3});
  provider_->keep_layer(-1);
  use(1, {3});
  EXPECT_EQ(provider_->stats().predicted, 1u);
  EXPECT_EQ(provider_->stats().predicted_right, 1u);
}

}  // namespace
}  // namespace strata
