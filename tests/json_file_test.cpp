// util/json_file.h: every JSON file strata reads goes through one reader
// that refuses nesting past kMaxJsonFileDepth with one error naming the file
// (copying, comparing or dumping a value recurses once per level), and each
// reader of such a file is checked here with a file a hundred thousand
// levels deep: one error, quickly, in bounded memory.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bounded_child.h"
#include "formats/hf_checkpoint.h"
#include "formats/safetensors.h"
#include "model/expert_heat.h"
#include "pack/manifest.h"
#include "runtime/k3_chat.h"
#include "safetensors_writer.h"
#include "storage/probe.h"
#include "util/json_file.h"

namespace strata {
namespace {

using testing::expect_bounded_error;

std::string nested(std::size_t depth, const std::string& inner = "0") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(JsonFile, RefusesNestingPastTheLimitNamingTheSource) {
  EXPECT_EQ(parse_json(nested(kMaxJsonFileDepth), "f.json").size(), 1u);
  try {
    parse_json(nested(kMaxJsonFileDepth + 1), "dir/f.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "dir/f.json: JSON nested more than 128 levels deep (damaged or not a real file)");
  }
  EXPECT_THROW(parse_ordered_json(nested(kMaxJsonFileDepth + 1), "f.json"), Error);
  EXPECT_TRUE(parse_json_or_discarded(nested(kMaxJsonFileDepth + 1)).is_discarded());
  EXPECT_TRUE(parse_json_or_discarded("{").is_discarded());
  EXPECT_EQ(parse_json_or_discarded("[1]").size(), 1u);
  // Brackets inside strings are text.
  EXPECT_EQ(parse_json("\"" + std::string(1000, '[') + "\"", "f.json").get<std::string>().size(), 1000u);
}

TEST(JsonFile, SyntaxErrorsNameTheSourceOnOneShortLine) {
  const std::string huge_token(1'000'000, 'x');
  try {
    parse_json("{\"a\": " + huge_token, "dir/f.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("dir/f.json: invalid JSON: ", 0), 0u) << msg;
    EXPECT_LT(msg.size(), 400u);
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
}

TEST(JsonFile, IntegersPastInt64AreNotWrapped) {
  EXPECT_EQ(json_int64(parse_json("9223372036854775807", "f")), INT64_MAX);
  EXPECT_EQ(json_int64(parse_json("9223372036854775808", "f")), std::nullopt);
  EXPECT_EQ(json_int64(parse_json("-5", "f")), -5);
  EXPECT_EQ(json_int64(parse_json("5.0", "f")), std::nullopt);
}

TEST(JsonFile, EveryReaderRefusesADeepFileNamingIt) {
  const std::string deep = nested(100'000);
  testfiles::TempDir dir("strata-deep-json");

  // A safetensors header: the 8-byte length, then the JSON.
  const std::string header = R"({"t": )" + deep + "}";
  std::string st(8, '\0');
  for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const auto st_path = dir.write("model.safetensors", st + header);
  expect_bounded_error([&] { SafetensorsFile f(st_path); }, st_path.string() + ": ", "nested more than 128");

  testfiles::TempDir hf("strata-deep-json");
  const auto index = hf.write("model.safetensors.index.json", R"({"weight_map": )" + deep + "}");
  expect_bounded_error([&] { HfCheckpoint c(hf.path()); }, index.string() + ": ", "nested more than 128");

  const auto manifest = dir.write("manifest.json", R"({"format": "strata-pack", "x": )" + deep + "}");
  expect_bounded_error([&] { Manifest::load(dir.path()); }, manifest.string() + ": ", "nested more than 128");

  const auto heat = dir.write("heat.json", R"({"version": 1, "layers": )" + deep + "}");
  expect_bounded_error([&] { ExpertHeat::load(heat, "m", 2, 2, /*strict=*/true); }, heat.string() + ": ",
                       "not a JSON object");
  const testing::ChildOutcome lenient =
      testing::run_bounded([&] { ExpertHeat::load(heat, "m", 2, 2, /*strict=*/false); });
  EXPECT_EQ(lenient.kind, testing::ChildOutcome::Kind::Returned) << testing::describe(lenient);

  const auto probe = dir.write("probe.json", R"({"version": 1, "x": )" + deep + "}");
  expect_bounded_error([&] { load_probe(probe); }, probe.string() + ": ", "not a strata probe file");
}

// Kimi K3 tool call arguments arrive as a JSON string inside a request whose
// own depth was checked: the string is parsed, so it is measured too.
TEST(JsonFile, ToolCallArgumentsStringIsMeasured) {
  const std::string args = "{\"a\": " + nested(100'000) + "}";
  const nlohmann::ordered_json messages = {
      {{"role", "user"}, {"content", "hi"}},
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", args}}}}}}}};
  expect_bounded_error([&] { k3_chat_segments(messages, nullptr, K3ChatOptions{}); }, "Kimi K3 tool call arguments: ",
                       "nested more than 128");
}

}  // namespace
}  // namespace strata
