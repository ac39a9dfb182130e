// The Tokenizer facade on small hand-made checkpoints (a byte-level BPE
// tokenizer.json and a Kimi-style tiktoken.model) whose ids can be worked out
// by hand, the errors for broken files, and `strata tokenize` end to end.
// The real DeepSeek-V3 / Qwen3 / tiktoken comparisons are in
// tokenizer_reference_test.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> n{0};
    path_ = fs::temp_directory_path() / ("strata-tok-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Byte b has id b; merges build "hello" and " h", in an order that matters:
// "h e" outranks "Ġ h", so " hello" must come out as [" ", "hello"].
json tiny_tokenizer_json(bool merges_as_pairs) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "h"}};
  json m = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    if (merges_as_pairs)
      m.push_back({a, b});
    else
      m.push_back(a + " " + b);
  }
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
        {{"id", 301}, {"content", "<think>"}, {"special", false}, {"normalized", true}},
        {{"id", 302}, {"content", "<|begin|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", {{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|begin|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<|begin|>", {{"id", "<|begin|>"}, {"ids", {302}}, {"tokens", {"<|begin|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
  };
}

std::unique_ptr<Tokenizer> load_json_tokenizer(const ScratchDir& dir, const json& tj, const json& config = nullptr) {
  write_file(dir.path() / "tokenizer.json", tj.dump());
  if (!config.is_null()) write_file(dir.path() / "tokenizer_config.json", config.dump());
  return Tokenizer::from_dir(dir.path());
}

TEST(Tokenizer, BpeAppliesMergesByRankLeftmostFirst) {
  for (bool pairs : {false, true}) {
    ScratchDir dir;
    auto tok = load_json_tokenizer(dir, tiny_tokenizer_json(pairs));
    EXPECT_EQ(tok->encode("hello"), (Ids{259}));
    EXPECT_EQ(tok->encode(" hello"), (Ids{32, 259}));  // "h e" (rank 0) wins over "Ġ h" (rank 4)
    EXPECT_EQ(tok->encode("lll"), (Ids{257, 'l'}));   // equal ranks: leftmost pair first
    EXPECT_EQ(tok->encode(""), Ids{});
  }
}

TEST(Tokenizer, AddedTokensNormalizationAndDecode) {
  ScratchDir dir;
  auto tok = load_json_tokenizer(dir, tiny_tokenizer_json(false), {{"eos_token", "<|end|>"}});
  const Ids ids = tok->encode("hello<|end|> hello<think>");
  EXPECT_EQ(ids, (Ids{259, 300, 32, 259, 301}));
  EXPECT_EQ(tok->decode(ids), "hello<|end|> hello<think>");
  // NFC: a decomposed é encodes as the precomposed one.
  EXPECT_EQ(tok->encode("e\u0301"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(tok->encode("\u00e9"), (Ids{0xC3, 0xA9}));
  // A character cut in half decodes to its partial bytes, not U+FFFD.
  EXPECT_EQ(tok->decode({0xC3}), "\xC3");
  EXPECT_EQ(tok->token_text(32), "Ġ");
  EXPECT_EQ(tok->token_text(258), "hell");
  EXPECT_EQ(tok->token_text(300), "<|end|>");
  EXPECT_EQ(tok->vocab_size(), 303u);
}

TEST(Tokenizer, PromptDecorationFromTemplateAndConfig) {
  ScratchDir dir;
  auto tok = load_json_tokenizer(dir, tiny_tokenizer_json(false), {{"eos_token", "<|end|>"}});
  EXPECT_EQ(tok->encode_prompt("hello"), (Ids{302, 259}));  // post_processor template adds <|begin|>
  EXPECT_EQ(tok->bos_id(), 302);
  EXPECT_EQ(tok->eos_ids(), (Ids{300}));

  json no_template = tiny_tokenizer_json(false);
  no_template["post_processor"] = {{"type", "ByteLevel"}};
  ScratchDir dir2;
  write_file(dir2.path() / "generation_config.json", R"({"eos_token_id": [301, 300]})");
  auto plain = load_json_tokenizer(dir2, no_template, {{"bos_token", {{"content", "<|begin|>"}}}, {"eos_token", "<|end|>"}});
  EXPECT_EQ(plain->encode_prompt("hello"), (Ids{259}));
  EXPECT_EQ(plain->bos_id(), 302);
  EXPECT_EQ(plain->eos_ids(), (Ids{300, 301}));

  ScratchDir dir3;
  auto with_bos = load_json_tokenizer(dir3, no_template, {{"bos_token", "<|begin|>"}, {"add_bos_token", true}});
  EXPECT_EQ(with_bos->encode_prompt("hello"), (Ids{302, 259}));
  EXPECT_EQ(with_bos->encode("hello"), (Ids{259}));
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  // encode() is const and shared across threads (the word cache is locked).
  ScratchDir dir;
  auto tok = load_json_tokenizer(dir, tiny_tokenizer_json(false));
  const std::vector<std::string> texts = {"hello hello", " hello<|end|>", "lll hello\n\n", "e\u0301 hello"};
  std::vector<Ids> want;
  for (const auto& t : texts) want.push_back(tok->encode(t));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < 300; ++round)
        for (std::size_t i = 0; i < texts.size(); ++i)
          if (tok->encode(texts[i]) != want[i]) ++wrong;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tokenizer, RejectsInvalidUtf8AndUnknownIds) {
  ScratchDir dir;
  auto tok = load_json_tokenizer(dir, tiny_tokenizer_json(false));
  const std::string msg = error_of([&] { tok->encode("bad\xff text"); });
  EXPECT_NE(msg.find("invalid UTF-8 in input text at byte offset 3"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { tok->decode({999}); }).find("token id 999 is not in the vocabulary"), std::string::npos);
  EXPECT_NE(error_of([&] { tok->decode({-1}); }).find("token id -1"), std::string::npos);
  EXPECT_NE(error_of([&] { tok->token_text(303); }).find("token id 303"), std::string::npos);
}

TEST(Tokenizer, BrokenFilesGiveOneLineErrorsNamingTheFile) {
  auto load_error = [](const std::function<void(const fs::path&)>& setup) {
    ScratchDir dir;
    setup(dir.path());
    const std::string msg = error_of([&] { Tokenizer::from_dir(dir.path()); });
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  };
  auto with = [&](const std::function<void(json&)>& edit) {
    return load_error([&](const fs::path& d) {
      json tj = tiny_tokenizer_json(false);
      edit(tj);
      write_file(d / "tokenizer.json", tj.dump());
    });
  };
  EXPECT_NE(load_error([](const fs::path&) {}).find("expected tokenizer.json or tiktoken.model"), std::string::npos);
  EXPECT_NE(load_error([](const fs::path& d) { write_file(d / "tokenizer.json", "{\"model\": "); })
                .find("tokenizer.json: invalid JSON"),
            std::string::npos);
  EXPECT_NE(with([](json& t) { t["model"]["merges"].push_back("x nope"); }).find("uses \"nope\", which is not in the vocab"),
            std::string::npos);
  EXPECT_NE(with([](json& t) { t["normalizer"] = {{"type", "NFKC"}}; }).find("normalizer of type \"NFKC\" is not supported"),
            std::string::npos);
  EXPECT_NE(with([](json& t) { t["pre_tokenizer"] = {{"type", "Whitespace"}}; }).find("not supported"), std::string::npos);
  EXPECT_NE(with([](json& t) { t["pre_tokenizer"] = nullptr; }).find("no ByteLevel step"), std::string::npos);
  const std::string bad_regex = with([](json& t) {
    const json split = {{"type", "Split"}, {"pattern", {{"Regex", "(oops"}}}, {"behavior", "Isolated"}};
    auto& steps = t["pre_tokenizer"]["pretokenizers"];
    steps.insert(steps.begin(), split);
  });
  EXPECT_NE(bad_regex.find("tokenizer.json pre_tokenizer[0]: regex does not compile"), std::string::npos) << bad_regex;
  EXPECT_NE(with([](json& t) { t["model"]["type"] = "Unigram"; }).find("only byte-level BPE"), std::string::npos);
  EXPECT_NE(with([](json& t) { t["added_tokens"][0]["content"] = 5; }).find("added_tokens[0] needs"), std::string::npos);
  EXPECT_NE(with([](json& t) { t["pre_tokenizer"]["pretokenizers"][0]["add_prefix_space"] = "yes"; })
                .find("\"add_prefix_space\" is not a boolean"),
            std::string::npos);
  EXPECT_NE(with([](json& t) { t["post_processor"]["single"][0]["SpecialToken"]["id"] = 7; })
                .find("tokenizer.json: post_processor.single[0].SpecialToken.id is not a string"),
            std::string::npos);
  const std::string bad_cfg = load_error([](const fs::path& d) {
    write_file(d / "tokenizer.json", tiny_tokenizer_json(false).dump());
    write_file(d / "tokenizer_config.json", R"({"bos_token": "<nope>"})");
  });
  EXPECT_NE(bad_cfg.find("tokenizer_config.json: bos_token \"<nope>\" is not a token"), std::string::npos) << bad_cfg;
}

// encode(text, max_tokens): the whole encoding while it fits, nullopt as
// soon as it cannot, for each entry point and each way of passing the limit
// (ids counted so far, added tokens, a single piece too long for what is left).
TEST(Tokenizer, EncodeWithinALimitIsTheEncodingOrNothing) {
  ScratchDir dir;
  auto tok = load_json_tokenizer(dir, tiny_tokenizer_json(false), json{{"add_bos_token", true}, {"bos_token", "<|begin|>"}});
  const std::vector<std::string> texts = {"hello hello world", "<|end|>hello<|end|><|end|>", "a b c d e f g",
                                          std::string(200, 'x'), "hello" + std::string(50, ' ') + "<think>"};
  for (const auto& text : texts) {
    const Ids plain = tok->encode(text), ordinary = tok->encode_ordinary(text), prompt = tok->encode_prompt(text);
    for (std::size_t max = 0; max <= prompt.size() + 1; ++max) {
      EXPECT_EQ(tok->encode(text, max), max >= plain.size() ? std::optional<Ids>(plain) : std::nullopt) << text << " " << max;
      EXPECT_EQ(tok->encode_ordinary(text, max), max >= ordinary.size() ? std::optional<Ids>(ordinary) : std::nullopt)
          << text << " " << max;
      EXPECT_EQ(tok->encode_prompt(text, max), max >= prompt.size() ? std::optional<Ids>(prompt) : std::nullopt)
          << text << " " << max;
    }
  }
  // Megabytes against a small limit: refused (the rest is never encoded), and
  // invalid UTF-8 anywhere is still the error it is for encode().
  EXPECT_EQ(tok->encode(std::string(8 << 20, 'x'), 1000), std::nullopt);
  EXPECT_EQ(tok->encode(std::string(4 << 20, ' ') + "hello", 1000), std::nullopt);
  EXPECT_THROW(tok->encode(std::string(1 << 20, 'x') + "\xFF", 10), Error);
}

TEST(Tokenizer, SplitPreTokenizerBehaviors) {
  json tj = tiny_tokenizer_json(false);
  // Split on "-" and drop it, then byte-level without regex or prefix space.
  tj["pre_tokenizer"] = {{"type", "Sequence"},
                         {"pretokenizers",
                          {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Removed"}, {"invert", false}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  ScratchDir dir;
  auto tok = load_json_tokenizer(dir, tj);
  EXPECT_EQ(tok->encode("hello-hello"), (Ids{259, 259}));
  EXPECT_EQ(tok->encode("he-llo"), (Ids{256, 257, 'o'}));
}

// A Kimi-style tiktoken directory: 256 single bytes, then merged tokens.
void write_tiny_tiktoken(const fs::path& dir) {
  auto b64 = [](const std::string& s) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < s.size(); i += 3) {
      const unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8) |
                         static_cast<unsigned char>(s[i + 2]);
      for (int k = 3; k >= 0; --k) out.push_back(a[(v >> (6 * k)) & 63]);
    }
    if (s.size() - i == 1) {
      const unsigned v = static_cast<unsigned char>(s[i]) << 16;
      out += std::string{a[(v >> 18) & 63], a[(v >> 12) & 63], '=', '='};
    } else if (s.size() - i == 2) {
      const unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8);
      out += std::string{a[(v >> 18) & 63], a[(v >> 12) & 63], a[(v >> 6) & 63], '='};
    }
    return out;
  };
  std::string model;
  for (int b = 0; b < 256; ++b) model += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  int rank = 256;
  for (const char* t : {"he", "ll", "hell", "hello", " w", "or", "ld", " wor"})
    model += b64(t) + " " + std::to_string(rank++) + "\n";
  write_file(dir / "tiktoken.model", model);
  write_file(dir / "tokenizer_config.json", R"({
    "bos_token": "[BOS]", "eos_token": "[EOS]", "add_bos_token": true,
    "added_tokens_decoder": {"264": {"content": "[BOS]", "special": true},
                             "265": {"content": "[EOS]", "special": true},
                             "266": {"content": "<|im_end|>", "special": true}}})");
}

TEST(Tokenizer, TiktokenMergesByRankOfTheMergedBytes) {
  ScratchDir dir;
  write_tiny_tiktoken(dir.path());
  auto tok = Tokenizer::from_dir(dir.path());
  EXPECT_EQ(tok->encode("hello world"), (Ids{259, 263, 262}));  // a whole piece in the vocab is one token
  EXPECT_EQ(tok->encode("hello<|im_end|>[EOS]"), (Ids{259, 266, 265}));
  EXPECT_EQ(tok->encode("<|reserved_token_300|>"), (Ids{300}));
  EXPECT_EQ(tok->encode_prompt("hello"), (Ids{264, 259}));
  EXPECT_EQ(tok->bos_id(), 264);
  EXPECT_EQ(tok->eos_ids(), (Ids{265}));
  EXPECT_EQ(tok->vocab_size(), 264u + 256u);
  EXPECT_EQ(tok->token_text(260), "Ġw");
  EXPECT_EQ(tok->decode({259, 263, 262, 266}), "hello world<|im_end|>");
}

TEST(Tokenizer, TiktokenFileErrorsNameTheLine) {
  ScratchDir dir;
  write_tiny_tiktoken(dir.path());
  std::string model = read_file(dir.path() / "tiktoken.model");
  write_file(dir.path() / "tiktoken.model", "QQ== 0\nQg== 1\naGVsbG8= x\n");
  const std::string msg = error_of([&] { Tokenizer::from_dir(dir.path()); });
  EXPECT_NE(msg.find("tiktoken.model:3: bad rank"), std::string::npos) << msg;
  write_file(dir.path() / "tiktoken.model", "!!!! 0\n");
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(dir.path()); }).find("tiktoken.model:1: bad base64"), std::string::npos);
}

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

