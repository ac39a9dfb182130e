// A pack is input like any file (issue 17): a manifest that does not
// describe its model, a flipped byte in its trunk, a source that could not
// load, a source that changed under an interrupted pack, and a pack opened
// half-written each end in one clear error, never a crash or wrong tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "model/checkpoint.h"
#include "pack/manifest.h"
#include "pack/packer.h"
#include "pack_test_support.h"
#include "runtime/loader.h"
#include "safetensors_writer.h"
#include "storage/pack_dir.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace clitest;
using namespace packtest;
using json = nlohmann::json;

// `strata generate` on the pack: the way a user meets it.
CommandResult generate(const fs::path& pack) {
  return run_strata("generate " + pack.string() + " --prompt-ids 1,2,3 -n 2 --threads 1");
}

// One pack of a fixture per suite, copied fresh for each case.
class PackCopy {
 public:
  PackCopy(const std::string& fixture_name, const std::string& tag) : tmp_(tag) {
    pack_model(pack_of(fixture(fixture_name), pack()));
  }
  fs::path pack() const { return tmp_.path() / "pack"; }
  fs::path dir() const { return tmp_.path(); }

 private:
  testfiles::TempDir tmp_;
};

// Matrix `matrix` of the first layout, changed by `edit`.
void edit_layout(const fs::path& pack, const std::string& matrix, const std::function<void(json&)>& edit) {
  edit_manifest(pack, [&](json& j) { edit(j["layouts"][0][matrix]); });
}

void expect_manifest_error(const fs::path& pack, const std::string& phrase) {
  const CommandResult r = generate(pack);
  expect_clean_error(r, phrase);
  EXPECT_NE(r.err.find((pack / "manifest.json").string()), std::string::npos) << r.err;
}

// --- the manifest against the model -------------------------------------

TEST(PackManifest, ZeroScaleGroupOrBlockSizeIsAClearError) {
  {
    // A scale group of 0 on int4 weights, and scales of group 0 on a format
    // that has none (the kernels divided by it).
    PackCopy p("ds_int4_ct", "strata-manifest");
    edit_layout(p.pack(), "gate", [](json& m) { m["scale_group"] = 0; });
    expect_manifest_error(p.pack(), "layout 0 gate: 'scale_group' must be positive");
  }
  {
    PackCopy p("qwen_gqa", "strata-manifest");
    edit_layout(p.pack(), "up",
                [](json& m) { m.update({{"scales", 64}, {"scale_dtype", "F32"}, {"scale_group", 0}}); });
    expect_manifest_error(p.pack(), "layout 0 up: 'scale_group' must be positive");
  }
  for (const char* field : {"block_out", "block_in"}) {
    PackCopy p("ds_fp8", "strata-manifest");
    edit_layout(p.pack(), "down", [&](json& m) { m[field] = 0; });
    expect_manifest_error(p.pack(), std::string("layout 0 down: '") + field + "' must be positive");
  }
  {
    // A block scale of block size 0 on weights that take none.
    PackCopy p("qwen_gqa", "strata-manifest");
    edit_layout(p.pack(), "gate", [](json& m) { m.update({{"block_scale", 64}, {"block_out", 0}, {"block_in", 0}}); });
    expect_manifest_error(p.pack(), "layout 0 gate: 'block_out' must be positive");
  }
}

TEST(PackManifest, HugeDimensionsAreAClearError) {
  const int64_t two32 = int64_t{1} << 32, two33 = int64_t{1} << 33, max = INT64_MAX;
  for (const auto& [out, in] : {std::pair{two32, two32}, std::pair{two33, two33}, std::pair{int64_t{32}, max},
                                std::pair{max, int64_t{64}}}) {
    SCOPED_TRACE(std::to_string(out) + " x " + std::to_string(in));
    PackCopy p("qwen_gqa", "strata-manifest");
    edit_layout(p.pack(), "gate", [&](json& m) {
      m["out"] = out;
      m["in"] = in;
    });
    expect_manifest_error(p.pack(), "more than any model has");
  }
}

