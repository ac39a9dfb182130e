// GGUF tokenizers: write_tokenizer_to_gguf (tokenizer.json -> tokenizer.ggml.*
// metadata as llama.cpp's convert_hf_to_gguf.py writes it) and
// Tokenizer::from_gguf, on the real DeepSeek-V3 and Qwen3 tokenizers: the
// GGUF tokenizer must give the ids of the tokenizer.json path (itself checked
// against HF in tokenizer_reference_test.cpp) on every fixture string, and
// the same texts for every id. Then the loader's errors on hand-made broken
// metadata, and Tokenizer::for_model.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "tokenizer_test_data.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_tokenizer_writer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;

using testdata::fixtures;
using testdata::kSetupHint;
using testdata::model_dir;
using testdata::read_json;

std::string show(const std::string& s) { return json(s).dump(-1, ' ', true); }

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> n{0};
    path_ = fs::temp_directory_path() / ("strata-ggtok-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
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

// The fixture strings plus ones transformers.js cannot check (HF-only cases
// of tokenizer_reference_test.cpp) and special-token mixtures.
std::vector<std::string> test_strings() {
  auto s = read_json(fixtures() / "strings.json").get<std::vector<std::string>>();
  for (const char* extra : {"\ufeffBOM", "a\u0085b", " \u0085 ", "x\u180ey", "\u01c4", "'S '\u017f", "\u212aelvin 'K",
                            "\ufb03", "\u01c5a", "<|im_start|>user\nHi<|im_end|>", "<think>\n</think>\n\n",
                            "<｜User｜>Hi<｜Assistant｜>", "<｜begin▁of▁sentence｜><｜end▁of▁sentence｜>x",
                            "a<|endoftext|>b<tool_call>{}</tool_call>", "<|fim_prefix|>x<|fim_suffix|>"})
    s.push_back(extra);
  return s;
}

// Every string encodes (and decodes) the same; every id has the same texts.
void expect_same_tokenizer(const Tokenizer& gguf, const Tokenizer& hf, std::size_t n_real) {
  int mismatches = 0;
  for (const std::string& s : test_strings()) {
    const Ids want = hf.encode(s);
    const Ids got = gguf.encode(s);
    if (got != want && ++mismatches <= 10)
      ADD_FAILURE() << show(s) << "\n  gguf " << json(got).dump() << "\n  json " << json(want).dump();
    EXPECT_EQ(gguf.decode(got), hf.decode(want)) << show(s);
    EXPECT_EQ(gguf.encode_prompt(s), hf.encode_prompt(s)) << show(s);
  }
  EXPECT_EQ(mismatches, 0);
  int text_mismatches = 0;
  for (std::size_t id = 0; id < n_real; ++id) {
    const auto i = static_cast<int32_t>(id);
    if ((gguf.token_text(i) != hf.token_text(i) || gguf.decode({i}) != hf.decode({i})) && ++text_mismatches <= 10)
      ADD_FAILURE() << "id " << id << ": gguf " << show(gguf.token_text(i)) << " json " << show(hf.token_text(i));
  }
  EXPECT_EQ(text_mismatches, 0);
  EXPECT_EQ(gguf.chat_template(), hf.chat_template());
  ASSERT_TRUE(gguf.chat_template().has_value());
}

std::vector<std::string> keys_of(const GgufFile& f) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : f.metadata()) keys.push_back(k);
  return keys;
}

