#pragma once
// Vocabularies for synthesized models: a synthetic byte-level BPE one (what
// a model gets without --tokenizer), or the facts synth needs from a real
// tokenizer (its size and special ids).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/gguf_writer.h"
#include "synth/synth.h"

namespace strata::synth {

// GPT-2 style byte-level BPE: the 256 byte tokens, then letter n-grams
// (" a", "ab", " ab", "abc", ...; each a merge of a shorter one and a letter)
// until the vocabulary is full, and control tokens at the end named as the
// architecture's real ones (DeepSeek <｜begin▁of▁sentence｜>..., Qwen
// <|endoftext|>..., gpt-oss <|start|>..., Kimi K3's chat markup). Random models then "write"
// letter gibberish rather than filler tokens.
struct SyntheticVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // llama.cpp token types: 1 normal, 3 control, 5 unused
  std::vector<std::string> merges;
  std::vector<int32_t> specials;  // ids of the control tokens
  std::optional<int32_t> bos;
  int32_t eos = 0, pad = 0;
  bool add_bos = false;
  std::string pre;  // tokenizer.ggml.pre
};

constexpr int64_t kMinSyntheticVocab = 512;

SyntheticVocab synthetic_vocab(int64_t size, Arch arch);
// The ids a synthetic vocabulary of `size` gives (without building it).
TokenizerInfo synthetic_tokenizer_info(int64_t size, Arch arch);

// A real tokenizer: `path` is a tokenizer.json or a directory holding one
// (or Kimi's tiktoken.model), loaded with strata's tokenizer for its size
// and special ids. Throws strata::Error naming the file.
TokenizerInfo read_tokenizer(const std::string& path);

// HF tokenizer.json / tokenizer_config.json for a synthetic vocabulary.
nlohmann::json tokenizer_json(const SyntheticVocab& v);
nlohmann::json tokenizer_config_json(const SyntheticVocab& v, int64_t max_length);

// tokenizer.ggml.* metadata for the model's vocabulary.
void add_gguf_vocab(GgufWriter& w, const Plan& p);

}  // namespace strata::synth
