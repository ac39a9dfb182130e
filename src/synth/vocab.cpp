#include "synth/vocab.h"

#include <fstream>
#include <unordered_set>

#include "tokenizer/gguf_tokenizer_writer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata::synth {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to
// U+0100 onwards.
std::vector<std::string> byte_tokens() {
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xa1; b <= 0xac; ++b) printable[b] = true;
  for (int b = 0xae; b <= 0xff; ++b) printable[b] = true;
  std::vector<std::string> out(256);
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) out[b] = printable[b] ? utf8(static_cast<uint32_t>(b)) : utf8(256 + n++);
  return out;
}

struct Specials {
  std::vector<const char*> names;
  int bos;  // index into names, -1: none
  int eos;
  int pad;
  bool add_bos;
  const char* pre;
};

Specials specials_of(Arch arch) {
  switch (arch) {
    case Arch::DeepseekV3:
      return {{"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>"}, 0, 1, 1, true, "deepseek-v3"};
    case Arch::Qwen3Moe: return {{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, 0, 2, 0, false, "qwen2"};
    case Arch::GptOss: return {{"<|start|>", "<|end|>", "<|return|>"}, -1, 2, 1, false, "gpt-4o"};
    // Kimi K3: a turn ends with <|end_of_msg|> (its config's eos_token_id);
    // its chat encoding's markup tokens make `serve` work on a random model.
    case Arch::KimiK3:
      return {{"[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"}, 0, 2, 1, false, "deepseek-v3"};
  }
  return {};
}

}  // namespace

SyntheticVocab synthetic_vocab(int64_t size, Arch arch) {
  if (size < kMinSyntheticVocab)
    throw Error("a synthetic vocabulary needs at least " + std::to_string(kMinSyntheticVocab) + " tokens");
  const Specials sp = specials_of(arch);
  SyntheticVocab v;
  v.tokens = byte_tokens();
  v.types.assign(256, 1);
  std::unordered_set<std::string> have(v.tokens.begin(), v.tokens.end());
  const int64_t room = size - static_cast<int64_t>(sp.names.size());
  // Letter n-grams, breadth first: level 1 is a space or a letter, each
  // level appends a letter to every token of the previous one (merge
  // "prefix letter"), so every merge's parts exist before it.
  std::vector<std::string> letters, level{v.tokens[' ']};
  for (int ch = 'a'; ch <= 'z'; ++ch) letters.push_back(v.tokens[ch]);
  level.insert(level.end(), letters.begin(), letters.end());
  while (static_cast<int64_t>(v.tokens.size()) < room && !level.empty()) {
    std::vector<std::string> next;
    for (const std::string& a : level) {
      for (const std::string& b : letters) {
        if (static_cast<int64_t>(v.tokens.size()) >= room) break;
        if (!have.insert(a + b).second) continue;
        v.merges.push_back(a + " " + b);
        v.tokens.push_back(a + b);
        v.types.push_back(1);
        next.push_back(a + b);
      }
    }
    level = std::move(next);
  }
  while (static_cast<int64_t>(v.tokens.size()) < room) {
    v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
    v.types.push_back(5);  // UNUSED
  }
  for (const char* name : sp.names) {
    v.specials.push_back(static_cast<int32_t>(v.tokens.size()));
    v.tokens.push_back(name);
    v.types.push_back(3);  // CONTROL
  }
  if (sp.bos >= 0) v.bos = v.specials[sp.bos];
  v.eos = v.specials[sp.eos];
  v.pad = v.specials[sp.pad];
  v.add_bos = sp.add_bos;
  v.pre = sp.pre;
  return v;
}

TokenizerInfo synthetic_tokenizer_info(int64_t size, Arch arch) {
  const Specials sp = specials_of(arch);
  TokenizerInfo t;
  t.synthetic = true;
  t.vocab = size;
  const int32_t first = static_cast<int32_t>(size - static_cast<int64_t>(sp.names.size()));
  if (sp.bos >= 0) t.bos = first + sp.bos;
  t.eos = {first + sp.eos};
  t.pad = first + sp.pad;
  t.add_bos = sp.add_bos;
  return t;
}

TokenizerInfo read_tokenizer(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  TokenizerInfo t;
  t.synthetic = false;
  if (fs::is_directory(p, ec)) {
    t.dir = p;
  } else if (fs::is_regular_file(p, ec)) {
    if (p.filename() != "tokenizer.json" && p.filename() != "tiktoken.model")
      throw Error(path + ": --tokenizer must be a tokenizer.json (or a directory with one)");
    t.dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  } else {
    throw Error(path + ": no such tokenizer file or directory");
  }
  if (!Tokenizer::dir_has_tokenizer(t.dir)) throw Error(t.dir.string() + ": no tokenizer.json or tiktoken.model");
  auto tok = Tokenizer::from_dir(t.dir);
  t.vocab = static_cast<int64_t>(tok->vocab_size());
  t.bos = tok->bos_id();
  t.eos = tok->eos_ids();
  t.tokenizer_json = t.dir / (fs::exists(t.dir / "tokenizer.json") ? "tokenizer.json" : "tiktoken.model");
  for (const char* name :
       {"tokenizer.json", "tiktoken.model", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
    if (fs::is_regular_file(t.dir / name, ec)) t.files.push_back(t.dir / name);
  if (fs::exists(t.dir / "tokenizer_config.json")) {
    const json c = read_json_file(t.dir / "tokenizer_config.json");
    if (c.is_object() && c.contains("add_bos_token") && c["add_bos_token"].is_boolean())
      t.add_bos = c["add_bos_token"].get<bool>();
  }
  return t;
}

json tokenizer_json(const SyntheticVocab& v) {
  json vocab = json::object();
  std::unordered_set<int32_t> special(v.specials.begin(), v.specials.end());
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (!special.count(static_cast<int32_t>(i))) vocab[v.tokens[i]] = i;
  json added = json::array();
  for (int32_t id : v.specials)
    added.push_back({{"id", id},
                     {"content", v.tokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", v.merges}}}};
}

json tokenizer_config_json(const SyntheticVocab& v, int64_t max_length) {
  json c = {{"add_bos_token", v.add_bos},
            {"add_eos_token", false},
            {"clean_up_tokenization_spaces", false},
            {"model_max_length", max_length},
            {"tokenizer_class", "PreTrainedTokenizerFast"},
            {"eos_token", v.tokens[v.eos]},
            {"pad_token", v.tokens[v.pad]}};
  c["bos_token"] = v.bos ? json(v.tokens[*v.bos]) : json(nullptr);
  return c;
}

void add_gguf_vocab(GgufWriter& w, const Plan& p) {
  if (!p.tokenizer.synthetic) {
    // The real tokenizer as convert_hf_to_gguf.py writes it, padded to the
    // embedding's rows with [PAD<id>] tokens.
    GgufTokenizerOptions o;
    o.vocab_size = p.config.vocab_size;
    write_tokenizer_to_gguf(p.tokenizer.tokenizer_json, w, o);
    return;
  }
  const SyntheticVocab v = synthetic_vocab(p.config.vocab_size, p.config.arch);
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_strings("tokenizer.ggml.tokens", v.tokens);
  w.set("tokenizer.ggml.token_type", GgufMeta::array(v.types));
  w.set_strings("tokenizer.ggml.merges", v.merges);
  if (v.bos) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*v.bos));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
  w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad));
  w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

}  // namespace strata::synth