TEST(TokenizerGguf, DeepSeekV3MatchesTokenizerJson) {
  const fs::path src = model_dir("tokenizer-deepseek_v3");
  ASSERT_TRUE(fs::exists(src / "tokenizer.json")) << kSetupHint;
  ScratchDir dir;
  const fs::path path = dir.path() / "deepseek.gguf";
  GgufWriter w;
  write_tokenizer_to_gguf(src, w);
  w.write_file(path, {});

  const GgufFile f(path);
  // What convert_hf_to_gguf.py writes for DeepSeek-V3 (no config.json here,
  // so no [PAD] fillers: 128000 BPE tokens + 815 added ones).
  EXPECT_EQ(keys_of(f), (std::vector<std::string>{"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                                                  "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                                                  "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                                  "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
                                                  "tokenizer.ggml.add_eos_token", "tokenizer.chat_template"}));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "deepseek-v3");
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 128815u);
  ASSERT_EQ(types.size(), 128815u);
  EXPECT_EQ(f.find_value("tokenizer.ggml.token_type")->elem_type, GgufType::I32);
  EXPECT_EQ(tokens[0], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(types[0], 3);       // CONTROL: an added special token that is also in the BPE vocab
  EXPECT_EQ(types[2058], 1);    // "Ġworld"
  EXPECT_EQ(types[128803], 3);  // "<｜User｜>": not special, but spelled like one
  EXPECT_EQ(f.get_array_length("tokenizer.ggml.merges"), 127741u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges")[0], "Ġ t");
  EXPECT_EQ(f.find_value("tokenizer.ggml.bos_token_id")->type, GgufType::U32);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 0);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 1);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(f.get_string("tokenizer.chat_template"),
            read_json(src / "tokenizer_config.json")["chat_template"].get<std::string>());

  const auto gguf = Tokenizer::from_gguf(f);
  const auto hf = Tokenizer::from_dir(src);
  EXPECT_EQ(gguf->vocab_size(), hf->vocab_size());
  EXPECT_EQ(gguf->bos_id(), 0);
  EXPECT_EQ(gguf->eos_ids(), (Ids{1}));
  EXPECT_EQ(gguf->encode_prompt("Hello world"), (Ids{0, 19923, 2058}));
  EXPECT_EQ(gguf->encode("<｜User｜>Hi<｜Assistant｜>"), (Ids{128803, 23166, 128804}));
  EXPECT_EQ(gguf->decode({0, 19923}), "<｜begin▁of▁sentence｜>Hello");
  expect_same_tokenizer(*gguf, *hf, hf->vocab_size());

  // Tokenizer::for_model on the file and on the directory.
  EXPECT_EQ(Tokenizer::for_model(path)->encode("Hello world"), (Ids{19923, 2058}));
}

TEST(TokenizerGguf, Qwen3MatchesTokenizerJson) {
  const fs::path src = model_dir("tokenizer-qwen3");
  ASSERT_TRUE(fs::exists(src / "tokenizer.json")) << kSetupHint;
  // A checkpoint directory like Qwen3-30B-A3B's: its config.json gives 151936
  // embedding rows and bos_token_id 151643, which the converter writes too.
  ScratchDir dir;
  const fs::path ckpt = dir.path() / "qwen3";
  fs::create_directories(ckpt);
  fs::create_symlink(src / "tokenizer.json", ckpt / "tokenizer.json");
  fs::create_symlink(src / "tokenizer_config.json", ckpt / "tokenizer_config.json");
  std::ofstream(ckpt / "config.json") << R"({"vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645})";
  const fs::path path = dir.path() / "qwen3.gguf";
  GgufWriter w;
  write_tokenizer_to_gguf(ckpt / "tokenizer.json", w);  // a tokenizer.json path works as well as its directory
  w.write_file(path, {});

  const GgufFile f(path);
  EXPECT_EQ(keys_of(f),
            (std::vector<std::string>{
                "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template"}));
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 151936u);
  EXPECT_EQ(types[151643], 3);  // <|endoftext|>
  EXPECT_EQ(types[151659], 3);  // <|fim_prefix|>: not special, but spelled like one
  EXPECT_EQ(types[151667], 4);  // <think>: USER_DEFINED
  EXPECT_EQ(tokens[151669], "[PAD151669]");
  EXPECT_EQ(types[151935], 5);                                       // UNUSED filler
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges")[0], "Ġ Ġ");  // [a, b] pairs joined
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 151645);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 151643);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 151643);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));

  const auto gguf = Tokenizer::from_gguf(f);
  const auto hf = Tokenizer::from_dir(ckpt);
  EXPECT_EQ(hf->vocab_size(), 151669u);
  EXPECT_EQ(gguf->vocab_size(), 151936u);  // the fillers count, and decode to nothing
  EXPECT_EQ(gguf->decode({151669, 151935}), "");
  EXPECT_EQ(gguf->token_text(151935), "[PAD151935]");
  EXPECT_THROW(gguf->decode({151936}), Error);
  EXPECT_EQ(gguf->bos_id(), 151643);  // from config.json, as in real Qwen3 GGUFs (the json path has none)
  EXPECT_FALSE(hf->bos_id().has_value());
  EXPECT_EQ(gguf->eos_ids(), (Ids{151645}));
  EXPECT_EQ(gguf->encode_prompt("Hello world"), (Ids{9707, 1879}));  // add_bos_token false
  EXPECT_EQ(gguf->encode("<|im_start|>user\n<think>"), (Ids{151644, 872, 198, 151667}));
  expect_same_tokenizer(*gguf, *hf, hf->vocab_size());
}