TEST(PackManifest, SwappedOrHalvedDimensionsAreAClearError) {
  // qwen_gqa: experts 32 wide over a hidden size of 64. Each of these keeps
  // the bytes of the matrix, so its blob still adds up.
  for (const auto& [matrix, out, in] : {std::tuple{"gate", 64, 32}, std::tuple{"gate", 16, 128},
                                        std::tuple{"down", 32, 64}, std::tuple{"up", 64, 32}}) {
    SCOPED_TRACE(std::string(matrix) + " " + std::to_string(out) + " x " + std::to_string(in));
    PackCopy p("qwen_gqa", "strata-manifest");
    edit_layout(p.pack(), matrix, [&](json& m) {
      m["out"] = out;
      m["in"] = in;
    });
    const std::string want = std::string(matrix) == "down" ? "[64, 32]" : "[32, 64]";
    expect_manifest_error(p.pack(), std::string("layout 0 ") + matrix + ": is [" + std::to_string(out) + ", " +
                                        std::to_string(in) + "] but the config implies " + want);
  }
}

TEST(PackManifest, IndicesPast32BitsAreNotWrappedToZero) {
  const uint64_t two32 = uint64_t{1} << 32;
  for (const auto& [field, name] : {std::pair{0, "drive"}, std::pair{4, "layout"}}) {
    PackCopy p("qwen_gqa", "strata-manifest");
    edit_manifest(p.pack(), [&](json& j) { j["experts"][0][1][field] = two32; });
    expect_manifest_error(p.pack(), std::string("layer 0 expert 1: ") + name + " 4294967296 is not listed");
  }
}

// Found by the long fuzz campaign (tools/fuzz.sh manifest; the inputs are
// in fuzz/corpus/manifest/regression-*): fields of the wrong JSON type
// escaped as nlohmann's exceptions, and a float where an integer belongs was
// converted with undefined behaviour.
TEST(PackManifest, FieldsOfTheWrongTypeAreAClearError) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["format"] = json::object(); }, "not a strata pack manifest"},
      {[](json& j) { j["version"] = 1.9e19; }, "manifest version missing or not an integer"},
      {[](json& j) { j["version"] = "1"; }, "manifest version missing or not an integer"},
      {[](json& j) { j["source"] = json::array(); }, "malformed manifest"},
      {[](json& j) { j["drives"][0]["bytes"] = 1.8e24; }, "'bytes' must be a non-negative integer"},
      {[](json& j) { j["drives"][0]["path"] = 7; }, "malformed manifest"},
  };
  for (const auto& [edit, phrase] : cases) {
    PackCopy p("qwen_gqa", "strata-manifest");
    edit_manifest(p.pack(), edit);
    expect_manifest_error(p.pack(), phrase);
  }
}

TEST(PackManifest, EntriesThatPackWouldNotWriteAreClearErrors) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* phrase;
  };
  const Case cases[] = {
      {"length", [](json& j) { j["experts"][0][2][2] = j["experts"][0][2][2].get<uint64_t>() + 64; },
       "layer 0 expert 2: length"},
      {"offset past the file", [](json& j) { j["experts"][1][0][1] = uint64_t{1} << 40; }, "reaches past the"},
      {"offset wraps", [](json& j) { j["experts"][1][0][1] = UINT64_MAX - 4095; }, "layer 1 expert 0"},
      {"range moved",
       [](json& j) { j["layouts"][0]["up"]["data"] = j["layouts"][0]["up"]["data"].get<int64_t>() + 64; },
       "layout 0: range 1 is at"},
      {"a bias qwen experts do not have", [](json& j) { j["layouts"][0]["down"]["bias"] = 1 << 20; }, "layout 0"},
      {"config summary", [](json& j) { j["config"]["hidden_size"] = 128; },
       "config.hidden_size is 128 but the trunk's config says 64"},
      {"layers", [](json& j) { j["experts"].erase(2); }, "lists 2 layers"},
      {"drive file a path", [](json& j) { j["drives"][0]["file"] = "../../etc/passwd"; }, "drive 0: 'file'"},
      {"checksum", [](json& j) { j["experts"][0][0][3] = "-000000000000001"; }, "checksum must be 16"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    PackCopy p("qwen_gqa", "strata-manifest");
    edit_manifest(p.pack(), c.edit);
    expect_manifest_error(p.pack(), c.phrase);
  }
}

