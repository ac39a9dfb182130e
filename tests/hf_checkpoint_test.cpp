#include "formats/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "error_message.h"
#include "safetensors_writer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testfiles::raw_bytes;
using testfiles::safetensors_bytes;
using testfiles::TensorSpec;

TensorSpec f32(const std::string& name, std::vector<float> values) {
  return {name, "F32", {static_cast<int64_t>(values.size())}, raw_bytes(values)};
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  testfiles::TempDir dir_{"strata-hfckpt"};

  void write_index(const nlohmann::json& weight_map) {
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    dir_.write("model.safetensors.index.json", index.dump(2));
  }

  // Two shards: a+b in shard 1, c in shard 2.
  void write_two_shards() {
    dir_.write("model-00001-of-00002.safetensors", safetensors_bytes({f32("a", {1, 2}), f32("b", {3})}));
    dir_.write("model-00002-of-00002.safetensors", safetensors_bytes({f32("c", {4, 5, 6})}));
  }

  // The strata::Error message that opening the directory throws, checked to be one line.
  std::string error_for() {
    return testfiles::error_message([&] { HfCheckpoint ckpt(dir_.path()); });
  }

  void expect_error(const std::vector<std::string>& phrases) {
    std::string msg = error_for();
    for (const auto& p : phrases) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nexpected: " << p;
  }
};

float first_f32(const TensorView& t) {
  float v;
  std::memcpy(&v, t.data, 4);
  return v;
}

TEST_F(HfCheckpointTest, ReadsSingleModelSafetensors) {
  dir_.write("model.safetensors", safetensors_bytes({f32("w2", {7}), f32("w1", {8, 9})}));
  HfCheckpoint ckpt(dir_.path());
  EXPECT_EQ(ckpt.dir(), dir_.path());
  EXPECT_EQ(ckpt.describe(), dir_.path().string());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"w1", "w2"}));
  EXPECT_EQ(ckpt.files().size(), 1u);
  EXPECT_EQ(first_f32(ckpt.get("w1")), 8.f);
  EXPECT_EQ(ckpt.find("nope"), nullptr);
}

TEST_F(HfCheckpointTest, GetOfMissingTensorNamesCheckpointAndTensor) {
  dir_.write("model.safetensors", safetensors_bytes({f32("w", {1})}));
  HfCheckpoint ckpt(dir_.path());
  try {
    ckpt.get("model.layers.0.mlp.gate.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir_.path().string() + ": missing tensor 'model.layers.0.mlp.gate.weight'");
  }
}

TEST_F(HfCheckpointTest, SingleFileWinsOverOtherSafetensorsFiles) {
  dir_.write("model.safetensors", safetensors_bytes({f32("w", {1})}));
  dir_.write("extra.safetensors", safetensors_bytes({f32("w", {2}), f32("other", {3})}));
  HfCheckpoint ckpt(dir_.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"w"}));
  EXPECT_EQ(first_f32(ckpt.get("w")), 1.f);
}

TEST_F(HfCheckpointTest, ReadsShardedCheckpointThroughIndex) {
  write_two_shards();
  write_index({{"a", "model-00001-of-00002.safetensors"},
               {"b", "model-00001-of-00002.safetensors"},
               {"c", "model-00002-of-00002.safetensors"}});
  HfCheckpoint ckpt(dir_.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ckpt.files().size(), 2u);  // each shard opened once
  EXPECT_EQ(first_f32(ckpt.get("b")), 3.f);
  EXPECT_EQ(first_f32(ckpt.get("c")), 4.f);
  EXPECT_NE(ckpt.get("c").file.find("model-00002-of-00002.safetensors"), std::string::npos);
  EXPECT_EQ(ckpt.get("c").shape, (std::vector<int64_t>{3}));
}

TEST_F(HfCheckpointTest, IndexIsAuthoritative) {
  // "b" is in shard 1 but not in the index, so it is not part of the model.
  write_two_shards();
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"c", "model-00002-of-00002.safetensors"}});
  HfCheckpoint ckpt(dir_.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "c"}));
}

TEST_F(HfCheckpointTest, RejectsIndexPointingAtMissingShard) {
  write_two_shards();
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"d", "model-00003-of-00002.safetensors"}});
  expect_error({"model.safetensors.index.json", "shard 'model-00003-of-00002.safetensors'", "tensor 'd'", "not found"});
}