// --- hand-made metadata -------------------------------------------------------

// A byte-level BPE: byte b is token b, then "he", "Ġt", "Ġthe", a control
// token, a user-defined one and an unused filler.
class Meta {
 public:
  Meta() {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(tok::to_byte_level(std::string(1, static_cast<char>(b))));
    for (const char* t : {"he", "Ġt", "Ġthe", "<|end|>", "<think>", "[PAD261]"}) tokens.push_back(t);
    std::vector<int32_t> types(256, 1);
    for (int32_t t : {1, 1, 1, 3, 4, 5}) types.push_back(t);
    set("tokenizer.ggml.model", GgufMeta::string("gpt2"));
    set("tokenizer.ggml.pre", GgufMeta::string("qwen2"));
    set("tokenizer.ggml.tokens", GgufMeta::string_array(tokens));
    set("tokenizer.ggml.token_type", GgufMeta::array(types));
    set("tokenizer.ggml.merges", GgufMeta::string_array({"h e", "Ġ t", "Ġt he"}));
    set("tokenizer.ggml.bos_token_id", GgufMeta::u32(259));
    set("tokenizer.ggml.eos_token_id", GgufMeta::u32(259));
    set("tokenizer.ggml.add_bos_token", GgufMeta::boolean(true));
    set("tokenizer.chat_template", GgufMeta::string("{{ messages }}"));
  }
  Meta& set(const std::string& k, GgufMeta v) {
    for (auto& [key, val] : kv_)
      if (key == k) {
        val = std::move(v);
        return *this;
      }
    kv_.emplace_back(k, std::move(v));
    return *this;
  }
  Meta& erase(const std::string& k) {
    std::erase_if(kv_, [&](const auto& e) { return e.first == k; });
    return *this;
  }
  fs::path write(const fs::path& path) const {
    GgufWriter w;
    w.set_string("general.architecture", "qwen3moe");
    for (const auto& [k, v] : kv_) w.set(k, v);
    w.write_file(path, {});
    return path;
  }

 private:
  std::vector<std::pair<std::string, GgufMeta>> kv_;
};

constexpr int32_t kHe = 256, kT = 257, kThe = 258, kEnd = 259, kThink = 260, kPad = 261;

TEST(TokenizerGguf, HandMadeMetadata) {
  ScratchDir dir;
  const auto tok = Tokenizer::from_gguf(GgufFile(Meta().write(dir.path() / "t.gguf")));
  EXPECT_EQ(tok->encode(" the<think>he<|end|>"), (Ids{kThe, kThink, kHe, kEnd}));
  EXPECT_EQ(tok->encode_prompt(" t"), (Ids{kEnd, kT}));
  EXPECT_EQ(tok->bos_id(), kEnd);
  EXPECT_EQ(tok->eos_ids(), (Ids{kEnd}));
  EXPECT_EQ(tok->vocab_size(), 262u);
  EXPECT_EQ(tok->decode({kThe, kThink, kPad, kEnd}), " the<think><|end|>");
  EXPECT_EQ(tok->token_text(kPad), "[PAD261]");
  EXPECT_EQ(tok->token_text(kThe), "Ġthe");
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
  // qwen2 normalizes to NFC first: "e" + U+0301 is "é".
  EXPECT_EQ(tok->encode("e\u0301"), (Ids{0xC3, 0xA9}));
  // eot / eom join eos; add_eos appends eos.
  Meta m;
  m.set("tokenizer.ggml.eot_token_id", GgufMeta::u32(kThink))
      .set("tokenizer.ggml.add_bos_token", GgufMeta::boolean(false))
      .set("tokenizer.ggml.add_eos_token", GgufMeta::boolean(true))
      .set("tokenizer.ggml.pre", GgufMeta::string("gpt-2"))
      .erase("tokenizer.ggml.token_type");  // optional: all NORMAL, so nothing is an added token
  const auto t2 = Tokenizer::from_gguf(GgufFile(m.write(dir.path() / "t2.gguf")));
  EXPECT_EQ(t2->eos_ids(), (Ids{kEnd, kThink}));
  EXPECT_EQ(t2->encode_prompt(" the"), (Ids{kThe, kEnd}));
  EXPECT_EQ(t2->encode("<think>").size(), 7u);
}