CommandResult run_strata(const std::string& args) {
  ScratchDir tmp;
  const fs::path out = tmp.path() / "out", err = tmp.path() / "err";
  const std::string cmd = std::string(STRATA_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  CommandResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

TEST(TokenizeCli, EncodesDecodesAndPrintsJson) {
  ScratchDir dir;
  write_file(dir.path() / "tokenizer.json", tiny_tokenizer_json(false).dump());
  const std::string model = "--model " + dir.path().string();

  CommandResult r = run_strata("tokenize " + model + " --text 'hello<|end|> hello' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["ids"], json({259, 300, 32, 259}));
  EXPECT_EQ(j["tokens"], json({"hello", "<|end|>", "Ġ", "hello"}));

  r = run_strata("tokenize " + model + " --text ' hello'");
  EXPECT_EQ(r.out, "32 259\n");
  r = run_strata("tokenize " + model + " --text hello --prompt");
  EXPECT_EQ(r.out, "302 259\n");
  r = run_strata("tokenize " + model + " --ids 259,300,32,259");
  EXPECT_EQ(r.out, "hello<|end|> hello\n");
  r = run_strata("tokenize " + model + " --ids 259,32 --json");
  EXPECT_EQ(json::parse(r.out)["text"], "hello ");
}

void expect_clean_error(const CommandResult& r, const std::string& phrase) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << r.err;
}

TEST(TokenizeCli, BadInputIsOneErrorLine) {
  ScratchDir dir;
  write_file(dir.path() / "tokenizer.json", tiny_tokenizer_json(false).dump());
  const std::string model = "--model " + dir.path().string();
  expect_clean_error(run_strata("tokenize " + model + " --text \"$(printf 'bad\\377')\""),
                     "invalid UTF-8 in input text at byte offset 3");
  expect_clean_error(run_strata("tokenize " + model + " --ids 1,x"), "--ids: 'x' is not a token id");
  expect_clean_error(run_strata("tokenize " + model + " --ids 5000"), "token id 5000 is not in the vocabulary");
  expect_clean_error(run_strata("tokenize " + model + " --text a --ids 1"), "exactly one of --text and --ids");
  expect_clean_error(run_strata("tokenize --model /nonexistent/dir --text a"), "no tokenizer.json or tiktoken.model");
}

}  // namespace
}  // namespace strata