TEST(PackManifest, ALossyPackMustHoldWhatItsConversionWrites) {
  testfiles::TempDir tmp("strata-manifest");
  PackOptions o = pack_of(fixture("qwen_gqa"), tmp.path() / "int4");
  o.experts = "int4";
  pack_model(o);
  // F16 scales in place of BF16 ones, the same bytes: not what --experts
  // int4 writes (and read as such, wrong weights).
  edit_layout(o.out, "gate", [](json& m) { m["scale_dtype"] = "F16"; });
  expect_manifest_error(o.out, "layout 0 gate: is I32, not what re-quantizing the experts to int4 writes");
}

// --- the trunk's checksums ------------------------------------------------

TEST(PackTrunk, AFlippedByteAnywhereInTheTrunkIsOneClearError) {
  PackCopy p("qwen_gqa", "strata-trunk");
  const fs::path st = p.pack() / "trunk" / "model.safetensors";
  const uint64_t size = fs::file_size(st);
  struct Spot {
    fs::path file;
    uint64_t offset;
  };
  const Spot spots[] = {{st, 20},           {st, size / 3},  {st, size / 2}, {st, size - 1},
                        {p.pack() / "trunk" / "config.json", 30},
                        {p.pack() / "trunk" / "generation_config.json", 5}};
  for (const Spot& s : spots) {
    SCOPED_TRACE(s.file.string() + " offset " + std::to_string(s.offset));
    flip_byte(s.file, s.offset);
    const CommandResult r = generate(p.pack());
    expect_clean_error(r, "checksum mismatch");
    EXPECT_NE(r.err.find(s.file.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("pack it again"), std::string::npos) << r.err;
    flip_byte(s.file, s.offset);
  }
  EXPECT_EQ(generate(p.pack()).exit_code, 0);
}

TEST(PackTrunk, AFlippedByteInAGgufTrunkOrItsTokenizerIsCaughtBeforeItIsRead) {
  testfiles::TempDir tmp("strata-trunk");
  synth_model(tmp.path() / "m.gguf", 5, synth::Format::Gguf);
  pack_model(pack_of(tmp.path() / "m.gguf", tmp.path() / "pack"));
  const fs::path trunk = tmp.path() / "pack" / "trunk.gguf";
  // The header (where the tokenizer is) and the tensor data.
  for (uint64_t at : {uint64_t{200}, fs::file_size(trunk) - 10}) {
    SCOPED_TRACE(at);
    flip_byte(trunk, at);
    expect_clean_error(run_strata("generate " + (tmp.path() / "pack").string() + " --prompt hello -n 1"),
                       "checksum mismatch");
    EXPECT_THROW(Tokenizer::for_model(tmp.path() / "pack"), Error);
    flip_byte(trunk, at);
  }
}

TEST(PackTrunk, ATokenizerFileIsVerifiedBeforeTheTokenizerReadsIt) {
  testfiles::TempDir tmp("strata-trunk");
  synth_model(tmp.path() / "src", 5);
  pack_model(pack_of(tmp.path() / "src", tmp.path() / "pack"));
  const fs::path tok = tmp.path() / "pack" / "trunk" / "tokenizer.json";
  ASSERT_TRUE(fs::exists(tok));
  flip_byte(tok, fs::file_size(tok) / 2);
  try {
    Tokenizer::for_model(tmp.path() / "pack");
    FAIL() << "a damaged tokenizer.json was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json bytes 0-"), std::string::npos) << e.what();
  }
}