// The error from_gguf gives for `m`, which must name the file.
std::string load_error(const Meta& m) {
  ScratchDir dir;
  const fs::path path = m.write(dir.path() / "broken.gguf");
  try {
    Tokenizer::from_gguf(GgufFile(path));
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "loaded";
  return "";
}

TEST(TokenizerGguf, MalformedMetadataErrors) {
  struct Case {
    std::function<void(Meta&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](Meta& m) { m.erase("tokenizer.ggml.model"); }, "no tokenizer: tokenizer.ggml.model is missing"},
      {[](Meta& m) { m.set("tokenizer.ggml.model", GgufMeta::string("llama")); },
       "tokenizer.ggml.model \"llama\" is not supported"},
      {[](Meta& m) { m.set("tokenizer.ggml.model", GgufMeta::u32(2)); }, "tokenizer.ggml.model"},
      {[](Meta& m) { m.set("tokenizer.ggml.pre", GgufMeta::string("llama-bpe")); },
       "tokenizer.ggml.pre \"llama-bpe\" is not supported (supported: deepseek-v3, qwen2, gpt-4o, gpt-2, default)"},
      {[](Meta& m) { m.erase("tokenizer.ggml.pre"); }, "tokenizer.ggml.pre is missing"},
      {[](Meta& m) { m.erase("tokenizer.ggml.tokens"); }, "tokenizer.ggml.tokens is missing"},
      {[](Meta& m) {
         m.set("tokenizer.ggml.tokens", GgufMeta::array(std::vector<int32_t>{1, 2}));
       },
       "tokenizer.ggml.tokens"},
      {[](Meta& m) { m.set("tokenizer.ggml.tokens", GgufMeta::string_array({})); }, "tokenizer.ggml.tokens is empty"},
      {[](Meta& m) {
         m.set("tokenizer.ggml.token_type", GgufMeta::array(std::vector<int32_t>{1, 1}));
       },
       "tokenizer.ggml.token_type has 2 entries for 262 tokens"},
      {[](Meta& m) {
         std::vector<int32_t> types(262, 1);
         types[7] = 9;
         m.set("tokenizer.ggml.token_type", GgufMeta::array(types));
       },
       "tokenizer.ggml.token_type[7] is 9"},
      {[](Meta& m) {
         std::vector<std::string> tokens(262, "x");
         for (int i = 0; i < 262; ++i) tokens[i] = "t" + std::to_string(i);
         tokens[100] = "t5";
         m.set("tokenizer.ggml.tokens", GgufMeta::string_array(tokens));
       },
       "tokenizer.ggml.tokens[100] \"t5\" repeats token 5"},
      {[](Meta& m) {
         std::vector<std::string> tokens(262);
         for (int i = 0; i < 262; ++i) tokens[i] = "t" + std::to_string(i);
         tokens[3] = "";
         m.set("tokenizer.ggml.tokens", GgufMeta::string_array(tokens));
       },
       "tokenizer.ggml.tokens[3] is empty"},
      {[](Meta& m) {
         std::vector<std::string> tokens(262);
         for (int i = 0; i < 262; ++i) tokens[i] = "t" + std::to_string(i);
         tokens[4] = "\xC3";
         m.set("tokenizer.ggml.tokens", GgufMeta::string_array(tokens));
       },
       "invalid UTF-8 in tokenizer.ggml.tokens[4]"},
      {[](Meta& m) { m.erase("tokenizer.ggml.merges"); }, "tokenizer.ggml.merges is missing"},
      {[](Meta& m) {
         m.set("tokenizer.ggml.merges", GgufMeta::string_array({"h e", "Ġt"}));
       },
       "tokenizer.ggml.merges[1] \"Ġt\" is not \"left right\""},
      {[](Meta& m) {
         m.set("tokenizer.ggml.merges", GgufMeta::string_array({"h e", "x y"}));
       },
       "tokenizer.ggml.merges: merge #1 uses \"xy\", which is not in the vocab"},
      {[](Meta& m) { m.set("tokenizer.ggml.merges", GgufMeta::string_array({"<|end|>x e"})); },
       "merge #0 uses \"<|end|>x\", which is not in the vocab"},
      {[](Meta& m) { m.set("tokenizer.ggml.bos_token_id", GgufMeta::u32(262)); },
       "tokenizer.ggml.bos_token_id is 262, outside the vocabulary of 262 tokens"},
      {[](Meta& m) { m.set("tokenizer.ggml.eos_token_id", GgufMeta::string("1")); }, "tokenizer.ggml.eos_token_id"},
      {[](Meta& m) { m.erase("tokenizer.ggml.bos_token_id"); },
       "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing"},
      {[](Meta& m) { m.set("tokenizer.ggml.add_bos_token", GgufMeta::u8(1)); }, "tokenizer.ggml.add_bos_token"},
  };
  for (const auto& c : cases) {
    Meta m;
    c.edit(m);
    const std::string msg = load_error(m);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "expected \"" << c.expected << "\" in: " << msg;
  }
}