TEST_F(HfCheckpointTest, RejectsIndexNamingTensorAbsentFromItsShard) {
  write_two_shards();
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"c", "model-00001-of-00002.safetensors"}});
  expect_error({"model.safetensors.index.json", "tensor 'c'", "shard 'model-00001-of-00002.safetensors'",
                "does not contain it"});
}

TEST_F(HfCheckpointTest, RejectsMalformedIndex) {
  write_two_shards();
  dir_.write("model.safetensors.index.json", "{\"weight_map\": {");
  expect_error({"model.safetensors.index.json: invalid JSON"});
  dir_.write("model.safetensors.index.json", "");
  expect_error({"model.safetensors.index.json: invalid JSON"});
  dir_.write("model.safetensors.index.json", R"({"metadata": {}})");
  expect_error({"has no \"weight_map\" object"});
  dir_.write("model.safetensors.index.json", R"({"weight_map": []})");
  expect_error({"has no \"weight_map\" object"});
  write_index(nlohmann::json::object());
  expect_error({"weight_map is empty"});
  write_index({{"a", 1}});
  expect_error({"weight_map entry for tensor 'a' is not a string"});
}

TEST_F(HfCheckpointTest, RejectsShardPathsOutsideTheDirectory) {
  write_two_shards();
  for (const char* bad : {"../model-00001-of-00002.safetensors", "/etc/passwd", "sub/x.safetensors", "..", ""}) {
    write_index({{"a", bad}});
    expect_error({"weight_map entry for tensor 'a'", "not a file name in the model directory"});
  }
}

TEST_F(HfCheckpointTest, CorruptShardErrorNamesTheShard) {
  dir_.write("model-00001-of-00001.safetensors", "garbage!garbage!");
  write_index({{"a", "model-00001-of-00001.safetensors"}});
  expect_error({"model-00001-of-00001.safetensors: "});
}

TEST_F(HfCheckpointTest, UsesAllSafetensorsFilesWithoutIndex) {
  dir_.write("part-b.safetensors", safetensors_bytes({f32("y", {2})}));
  dir_.write("part-a.safetensors", safetensors_bytes({f32("x", {1})}));
  dir_.write("config.json", "{}");
  dir_.write("._part-a.safetensors", "macOS resource fork, not a tensor file");
  HfCheckpoint ckpt(dir_.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"x", "y"}));
  ASSERT_EQ(ckpt.files().size(), 2u);
  EXPECT_NE(ckpt.files()[0]->path().find("part-a"), std::string::npos);
}

TEST_F(HfCheckpointTest, RejectsTensorInTwoFiles) {
  dir_.write("one.safetensors", safetensors_bytes({f32("x", {1})}));
  dir_.write("two.safetensors", safetensors_bytes({f32("x", {2})}));
  expect_error({dir_.path().string() + ": tensor 'x' is in both", "one.safetensors", "two.safetensors"});
}

TEST_F(HfCheckpointTest, FollowsSymlinksLikeTheHubCache) {
  fs::create_directory(dir_ / "blobs");
  fs::create_directory(dir_ / "snapshot");
  dir_.write("blobs/0123abcd", safetensors_bytes({f32("w", {5})}));
  fs::create_symlink("../blobs/0123abcd", dir_ / "snapshot" / "model.safetensors");
  HfCheckpoint ckpt(dir_ / "snapshot");
  EXPECT_EQ(first_f32(ckpt.get("w")), 5.f);
}

TEST_F(HfCheckpointTest, RejectsDirectoryWithoutSafetensors) {
  dir_.write("config.json", "{}");
  fs::create_directory(dir_ / "sub.safetensors");  // a directory, not a file
  std::string msg = error_for();
  EXPECT_EQ(msg, dir_.path().string() + ": no model.safetensors or model.safetensors.index.json");
}

TEST_F(HfCheckpointTest, RejectsPathThatIsNotADirectory) {
  EXPECT_THROW(HfCheckpoint(dir_ / "does-not-exist"), Error);
  auto file = dir_.write("model.safetensors", safetensors_bytes({f32("w", {1})}));
  try {
    HfCheckpoint ckpt(file);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), file.string() + ": not a directory");
  }
}

}  // namespace
}  // namespace strata