TEST(PackTrunk, APackFromBeforeTrunkChecksumsOpensWithANotice) {
  PackCopy p("qwen_gqa", "strata-trunk");
  fs::remove(p.pack() / kTrunkChecksums);
  // Named by the manifest but gone: damaged.
  expect_clean_error(generate(p.pack()), "trunk.xxh3: missing, but manifest.json says the trunk is checksummed");
  // Never named: an older pack, which loads and says its trunk is unverified.
  edit_manifest(p.pack(), [](json& j) { j.erase("trunk_checksums"); });
  LoadOptions o;
  o.threads = 1;
  std::vector<std::string> notices;
  o.notice = [&](const std::string& s) { notices.push_back(s); };
  load_model(p.pack(), o);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("its trunk is not verified"), std::string::npos) << notices[0];
}

TEST(PackTrunk, ADamagedChecksumListIsAClearError) {
  PackCopy p("qwen_gqa", "strata-trunk");
  const fs::path list = p.pack() / kTrunkChecksums;
  flip_byte(list, 40);
  expect_clean_error(generate(p.pack()), "trunk.xxh3: damaged");
}

// --- the source, before anything is written -------------------------------

// qwen_gqa's tensors, changed by `edit`, written as a model beside its config.
fs::path edited_source(const fs::path& dir, const std::function<void(std::vector<testfiles::TensorSpec>&)>& edit) {
  const Checkpoint ck = open_checkpoint(fixture("qwen_gqa"));
  std::vector<testfiles::TensorSpec> tensors;
  for (const std::string& name : ck.source->names()) {
    const TensorView& t = ck.source->get(name);
    tensors.push_back(
        {name, dtype_name(t.dtype), t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
  }
  edit(tensors);
  fs::create_directories(dir);
  fs::copy_file(fixture("qwen_gqa") / "config.json", dir / "config.json");
  testfiles::write_file(dir / "model.safetensors", testfiles::safetensors_bytes(tensors));
  return dir;
}

testfiles::TensorSpec& tensor(std::vector<testfiles::TensorSpec>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

void erase_tensor(std::vector<testfiles::TensorSpec>& ts, const std::string& name) {
  std::erase_if(ts, [&](const testfiles::TensorSpec& t) { return t.name == name; });
}

TEST(PackSource, MissingEmptyOrTransposedTensorsAreRefusedBeforeAnythingIsWritten) {
  struct Case {
    const char* what;
    std::function<void(std::vector<testfiles::TensorSpec>&)> edit;
    const char* tensor;
  };
  const Case cases[] = {
      {"missing trunk tensor", [](auto& ts) { erase_tensor(ts, "model.layers.1.self_attn.o_proj.weight"); },
       "model.layers.1.self_attn.o_proj.weight"},
      {"empty trunk tensor",
       [](auto& ts) {
         auto& t = tensor(ts, "model.layers.2.post_attention_layernorm.weight");
         t.shape = {0};
         t.bytes.clear();
       },
       "model.layers.2.post_attention_layernorm.weight"},
      {"transposed trunk tensor",
       [](auto& ts) {
         auto& t = tensor(ts, "model.layers.0.self_attn.q_proj.weight");
         std::swap(t.shape[0], t.shape[1]);
       },
       "model.layers.0.self_attn.q_proj.weight"},
      {"missing expert", [](auto& ts) { erase_tensor(ts, "model.layers.2.mlp.experts.5.up_proj.weight"); },
       "model.layers.2.mlp.experts.5.up_proj.weight"},
      {"transposed expert",
       [](auto& ts) {
         auto& t = tensor(ts, "model.layers.1.mlp.experts.3.down_proj.weight");
         std::swap(t.shape[0], t.shape[1]);
       },
       "model.layers.1.mlp.experts.3.down_proj.weight"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    testfiles::TempDir tmp("strata-source");
    const fs::path src = edited_source(tmp.path() / "src", c.edit);
    const fs::path out = tmp.path() / "pack";
    const CommandResult r = run_strata("pack " + src.string() + " --out " + out.string() + " -q");
    expect_clean_error(r, c.tensor);
    EXPECT_NE(r.err.find(src.string()), std::string::npos) << r.err;  // the file (or its folder)
    EXPECT_FALSE(fs::exists(out)) << "written before the source was checked";
  }
}

// --- resuming ------------------------------------------------------------

// Gives `file` the modification time it had, as a copy that keeps times does.
struct KeepTime {
  explicit KeepTime(fs::path f) : file(std::move(f)), time(fs::last_write_time(file)) {}
  ~KeepTime() { fs::last_write_time(file, time); }
  fs::path file;
  fs::file_time_type time;
};

// Packs `src` up to layer 2, lets `change` alter it in place, and packs
// again: the run starts over saying why (`why`), and its pack is what a
// straight pack of the changed source is, byte for byte.
void expect_starts_over(const fs::path& src, const fs::path& dir, const std::function<void()>& change,
                        const std::string& why) {
  PackOptions o = pack_of(src, dir / "pack");
  o.stop_after_layers = 2;
  EXPECT_THROW(pack_model(o), Error);
  change();
  o.stop_after_layers = -1;
  std::vector<std::string> notices;
  o.notice = [&](const std::string& s) { notices.push_back(s); };
  const PackReport r = pack_model(o);
  EXPECT_TRUE(r.restarted);
  EXPECT_EQ(r.layers_resumed, 0);
  ASSERT_FALSE(notices.empty());
  EXPECT_NE(notices.back().find(why), std::string::npos) << notices.back();
  pack_model(pack_of(src, dir / "straight"));
  EXPECT_EQ(difference(dir / "straight", o.out), "");
}

TEST(PackResume, ASourceChangedInPlaceWithTheSameSizeAndTimeStartsOver) {
  testfiles::TempDir tmp("strata-resume");
  const fs::path src = synth_model(tmp.path() / "src", 1);
  const fs::path other = synth_model(tmp.path() / "other", 2);  // the same shapes, other weights
  // The other model's bytes in the source's files, sizes and times kept:
  // nothing of the first may be left in the pack.
  expect_starts_over(src, tmp.path(), [&] {
    for (const auto& e : fs::directory_iterator(src)) {
      ASSERT_EQ(fs::file_size(e.path()), fs::file_size(other / e.path().filename()));
      KeepTime keep(e.path());
      fs::copy_file(other / e.path().filename(), e.path(), fs::copy_options::overwrite_existing);
    }
  }, "starting over");
}

TEST(PackResume, ExpertsChangedInPlaceAreCaughtByWhatWasWritten) {
  testfiles::TempDir tmp("strata-resume");
  const fs::path src = synth_model(tmp.path() / "src", 1);
  // Every routed expert of layers 0 and 1 changed by a byte, in place: the
  // headers, sizes, times and trunk are as they were.
  expect_starts_over(src, tmp.path(), [&] {
    const Checkpoint ck = open_checkpoint(src);
    std::vector<std::pair<fs::path, uint64_t>> spots;
    for (const std::string& name : ck.source->names()) {
      const TensorView& t = ck.source->get(name);
      if ((name.starts_with("model.layers.0.mlp.experts.") || name.starts_with("model.layers.1.mlp.experts.")) &&
          name.ends_with(".down_proj.weight"))
        spots.emplace_back(t.file, t.offset + t.nbytes / 2);
    }
    ASSERT_FALSE(spots.empty());
    for (const auto& [file, at] : spots) {
      KeepTime keep(file);
      flip_byte(file, at);
    }
  }, "of the source is not what it wrote");
}

TEST(PackResume, ADamagedProgressRecordStartsOver) {
  for (const std::string& record : {std::string("{\"signature\": 1"), std::string(200000, '[') + std::string(200000, ']'),
                                    std::string("{\"signature\": \"x\"}")}) {
    SCOPED_TRACE(record.substr(0, 20));
    testfiles::TempDir tmp("strata-resume");
    PackOptions o = pack_of(fixture("qwen_gqa"), tmp.path() / "pack");
    o.stop_after_layers = 1;
    EXPECT_THROW(pack_model(o), Error);
    testfiles::write_file(o.out / kPackProgress, record);
    o.stop_after_layers = -1;
    const PackReport r = pack_model(o);
    EXPECT_TRUE(r.restarted);
    pack_model(pack_of(fixture("qwen_gqa"), tmp.path() / "straight"));
    EXPECT_EQ(difference(tmp.path() / "straight", o.out), "");
  }
}

TEST(PackResume, AProgressRecordOfAnotherPackRemovesOnlyThatPacksExpertFiles) {
  testfiles::TempDir tmp("strata-resume");
  PackOptions o = pack_of(fixture("qwen_gqa"), tmp.path() / "pack");
  o.stop_after_layers = 1;
  EXPECT_THROW(pack_model(o), Error);
  // Another signature, naming a file that is not an expert file and one
  // outside this pack's drive folders.
  fs::create_directories(tmp.path() / "elsewhere");
  testfiles::write_file(o.out / "keep.txt", "mine");
  testfiles::write_file(tmp.path() / "elsewhere" / "strata-experts-0-0.bin", "mine");
  testfiles::write_file(o.out / "strata-experts-0-0.bin", "stale");
  json record = read_json(o.out / kPackProgress);
  record["signature"] = record["signature"].get<uint64_t>() + 1;
  record["manifest"]["drives"] = json::array({{{"path", "."}, {"file", "keep.txt"}},
                                              {{"path", (tmp.path() / "elsewhere").string()},
                                               {"file", "strata-experts-0-0.bin"}},
                                              {{"path", "."}, {"file", "strata-experts-0-0.bin"}}});
  write_json(o.out / kPackProgress, record);
  o.stop_after_layers = -1;
  EXPECT_TRUE(pack_model(o).restarted);
  EXPECT_TRUE(fs::exists(o.out / "keep.txt"));
  EXPECT_TRUE(fs::exists(tmp.path() / "elsewhere" / "strata-experts-0-0.bin"));
  EXPECT_FALSE(fs::exists(o.out / "strata-experts-0-0.bin"));
}

// --- what a pack is, wherever it is written -------------------------------

TEST(PackOutput, TheSameSourceAndOptionsGiveTheSameBytes) {
  testfiles::TempDir tmp("strata-determinism");
  pack_model(pack_of(fixture("qwen_gqa"), tmp.path() / "a"));
  fs::create_directories(tmp.path() / "elsewhere");
  pack_model(pack_of(fixture("qwen_gqa"), tmp.path() / "elsewhere" / "b"));
  EXPECT_EQ(difference(tmp.path() / "a", tmp.path() / "elsewhere" / "b"), "");
  // Interrupted and resumed: the same again.
  PackOptions o = pack_of(fixture("qwen_gqa"), tmp.path() / "c");
  o.stop_after_layers = 1;
  EXPECT_THROW(pack_model(o), Error);
  o.stop_after_layers = -1;
  EXPECT_EQ(pack_model(o).layers_resumed, 1);
  EXPECT_EQ(difference(tmp.path() / "a", tmp.path() / "c"), "");
}

TEST(PackOutput, AnInterruptedPackSaysSoAndNeverRuns) {
  testfiles::TempDir tmp("strata-partial");
  PackOptions o = pack_of(fixture("qwen_gqa"), tmp.path() / "pack");
  o.stop_after_layers = 1;
  EXPECT_THROW(pack_model(o), Error);
  const std::string want = o.out.string() + ": incomplete pack (pack was interrupted); run strata pack again to resume";
  expect_clean_error(generate(o.out), want);
  expect_clean_error(run_strata("tokenize " + o.out.string() + " --text hi"), want);
  EXPECT_THROW(load_model(o.out, {}), Error);
}

}  // namespace
}  // namespace strata