TEST(TokenizerGguf, ForModel) {
  ScratchDir dir;
  // A GGUF without tokenizer metadata, and a directory without a tokenizer: none.
  GgufWriter bare;
  bare.set_string("general.architecture", "qwen3moe");
  bare.write_file(dir.path() / "bare.gguf", {});
  EXPECT_TRUE(Tokenizer::for_model(dir.path() / "bare.gguf") == nullptr);
  EXPECT_TRUE(Tokenizer::for_model(dir.path()) == nullptr);
  // With tokenizer metadata, and a checkpoint directory.
  ASSERT_TRUE(Tokenizer::for_model(Meta().write(dir.path() / "t.gguf")) != nullptr);
  std::ofstream(dir.path() / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}})";
  ASSERT_TRUE(Tokenizer::for_model(dir.path()) != nullptr);
  EXPECT_EQ(Tokenizer::for_model(dir.path())->encode("a"), (Ids{0}));
  // Broken tokenizer metadata is an error, not "no tokenizer".
  EXPECT_THROW(Tokenizer::for_model(Meta().erase("tokenizer.ggml.merges").write(dir.path() / "broken.gguf")), Error);
  try {
    Tokenizer::for_model(dir.path() / "missing");
    FAIL() << "no error for a missing path";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such model directory or GGUF file"), std::string::npos) << e.what();
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// `strata <args>`: exit code, stdout, stderr.
std::tuple<int, std::string, std::string> run_strata(const std::string& args) {
  ScratchDir tmp;
  const fs::path out = tmp.path() / "out", err = tmp.path() / "err";
  const int status =
      std::system((std::string(STRATA_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string()).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

TEST(TokenizerGguf, TokenizeCliReadsGguf) {
  ScratchDir dir;
  const std::string model = "--model " + Meta().write(dir.path() / "t.gguf").string();
  auto [code, out, err] = run_strata("tokenize " + model + " --text ' the<think>' --prompt");
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(out, "259 258 260\n");
  std::tie(code, out, err) = run_strata("tokenize " + model + " --ids 258,261,259");
  EXPECT_EQ(out, " the<|end|>\n");
  GgufWriter bare;
  bare.set_string("general.architecture", "qwen3moe");
  bare.write_file(dir.path() / "bare.gguf", {});
  std::tie(code, out, err) = run_strata("tokenize --model " + (dir.path() / "bare.gguf").string() + " --text a");
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("bare.gguf: no tokenizer metadata (tokenizer.ggml.model) in this GGUF file"), std::string::npos)
      << err;
}

// --- the writer on hand-made tokenizer.json files -----------------------------

// A GPT-2-style tokenizer.json: bytes, "he", a special and a non-special
// added token.
json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  return {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"h", "e"})})}}},
      {"added_tokens", json::array({{{"id", 257}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 258}, {"content", "▁tag▁"}, {"special", false}}})},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {257}}}}}}}},
  };
}

