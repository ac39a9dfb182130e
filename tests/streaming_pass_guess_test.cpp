// When a pass of several parts guesses its next layer: while its first part
// runs, so that the next layer's reads go out behind this layer's own and
// the drive works through the later parts (on the H100 machine the drive
// sat idle ~60 ms at each MoE layer of a 4096-token prompt while the guess
// waited for the last part). The model's calls into the expert cache are
// recorded by a provider that passes them on to a streaming one.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "pack/manifest.h"
#include "pack/packer.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "runtime/streaming_experts.h"
#include "safetensors_writer.h"
#include "storage/storage.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Passes every call on and notes fetches ("f L") and guesses ("g L").
class RecordingProvider final : public ExpertProvider {
 public:
  RecordingProvider(std::unique_ptr<ExpertProvider> inner, std::vector<std::string>& log)
      : inner_(std::move(inner)), log_(log) {}
  ExpertFetch& fetch(int64_t layer, std::span<const int32_t> experts) override {
    log_.push_back("f " + std::to_string(layer));
    return inner_->fetch(layer, experts);
  }
  void note_held(int64_t layer, std::span<const int32_t> experts) override { inner_->note_held(layer, experts); }
  void release_layer(int64_t layer) override { inner_->release_layer(layer); }
  ExpertFetch& fetch_whole(int64_t layer, std::span<const int32_t> all) override {
    return inner_->fetch_whole(layer, all);
  }
  bool downloads() const override { return inner_->downloads(); }
  bool prefetch(int64_t layer, std::span<const int32_t> experts, GuessOf of) override {
    log_.push_back("g " + std::to_string(layer));
    return inner_->prefetch(layer, experts, of);
  }
  void keep_layer(int64_t layer) override { inner_->keep_layer(layer); }
  bool wants_prefetch() const override { return inner_->wants_prefetch(); }
  bool holds_layer(int64_t layer) const override { return inner_->holds_layer(layer); }
  bool streams() const override { return inner_->streams(); }
  bool serves_layer(int64_t layer) const override { return inner_->serves_layer(layer); }
  ExpertStats stats() const override { return inner_->stats(); }
  void begin_epoch() override { inner_->begin_epoch(); }
  void settle() override { inner_->settle(); }

 private:
  std::unique_ptr<ExpertProvider> inner_;
  std::vector<std::string>& log_;
};

// ds_noqlora_dense2: dense layers 0-1, MoE layers 2-3 of 8 experts. A
// 600-token prompt as one pass of 15 parts of 40 rows with `slots` cache
// slots, then 2 sampled tokens: the model's calls into the cache, and its
// prefill stats.
std::vector<std::string> calls(size_t slots, ExpertStats* prefill) {
  testfiles::TempDir tmp("strata-pass-guess");
  PackOptions p;
  p.source = fs::path(STRATA_FIXTURES_DIR) / "models" / "ds_noqlora_dense2";
  p.out = tmp / "pack";
  pack_model(p);
  LoadOptions o;
  o.stream = true;
  o.cache_slots = slots;
  o.heat = "none";
  o.threads = 2;
  o.context = 1024;
  o.allow_long_context = true;  // past the fixture's 128 positions: only the calls matter here
  o.max_batch = 40;
  o.max_pass = 600;
  auto m = load_model(p.out, o);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.n_routed_experts, 8);

  std::unique_ptr<Storage> storage = make_storage();
  ExpertCatalog catalog = catalog_from_manifest(Manifest::load(p.out), p.out, *storage);
  StreamingOptions so;
  so.slots = slots;
  std::vector<std::string> log;
  m->attach_experts(std::make_unique<RecordingProvider>(
                        std::make_unique<StreamingExpertProvider>(c, std::move(catalog), std::move(storage), so), log),
                    true, m->memory_plan());
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 600; ++i) prompt.push_back((i * 37 + 11) % 288);
  GenerateOptions g;
  g.max_new_tokens = 2;
  g.sampling = {1.0f, 11};
  *prefill = generate(*m, prompt, g).prefill_experts;
  return log;
}

// 16 slots hold both MoE layers: the dense layer 1 guesses layer 2 at its
// first part, layer 2 guesses layer 3 right after its first part's fetch
// (room for it beside all of layer 2's experts), and each MoE layer is
// fetched once a part. The decode step then finds both layers whole in the
// cache and guesses nothing.
TEST(StreamingPassGuess, APassGuessesTheNextLayerWhileItsFirstPartRuns) {
  ExpertStats prefill;
  const std::vector<std::string> log = calls(16, &prefill);
  std::vector<std::string> want = {"g 2", "f 2", "g 3"};
  for (int part = 1; part < 15; ++part) want.push_back("f 2");
  for (int part = 0; part < 15; ++part) want.push_back("f 3");
  for (const char* s : {"f 2", "f 3"}) want.push_back(s);
  EXPECT_EQ(log, want);
  EXPECT_EQ(prefill.prefetch_cancelled, 0u);
  EXPECT_EQ(prefill.misses, 0u);  // every expert guessed ahead (600 rows pick all 16)
}

// 12 slots: beside layer 2's 8 experts the first part may guess 4 of layer
// 3's. The guess, cut short, is made again at layer 2's last part (here it
// finds no more room: that part holds layer 2's 8), and layer 3's first part
// reads the rest: each expert is still read once. The decode step finds
// layer 3 whole in the cache (its 8 were the last read) and guesses layer 2
// only.
TEST(StreamingPassGuess, AGuessCutShortForTheLayersRoomIsToppedUpAtItsLastPart) {
  ExpertStats prefill;
  const std::vector<std::string> log = calls(12, &prefill);
  std::vector<std::string> want = {"g 2", "f 2", "g 3"};
  for (int part = 1; part < 15; ++part) want.push_back("f 2");
  want.push_back("g 3");
  for (int part = 0; part < 15; ++part) want.push_back("f 3");
  for (const char* s : {"g 2", "f 2", "f 3"}) want.push_back(s);
  EXPECT_EQ(log, want);
  EXPECT_EQ(prefill.prefetch_cancelled, 0u);
  EXPECT_EQ(prefill.misses + prefill.prefetch_issued, 16u);
}

}  // namespace
}  // namespace strata
