// Hostile tokenizer files (issue 17): nesting that once overflowed the stack
// or took memory quadratic in the depth, and ids that once sized gigabytes
// of tables or wrapped past 2^32. Each must be one strata::Error naming the
// file, quickly, in bounded memory (tests/bounded_child.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bounded_child.h"
#include "safetensors_writer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::expect_bounded_error;

// 256 byte tokens (id = byte), one merge ("h e" -> 256), ByteLevel.
json base_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  return {{"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"h e"}}}}};
}

// `field` of the base tokenizer replaced by a Sequence nested `depth` deep
// around `leaf`, written as text: building it as a json value and dumping
// it would itself recurse once per level.
std::string nested_sequence(const std::string& field, const char* list_key, int depth, const std::string& leaf) {
  json base = base_tokenizer();
  base[field] = "@@";
  std::string text = base.dump();
  std::string seq;
  seq.reserve(static_cast<size_t>(depth) * 48 + leaf.size());
  for (int i = 0; i < depth; ++i) seq += std::string(R"({"type": "Sequence", ")") + list_key + R"(": [)";
  seq += leaf;
  for (int i = 0; i < depth; ++i) seq += "]}";
  text.replace(text.find("\"@@\""), 4, seq);
  return text;
}

struct SequenceField {
  const char* field;
  const char* list_key;
  const char* leaf;
};
constexpr SequenceField kSequenceFields[] = {
    {"normalizer", "normalizers", R"({"type": "NFC"})"},
    {"pre_tokenizer", "pretokenizers", R"({"type": "ByteLevel", "add_prefix_space": false})"},
    {"decoder", "decoders", R"({"type": "ByteLevel"})"},
    {"post_processor", "processors", R"({"type": "ByteLevel"})"},
};

TEST(HostileTokenizer, SequenceNestedTensOfThousandsDeepIsOneErrorNamingTheFile) {
  for (const auto& f : kSequenceFields) {
    SCOPED_TRACE(f.field);
    testfiles::TempDir dir("strata-hostile-tok");
    const fs::path path = dir.write("tokenizer.json", nested_sequence(f.field, f.list_key, 50'000, f.leaf));
    expect_bounded_error([&] { Tokenizer::from_dir(dir.path()); }, path.string() + ": ", "nested more than 128 levels");
  }
}

TEST(HostileTokenizer, SequencesNestedPastTheLimitAreRefusedWithinTheJsonLimit) {
  // 20 Sequences are 41 JSON levels: within the file limit, past the loader's.
  for (const auto& f : kSequenceFields) {
    SCOPED_TRACE(f.field);
    testfiles::TempDir dir("strata-hostile-tok");
    const fs::path path = dir.write("tokenizer.json", nested_sequence(f.field, f.list_key, 20, f.leaf));
    expect_bounded_error([&] { Tokenizer::from_dir(dir.path()); }, path.string() + ": ", "Sequences nested more than 16 deep");
    // A real file's single Sequence still loads.
    dir.write("tokenizer.json", nested_sequence(f.field, f.list_key, 1, f.leaf));
    EXPECT_EQ(Tokenizer::from_dir(dir.path())->decode(Tokenizer::from_dir(dir.path())->encode("hello")), "hello");
  }
}

// The tokenizer of `tj`, loaded in a bounded child: must be one error naming
// tokenizer.json with `phrase`.
void expect_tokenizer_error(const json& tj, const std::string& phrase, const std::string& file = "tokenizer.json",
                            const std::string& file_text = "") {
  testfiles::TempDir dir("strata-hostile-tok");
  dir.write("tokenizer.json", tj.dump());
  if (!file_text.empty()) dir.write(file, file_text);
  expect_bounded_error([&] { Tokenizer::from_dir(dir.path()); }, (dir.path() / file).string() + ": ", phrase);
}

TEST(HostileTokenizer, AddedTokenIdsAreBoundedBeforeTheyAllocate) {
  // 2^28 once sized ~17 GB of per-id tables; 2^32 + 5 became 5 and
  // replaced that token.
  for (uint64_t id : {uint64_t{1} << 28, (uint64_t{1} << 32) + 5, uint64_t{1} << 63, ~uint64_t{0}}) {
    SCOPED_TRACE(id);
    json tj = base_tokenizer();
    tj["added_tokens"] = {{{"id", id}, {"content", "<|x|>"}, {"special", true}}};
    expect_tokenizer_error(tj, "added_tokens[0] has token id " + std::to_string(id) + ", out of range");
  }
  json tj = base_tokenizer();
  tj["added_tokens"] = {{{"id", -1}, {"content", "<|x|>"}}};
  expect_tokenizer_error(tj, "added_tokens[0] has token id -1, out of range");
}

TEST(HostileTokenizer, VocabIdsAreBoundedBeforeTheyAllocate) {
  for (int64_t id : {int64_t{INT32_MAX}, int64_t{1} << 28, (int64_t{1} << 32) + 5}) {
    SCOPED_TRACE(id);
    json tj = base_tokenizer();
    tj["model"]["vocab"]["he"] = id;
    expect_tokenizer_error(tj, "model.vocab[\"he\"] has token id " + std::to_string(id) + ", out of range");
  }
}

TEST(HostileTokenizer, IdsAFewPastTheVocabularyStillLoad) {
  // Files may leave gaps: an added token past the last vocab id is fine.
  testfiles::TempDir dir("strata-hostile-tok");
  json tj = base_tokenizer();
  tj["added_tokens"] = {{{"id", 1000}, {"content", "<|x|>"}, {"special", true}}};
  dir.write("tokenizer.json", tj.dump());
  const auto tok = Tokenizer::from_dir(dir.path());
  EXPECT_EQ(tok->encode("<|x|>"), std::vector<int32_t>{1000});
}

TEST(HostileTokenizer, TemplateAndConfigIdsAreNotNarrowed) {
  json tj = base_tokenizer();
  tj["added_tokens"] = {{{"id", 257}, {"content", "<s>"}, {"special", true}}};
  tj["post_processor"] = {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {(uint64_t{1} << 32) + 5}}}}}}};
  expect_tokenizer_error(tj, "has token id 4294967301, out of range");

  tj = base_tokenizer();
  expect_tokenizer_error(tj, "eos_token_id has token id 4294967301, out of range", "generation_config.json",
                         R"({"eos_token_id": [4294967301]})");
  expect_tokenizer_error(tj, "bos_token_id has token id 300, out of range", "generation_config.json",
                         R"({"bos_token_id": 300})");
}