TEST(TokenizerGguf, WriterOnHandMadeTokenizers) {
  ScratchDir dir;
  std::ofstream(dir.path() / "tokenizer.json") << tiny_tokenizer_json().dump();
  std::ofstream(dir.path() / "tokenizer_config.json") << R"({"bos_token": "<s>", "chat_template": [
      {"name": "default", "template": "D"}, {"name": "tool use", "template": "T"}]})";
  GgufWriter w;
  write_tokenizer_to_gguf(dir.path(), w, {.vocab_size = 260});
  w.write_file(dir.path() / "t.gguf", {});
  const GgufFile f(dir.path() / "t.gguf");
  EXPECT_EQ(keys_of(f),
            (std::vector<std::string>{
                "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token",
                "tokenizer.chat_template.tool_use", "tokenizer.chat_templates", "tokenizer.chat_template"}));
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
  std::vector<int64_t> types(256, 1);
  for (int64_t t : {1, 3, 4, 5}) types.push_back(t);
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type"), types);
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens[258], " tag ");  // the converter turns U+2581 into spaces in user-defined tokens
  EXPECT_EQ(tokens[259], "[PAD259]");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges"), (std::vector<std::string_view>{"h e"}));
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 257);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));  // the post_processor template starts with <s>
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), "D");
  EXPECT_EQ(f.get_string("tokenizer.chat_template.tool_use"), "T");

  const auto gguf = Tokenizer::from_gguf(f);
  const auto hf = Tokenizer::from_dir(dir.path());
  for (const char* s : {"hehe<s>", "the hen's 12 eggs!", " <s> he"}) {
    EXPECT_EQ(gguf->encode(s), hf->encode(s)) << s;
    EXPECT_EQ(gguf->encode_prompt(s), hf->encode_prompt(s)) << s;
  }
  EXPECT_EQ(gguf->encode_prompt("he"), (Ids{257, 256}));
  EXPECT_EQ(gguf->chat_template(), "D");
  EXPECT_EQ(hf->chat_template(), "D");

  // A key the writer already holds.
  GgufWriter w2;
  w2.set_string("tokenizer.ggml.model", "gpt2");
  EXPECT_THROW(write_tokenizer_to_gguf(dir.path(), w2), Error);
}

// The error write_tokenizer_to_gguf gives for a tokenizer.json.
std::string writer_error(const json& tokenizer, const GgufTokenizerOptions& options = {}) {
  ScratchDir dir;
  std::ofstream(dir.path() / "tokenizer.json") << tokenizer.dump();
  GgufWriter w;
  try {
    write_tokenizer_to_gguf(dir.path(), w, options);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "written";
  return "";
}

TEST(TokenizerGguf, WriterErrors) {
  json t = tiny_tokenizer_json();
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}},
                                     {{"type", "ByteLevel"}, {"add_prefix_space", false}}})}};
  EXPECT_NE(writer_error(t).find("tokenizer.json: its normalizer and pre_tokenizer are not those of a GGUF "
                                 "pre-tokenizer strata knows (deepseek-v3, qwen2, gpt-4o, gpt-2, default)"),
            std::string::npos)
      << writer_error(t);
  {
    ScratchDir dir;  // ... unless named
    std::ofstream(dir.path() / "tokenizer.json") << t.dump();
    GgufWriter w;
    write_tokenizer_to_gguf(dir.path() / "tokenizer.json", w, {.pre = "llama-bpe"});
    w.write_file(dir.path() / "t.gguf", {});
    EXPECT_EQ(GgufFile(dir.path() / "t.gguf").get_string("tokenizer.ggml.pre"), "llama-bpe");
  }
  json nfc = tiny_tokenizer_json();  // GPT-2's pre-tokenizer after NFC is no known one either
  nfc["normalizer"] = {{"type", "NFC"}};
  EXPECT_NE(writer_error(nfc).find("are not those of a GGUF pre-tokenizer"), std::string::npos);

  json ignore = tiny_tokenizer_json();
  ignore["model"]["ignore_merges"] = true;
  EXPECT_NE(writer_error(ignore).find("model.ignore_merges cannot be expressed"), std::string::npos);
  json wordpiece = tiny_tokenizer_json();
  wordpiece["model"]["type"] = "WordPiece";
  EXPECT_NE(writer_error(wordpiece).find("model type is not BPE"), std::string::npos);
  json no_merges = tiny_tokenizer_json();
  no_merges["model"]["merges"] = json::array();
  EXPECT_NE(writer_error(no_merges).find("model.merges is missing or empty"), std::string::npos);
  EXPECT_NE(writer_error(tiny_tokenizer_json(), {.vocab_size = 200})
                .find("vocab_size 200 does not cover the tokenizer's largest id 258"),
            std::string::npos);

  ScratchDir dir;
  GgufWriter w;
  std::ofstream(dir.path() / "tiktoken.model") << "QQ== 0\n";
  try {
    write_tokenizer_to_gguf(dir.path(), w);
    FAIL() << "wrote a tiktoken.model tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiktoken.model tokenizers cannot be written to GGUF"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