TEST(HostileTokenizer, DeepCompanionFilesAreOneErrorNamingTheFile) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  for (const char* file : {"tokenizer_config.json", "generation_config.json", "chat_template.json"}) {
    SCOPED_TRACE(file);
    const std::string text = std::string(R"({"x": )") + deep + "}";
    expect_tokenizer_error(base_tokenizer(), "nested more than 128 levels", file, text);
  }
}

// --- tiktoken ---------------------------------------------------------------

std::string tiktoken_lines(int first_rank_override = -1) {
  std::string out;
  for (int b = 0; b < 256; ++b) {
    static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned v = static_cast<unsigned>(b);
    std::string enc = {kB64[v >> 2], kB64[(v & 3) << 4], '=', '='};
    out += enc + " " + std::to_string(b == 0 && first_rank_override >= 0 ? first_rank_override : b) + "\n";
  }
  return out;
}

void expect_tiktoken_error(const std::string& model, const std::string& config, const std::string& file,
                           const std::string& phrase) {
  testfiles::TempDir dir("strata-hostile-tik");
  dir.write("tiktoken.model", model);
  if (!config.empty()) dir.write("tokenizer_config.json", config);
  expect_bounded_error([&] { Tokenizer::from_dir(dir.path()); }, (dir.path() / file).string(), phrase);
}

TEST(HostileTokenizer, TiktokenRanksAreBoundedUniqueAndDense) {
  expect_tiktoken_error(tiktoken_lines(1 << 30), "", "tiktoken.model", "rank 1073741824 is not below the file's 256 lines");
  expect_tiktoken_error(tiktoken_lines(7), "", "tiktoken.model", "rank 7 appears twice");
  std::string gap = tiktoken_lines();
  gap += "aGk= 300\n";  // "hi" at 300 with 257 tokens: a gap
  expect_tiktoken_error(gap, "", "tiktoken.model", "rank 300 is not below the file's 257 lines");
  // Blank lines leave room below the line count, not a gap in the ranks.
  expect_tiktoken_error(tiktoken_lines(300) + std::string(100, '\n'), "", "tiktoken.model",
                        "rank 0 is missing (ranks must be 0 to 255)");

  testfiles::TempDir dir("strata-hostile-tik");
  dir.write("tiktoken.model", tiktoken_lines() + "\n\n");
  EXPECT_EQ(Tokenizer::from_dir(dir.path())->decode(Tokenizer::from_dir(dir.path())->encode("hi")), "hi");
}

TEST(HostileTokenizer, TiktokenSpecialIdsAreBounded) {
  expect_tiktoken_error(tiktoken_lines(), R"({"added_tokens_decoder": {"1073741824": {"content": "<|x|>"}}})",
                        "tokenizer_config.json", "has token id 1073741824, out of range");
}

}  // namespace
}  // namespace strata
